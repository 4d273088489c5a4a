"""kube.list_pages as the API server paginates (``limit``/``continue``, k8s.io/apiserver's list semantics): pages
follow the continue token until the last page has none, the list's resourceVersion comes with each page, and an
expired token (410 Gone) is raised at once, not retried, so the caller lists again from the start."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from cardquota import kube
from cardquota.kube import Gone, api_error, list_pages


def paginating(items: list[dict[str, Any]], limit_seen: list[int], *, expire_after: int | None = None) -> Any:
    """A fake GET: pages of ``limit`` objects with an opaque continue token (an offset), 410 once the token has
    been used ``expire_after`` times."""
    used = [0]

    def get(_api: object, path: str) -> Mapping[str, Any]:
        query = parse_qs(urlsplit(path).query)
        limit = int(query["limit"][0])
        limit_seen.append(limit)
        start = int(query.get("continue", ["0"])[0])
        if start:
            used[0] += 1
            if expire_after is not None and used[0] > expire_after:
                raise api_error(f"GET {path}: HTTP 410: the provided continue parameter is too old", 410)
        end = start + limit
        metadata: dict[str, Any] = {"resourceVersion": "4242"}
        if end < len(items):
            metadata["continue"] = str(end)
        return {"metadata": metadata, "items": items[start:end]}

    return get


def pods(count: int) -> list[dict[str, Any]]:
    return [{"metadata": {"name": f"p{index}", "namespace": "ml"}} for index in range(count)]


def test_pages_follow_the_continue_token_to_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    limits: list[int] = []
    size = kube.LIST_PAGE_SIZE
    monkeypatch.setattr(kube, "_get", paginating(pods(2 * size + 1), limits))
    pages = list(list_pages(object(), "/api/v1/pods", "v1", "Pod"))  # type: ignore[arg-type]
    assert [len(page.items) for page in pages] == [size, size, 1]
    assert [page.last for page in pages] == [False, False, True]
    assert {page.resource_version for page in pages} == {"4242"}
    assert limits == [size] * 3
    assert pages[0].items[0] == {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p0", "namespace": "ml"}}


def test_an_expired_continue_token_is_gone_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    limits: list[int] = []
    monkeypatch.setattr(kube, "_get", paginating(pods(30), limits, expire_after=1))
    monkeypatch.setattr(kube.time, "sleep", lambda _: pytest.fail("a 410 must not be retried"))
    pages = list_pages(object(), "/api/v1/pods", "v1", "Pod", limit=10)  # type: ignore[arg-type]
    assert len(next(pages).items) == 10
    assert len(next(pages).items) == 10
    with pytest.raises(Gone):
        next(pages)
