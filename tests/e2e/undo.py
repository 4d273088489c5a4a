"""An undo log: every change the end-to-end suite makes to a cluster records its inverse before it is made, and the
inverses run, newest first, when the suite ends — passed, failed, interrupted (Ctrl-C) or terminated (SIGTERM).

Recording before acting means a change that fails half-way is undone too (each inverse tolerates what is already
gone: ``--ignore-not-found``, a patch against what was saved). An inverse that fails is reported and the rest still
run. :func:`restoring` is the one place that turns SIGTERM into the interrupt pytest already handles (its teardown
runs the fixtures' finalizers) and registers an ``atexit`` backstop for an exit that skips them.
"""

from __future__ import annotations

import atexit
import functools
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import TypeVar

T = TypeVar("T")


@dataclass
class UndoLog:
    """Inverses of the changes made so far, in the order they were made."""

    say: Callable[[str], None] = print
    steps: list[tuple[str, Callable[[], object]]] = field(default_factory=list)

    def record(self, what: str, inverse: Callable[[], object]) -> None:
        """Remember how to undo ``what`` (call it before making the change)."""
        self.steps.append((what, inverse))

    def change(self, what: str, inverse: Callable[[], object], action: Callable[[], T]) -> T:
        """Record ``inverse``, say what changes, then change it."""
        self.record(what, inverse)
        self.say(f"changing: {what}")
        return action()

    def undo(self) -> list[str]:
        """Run every inverse, newest first, each once; returns what could not be restored (and says so). An
        interrupt while restoring stops here, after saying what is left undone."""
        failed: list[str] = []
        while self.steps:
            what, inverse = self.steps.pop()
            self.say(f"restoring: {what}")
            try:
                inverse()
            except KeyboardInterrupt:
                left = [what] + [step for step, _ in reversed(self.steps)]
                self.steps.clear()
                self.say("interrupted while restoring; NOT restored: " + "; ".join(left))
                raise
            except Exception as error:  # one failed inverse must not keep the others from running
                failed.append(what)
                self.say(f"could NOT restore: {what}: {error}")
        return failed


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, so that the same teardown as for Ctrl-C runs."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"signal {signum}")


@contextmanager
def restoring(log: UndoLog) -> Iterator[UndoLog]:
    """Run ``log``'s inverses when the block ends, however it ends; SIGTERM ends it like Ctrl-C."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    backstop = functools.partial(_at_exit, log)  # this log's own (unregister drops every equal callable)
    atexit.register(backstop)
    try:
        yield log
    finally:
        try:
            log.undo()
        finally:
            atexit.unregister(backstop)
            signal.signal(signal.SIGTERM, previous)


def _at_exit(log: UndoLog) -> None:
    """The backstop for an exit that skipped the teardown: what is left, undone, said on stderr (whatever the log
    printed through may be gone by now)."""
    if log.steps:
        log.say = lambda line: print(f"[e2e] {line}", file=sys.stderr, flush=True)
        log.undo()
