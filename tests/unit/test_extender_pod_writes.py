"""The extender's pod annotation writes end in their outcome, never in an exception: a write still under way when the
process stops (a pod deleted meanwhile, the API server refusing) must not become the stopping process's error. Kopf's
``run_tasks`` (kopf/_core/reactor/running.py) waits for the tasks created while it ran and reraises what they raised,
so a write task that raised took the extender down with ``PatchFailed: the pod is gone``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from cardquota.core.objects import Manifest
from cardquota.operator.extender import PatchFailed, _PodWrites

POD: Manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gone", "namespace": "ml"}}


@pytest.mark.parametrize("failure", [PatchFailed("the pod is gone"), ConnectionResetError("reset by peer")],
                         ids=["refused", "connection"])
async def test_a_failed_write_ends_in_its_reason(failure: Exception) -> None:
    async def patch(pod: Manifest, annotations: Mapping[str, str | None]) -> None:
        raise failure

    writes = _PodWrites(patch)
    task = writes.write_later(POD, {"example.com/a": None})
    await asyncio.wait([task])
    assert task.exception() is None
    assert task.result() == str(failure)
    assert await writes.write(POD, {"example.com/a": "1"}, 5.0) == str(failure)


async def test_a_write_that_succeeds_ends_in_none_and_writes_to_one_pod_go_in_order() -> None:
    written: list[str | None] = []
    first_may_end = asyncio.Event()

    async def patch(pod: Manifest, annotations: Mapping[str, str | None]) -> None:
        value = annotations["example.com/a"]
        if value == "first":
            await first_may_end.wait()
        written.append(value)

    writes = _PodWrites(patch)
    first = writes.write_later(POD, {"example.com/a": "first"})
    second = writes.write_later(POD, {"example.com/a": None})
    await asyncio.sleep(0)
    assert written == []
    first_may_end.set()
    assert list(await asyncio.gather(first, second)) == [None, None]
    assert written == ["first", None]
