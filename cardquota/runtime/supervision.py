"""A background loop kept running: started again, after a short wait, whenever it stops with an exception."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("cardquota.supervision")
FIRST_WAIT_SECONDS = 1.0
"""The wait before the first restart; doubled at each stop in a row."""
LONGEST_WAIT_SECONDS = 60.0
"""The longest wait before a restart; a run that lasted longer than this starts the waits over."""


async def supervised(name: str, loop: Callable[[], Awaitable[None]], on_stopped: Callable[[], None] | None = None, *,
                     sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                     clock: Callable[[], float] = time.monotonic) -> None:
    """Run ``loop()`` and run it again each time it stops with an exception, which is logged (with its traceback)
    and told to ``on_stopped`` (a metric counts them); the wait before each restart is :data:`FIRST_WAIT_SECONDS`,
    doubled while the loop keeps stopping, at most :data:`LONGEST_WAIT_SECONDS`. Ends when ``loop()`` returns, and
    with it when cancelled. ``name`` says what the loop does, for the log."""
    wait = FIRST_WAIT_SECONDS
    while True:
        started = clock()
        try:
            await loop()
            return
        except Exception as error:  # anything: the loop must outlive what it did not foresee
            if clock() - started > LONGEST_WAIT_SECONDS:
                wait = FIRST_WAIT_SECONDS
            log.error("%s stopped (%s: %s); starting it again in %g s", name, type(error).__name__, error, wait,
                      exc_info=True)
            if on_stopped is not None:
                on_stopped()
        await sleep(wait)
        wait = min(wait * 2, LONGEST_WAIT_SECONDS)
