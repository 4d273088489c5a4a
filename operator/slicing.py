"""Work on the event loop cut into slices of time, so that admissions arriving meanwhile wait at most one slice: the
publisher's windows and the reflectors' lists and watch bursts; and the loop that runs a controller's rounds."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

SLICE = 0.002
"""The longest a stretch of synchronous work runs before the event loop is given back (seconds): an admission
arriving meanwhile waits at most about this long."""


@dataclass
class Slicer:
    """Cuts work into slices: :meth:`tick`, called between two pieces of work, gives the event loop back once the
    current stretch of synchronous work has lasted ``budget`` seconds."""

    budget: float = SLICE
    clock: Callable[[], float] = time.perf_counter
    yields: int = 0
    _started: float = 0.0

    def restart(self) -> None:
        """A stretch starts (after any await: the loop has just run other work)."""
        self._started = self.clock()

    async def tick(self) -> None:
        if self.clock() - self._started >= self.budget:
            await asyncio.sleep(0)
            self.yields += 1
            self._started = self.clock()


async def every(seconds: float, round_: Callable[[], Awaitable[object]], logger: logging.Logger, failed: str) -> None:
    """Run ``round_`` every ``seconds``, for ever. A round that raises is logged (``failed``) and the next one
    retries: a bad round must not stop the controller."""
    while True:
        await asyncio.sleep(seconds)
        try:
            await round_()
        except Exception:
            logger.exception(failed)
