"""A supervised loop is started again after it stops with an exception, after waits that double and start over once
it ran long; a cancelled one stays stopped."""

from __future__ import annotations

import asyncio
import logging

import pytest

from cardquota.runtime import supervision
from cardquota.runtime.supervision import supervised


class Clock:
    """Time that moves only when the supervisor sleeps or a run says how long it lasted."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


@pytest.mark.parametrize(("runs", "waits"), [
    pytest.param([0, 0, 0], [1, 2, 4], id="stopping at once: the wait doubles"),
    pytest.param([0] * 8, [1, 2, 4, 8, 16, 32, 60, 60], id="at most a minute"),
    pytest.param([0, 0, 0, 120, 0], [1, 2, 4, 1, 2], id="a run longer than a minute starts the waits over"),
])
async def test_a_loop_that_stops_is_started_again(runs: list[float], waits: list[float],
                                                  caplog: pytest.LogCaptureFixture) -> None:
    clock, started, stops = Clock(), [], []

    async def loop() -> None:
        started.append(clock.now)
        if len(started) <= len(runs):
            clock.now += runs[len(started) - 1]
            raise RuntimeError(f"stop {len(started)}")

    await supervised("the test loop", loop, lambda: stops.append(None), sleep=clock.sleep, clock=clock)
    assert len(started) == len(runs) + 1  # the last run returned: supervision ended
    assert clock.waits == waits
    assert len(stops) == len(runs)
    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert errors[0].getMessage() == "the test loop stopped (RuntimeError: stop 1); starting it again in 1 s"
    assert errors[0].exc_info is not None


async def test_a_cancelled_loop_is_not_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervision, "FIRST_WAIT_SECONDS", 0.0)
    started: list[None] = []
    running = asyncio.Event()

    async def loop() -> None:
        started.append(None)
        running.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(supervised("the test loop", loop))
    await running.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(started) == 1
