"""The unpaginated list an expired continue token falls back to, decoded on a worker thread while the event loop
serves: the longest the loop waited for a turn, and the decode's total time.

    python bench/full_list.py [--pods 10000] [--rounds 3]

Subject: ``kube._list_parts`` consumed a page at a time through ``asyncio.to_thread``, as the reflector reads
``kube.list_pages``. Baseline: one ``json.loads`` of the same text on a worker thread. Both with the collector on,
the same text (``synthetic.realistic_pod``, a fifth pending), the same heartbeat task on the loop (a 1 ms sleep in a
loop, recording how late each wake-up came). Prints each round and the ratios (min-max over the rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import realistic_pod
from timing import collector

from cardquota import kube


def pod_list(pods: int) -> str:
    items = [realistic_pod(index, None if index % 5 == 0 else index % 500, max(pods // 8, 1)) for index in range(pods)]
    return json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5000"},
                       "items": items}, separators=(",", ":"))


async def longest_stall(work: Callable[[], Awaitable[int]]) -> tuple[float, float, int]:
    """(the longest wait of the loop's heartbeat past its 1 ms sleep, the work's seconds, the items it read)."""
    done = False
    worst = 0.0

    async def heartbeat() -> None:
        nonlocal worst
        while not done:
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - start - 0.001)

    beating = asyncio.create_task(heartbeat())
    await asyncio.sleep(0.01)
    start = time.perf_counter()
    count = await work()
    seconds = time.perf_counter() - start
    done = True
    await beating
    return worst, seconds, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    text = pod_list(arguments.pods)

    async def whole() -> int:
        return len((await asyncio.to_thread(json.loads, text))["items"])

    async def in_parts() -> int:
        parts = kube._list_parts(text, kube.LIST_PAGE_SIZE)
        count = 0
        while (part := await asyncio.to_thread(next, parts, None)) is not None:
            count += len(part[0])
        return count

    print(f"{arguments.pods} realistic pods, {len(text) / 1e6:.0f} MB of JSON; pages of {kube.LIST_PAGE_SIZE}")
    stall_ratios, time_ratios = [], []
    for number in range(1, arguments.rounds + 1):
        with collector(True):
            base_stall, base_seconds, base_count = asyncio.run(longest_stall(whole))
        with collector(True):
            stall, seconds, count = asyncio.run(longest_stall(in_parts))
        assert count == base_count == arguments.pods
        stall_ratios.append(stall / base_stall)
        time_ratios.append(seconds / base_seconds)
        print(f"round {number}: longest loop stall {stall * 1e3:.1f} ms in parts vs {base_stall * 1e3:.1f} ms for "
              f"one json.loads; decode {seconds:.2f} s vs {base_seconds:.2f} s")
    print(f"stall ratio (parts / json.loads): {min(stall_ratios):.3f}-{max(stall_ratios):.3f}; "
          f"time ratio: {min(time_ratios):.2f}-{max(time_ratios):.2f}")


if __name__ == "__main__":
    main()
