"""Time and memory of one admission review on each worst case (tests/worst_cases.py): the largest and most hostile
objects the API server accepts (256 KiB of annotations, 3 MiB bodies, 10,000 levels of JSON nesting).

    python bench/worst_case.py [--repeats 15] [--case NAME ...] [--no-stall]

1. A review is what the server does with a body (webhooks.server.answer_review): read_review, the policy over a
   loaded cache (a ~300-type card catalog), the response encoded to JSON — for the validating and the mutating
   webhook. Its baseline is a no-op review of the same body (json.loads, then an ``allowed`` answer), in the same
   thread with the same GC settings (enabled, collected before each run). Per case: p50 and max milliseconds of each
   webhook, the p50 ratio to the no-op, the peak of extra memory (tracemalloc, in separate runs) of the review and of
   the no-op, and the warnings the validating answer carries (count and runes; the API server keeps 4,096 runes).
   Budget: 50 ms and 50 MiB.
2. Event-loop stall: the longest the event loop waits (a 1 ms ticker's worst lateness) while the case is reviewed
   as the server does it (``answer_body``: a body of at most 32 KiB read on the loop by json.loads, a larger or deeper
   one on a policy thread, the policy on the loop), and as the whole review would be on the loop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from measuring import peak_bytes
from timing import timed
from worst_cases import Case, cases, fleet

from cardquota.core.policies.config import PolicyConfig
from cardquota.runtime.cache import ClusterCache
from cardquota.webhooks.admission import Admission
from cardquota.webhooks.server import answer_body, answer_review

STACK_BYTES = 256 * 2**20
"""The bench's own thread: deep enough for json.loads of 10,000 levels in the no-op baseline (its recursion limit
is raised for that call only: the server reads with the interpreter's own)."""


def answer(admission: Admission, body: bytes, *, mutating: bool) -> dict[str, Any]:
    """What the server does with one body, up to the bytes it sends back."""
    status, sent = answer_review(admission, body, mutating)
    answered: dict[str, Any] = json.loads(sent)
    return answered if status == 200 else {"http": status, **answered}


def noop(body: bytes) -> bytes:
    try:
        review = json.loads(body)
    except RecursionError:  # 10,000 levels: json.loads with the recursion limit raised (Python 3.11) on this stack
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(20_000)
        try:
            review = json.loads(body)
        finally:
            sys.setrecursionlimit(limit)
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "response": {"uid": review["request"]["uid"], "allowed": True}}).encode()


def peak_mib(action: Callable[[], object]) -> float:
    return peak_bytes(action) / 2**20


def outcome(answered: dict[str, Any]) -> tuple[str, int, int]:
    if "http" in answered:
        return f"HTTP {answered['http']}", 0, 0
    result = answered["response"]
    warnings = result.get("warnings") or []
    return ("allowed" if result["allowed"] else "denied"), len(warnings), sum(len(w) for w in warnings)


def measure(admission: Admission, case: Case, repeats: int) -> str:
    validate = timed(lambda: answer(admission, case.body, mutating=False), repeats)
    mutate = timed(lambda: answer(admission, case.body, mutating=True), repeats)
    baseline = timed(lambda: noop(case.body), repeats)
    memory = peak_mib(lambda: answer(admission, case.body, mutating=False))
    memory_mutate = peak_mib(lambda: answer(admission, case.body, mutating=True))
    memory_noop = peak_mib(lambda: noop(case.body))
    verdict, count, runes = outcome(answer(admission, case.body, mutating=False))
    p50 = statistics.median(validate)
    noop_p50 = statistics.median(baseline)
    return (f"{case.name:34} {len(case.body) / 2**20:5.2f} MiB  validate {p50 * 1e3:7.1f}/{max(validate) * 1e3:7.1f} ms"
            f"  mutate {statistics.median(mutate) * 1e3:7.1f}/{max(mutate) * 1e3:7.1f} ms"
            f"  no-op {noop_p50 * 1e3:6.1f} ms  ratio {p50 / noop_p50:7.1f}x"
            f"  peak {max(memory, memory_mutate):7.1f} MiB (no-op {memory_noop:5.1f})"
            f"  {verdict:8} {count:3} warnings {runes:6} runes")


async def loop_stall(admission: Admission, body: bytes, *, on_loop: bool) -> float:
    """The worst lateness (s) of a 1 ms ticker on the event loop while one review of ``body`` runs."""
    done = asyncio.Event()
    worst = 0.0

    async def ticker() -> None:
        nonlocal worst
        while not done.is_set():
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - start - 0.001)

    ticking = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.01)
    worst = 0.0
    if on_loop:
        answer_review(admission, body, False)
    else:
        with ThreadPoolExecutor(1) as pool:
            await answer_body(admission, pool, body, False)
    done.set()
    await ticking
    return worst


def stalls(admission: Admission, case: Case, repeats: int) -> str:
    off = [asyncio.run(loop_stall(admission, case.body, on_loop=False)) for _ in range(repeats)]
    on = [asyncio.run(loop_stall(admission, case.body, on_loop=True)) for _ in range(repeats)]
    return (f"{case.name:34} event loop stalled at most {max(off) * 1e3:7.1f} ms as served; "
            f"{max(on) * 1e3:7.1f} ms were the whole review on the loop")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--case", action="append", default=[], help="only this case (repeatable)")
    parser.add_argument("--no-stall", action="store_true", help="skip part 2 (event-loop stall)")
    args = parser.parse_args()
    cache = ClusterCache()
    cache.load(fleet())
    admission = Admission(cache, PolicyConfig())
    corpus = [case for case in cases() if not args.case or case.name in args.case]
    print(f"{len(corpus)} worst cases, {args.repeats} runs each, card catalog of "
          f"{len(cache.ledger.snapshot.catalog().entries)} types; p50/max per review; budget 50 ms, 50 MiB")

    def run() -> None:
        print("1. one review (validating and mutating webhook) against a no-op review of the same body")
        for case in corpus:
            print(measure(admission, case, args.repeats), flush=True)
        if not args.no_stall:
            print("2. event-loop stall while one review runs")
            for case in corpus:
                print(stalls(admission, case, max(1, args.repeats // 5)), flush=True)

    threading.stack_size(STACK_BYTES)
    worker = threading.Thread(target=run, name="bench")
    worker.start()
    worker.join()


if __name__ == "__main__":
    main()
