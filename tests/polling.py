"""Waiting for asynchronous effects in tests without fixed sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def eventually(condition: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0) -> None:
    """Poll until ``condition`` holds (never a fixed sleep: kmock serves from the test's own event loop)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = condition()
        if await result if isinstance(result, Awaitable) else result:
            return
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)
