"""The kinds listed at start are tried until the API server answers: an API server unreachable or refusing while a
process starts leaves it serving, degraded, instead of ending it with an internal error (exit 3) once a request's
few retries are spent. client-go's reflectors (k8s.io/client-go tools/cache/reflector.go, ``ListAndWatch`` run by
``wait.BackoffUntil``) keep listing with backoff in the same way."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from cardquota.kube import Forbidden, Throttled, Unreachable
from cardquota.operator import watch
from cardquota.operator.reflector import BACKOFF_SECONDS


def failing_then(answers: list[BaseException | list[Mapping[str, Any]]]) -> Any:
    async def list_all_async(api: Any, resources: Any) -> list[Mapping[str, Any]]:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer
    return list_all_async


async def test_the_first_list_is_tried_until_the_api_server_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    failures: list[BaseException | list[Mapping[str, Any]]] = [Unreachable("refused", -1)] * 9
    monkeypatch.setattr(watch, "list_all_async", failing_then([*failures, Forbidden("no", 403), [node]]))
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    assert await watch.first_list(object(), None, sleep=sleep) == [node]
    assert waits == [*BACKOFF_SECONDS, BACKOFF_SECONDS[-1], BACKOFF_SECONDS[-1], BACKOFF_SECONDS[-1]]


async def test_the_first_list_waits_what_the_api_server_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    throttled = Throttled("slow down", 429, retry_after=7.0)
    monkeypatch.setattr(watch, "list_all_async", failing_then([throttled, []]))
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    assert await watch.first_list(object(), None, sleep=sleep) == []
    assert waits == [7.0]


async def test_the_first_list_ends_when_the_process_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    stop = asyncio.Event()
    monkeypatch.setattr(watch, "list_all_async", failing_then([Unreachable("refused", -1)] * 3))

    async def sleep(seconds: float) -> None:
        stop.set()

    assert await watch.first_list(object(), stop, sleep=sleep) is None
