"""Work on the event loop cut into slices of time, so that admissions arriving meanwhile wait at most one slice: the
publisher's windows and the reflectors' lists and watch bursts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
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
