"""kube.list_pages as the API server paginates (``limit``/``continue``, k8s.io/apiserver's list semantics): pages
follow the continue token until the last page has none, the list's resourceVersion comes with each page; a page
throttled (429 with ``Retry-After``) is asked for again after the wait the server named, with the same continue
token, and once its retries are spent, again from the caller's :class:`ListProgress`, never from the first page; an
expired continue token (410 ``Expired`` on page 2 or later) falls back to one unpaginated list, as client-go's pager
does (k8s.io/client-go v0.36.3, tools/pager/pager.go, ``ListPager.List`` with ``FullListIfExpired``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cardquota import kube
from cardquota.kube import (
    RETRY_AFTER_MAX_SECONDS,
    Gone,
    ListProgress,
    Throttled,
    Unreachable,
    api_error,
    list_pages,
    retry_after_seconds,
    retry_wait,
    with_retries,
)


def pods(count: int) -> list[dict[str, Any]]:
    return [{"metadata": {"name": f"p{index}", "namespace": "ml"}} for index in range(count)]


@dataclass
class Paginating:
    """A fake API server: pages of ``limit`` objects with an opaque continue token (an offset); ``faults`` maps a
    request number (1-based, every GET counted) to the error it answers instead. An unpaginated GET (no ``limit``)
    is served whole, from ``now`` (the state after the pages' snapshot), with resourceVersion ``now_version``."""

    items: list[dict[str, Any]]
    faults: dict[int, Exception] = field(default_factory=dict)
    now: list[dict[str, Any]] | None = None
    now_version: str = "5000"
    queries: list[dict[str, list[str]]] = field(default_factory=list)

    def get(self, _api: object, path: str) -> Mapping[str, Any]:
        query = parse_qs(urlsplit(path).query)
        self.queries.append(query)
        if (fault := self.faults.get(len(self.queries))) is not None:
            raise fault
        assert "limit" in query, "an unpaginated list is read as text"
        limit = int(query["limit"][0])
        start = int(query.get("continue", ["0"])[0])
        metadata: dict[str, Any] = {"resourceVersion": "4242"}
        if start + limit < len(self.items):
            metadata["continue"] = str(start + limit)
        return {"metadata": metadata, "items": self.items[start:start + limit]}

    def get_text(self, _api: object, path: str) -> str:
        query = parse_qs(urlsplit(path).query)
        self.queries.append(query)
        if (fault := self.faults.get(len(self.queries))) is not None:
            raise fault
        assert "limit" not in query
        assert "continue" not in query
        return json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": self.now_version},
                           "items": self.now if self.now is not None else self.items})


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits of kube.with_retries (recorded, not slept)."""
    waited: list[float] = []
    monkeypatch.setattr(kube.time, "sleep", waited.append)
    return waited


def serve(monkeypatch: pytest.MonkeyPatch, server: Paginating) -> Paginating:
    monkeypatch.setattr(kube, "_get", server.get)
    monkeypatch.setattr(kube, "_get_text", server.get_text)
    return server


def names(pages: list[kube.ListPage]) -> list[str]:
    return [item["metadata"]["name"] for page in pages for item in page.items]


def test_pages_follow_the_continue_token_to_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    size = kube.LIST_PAGE_SIZE
    server = serve(monkeypatch, Paginating(pods(2 * size + 1)))
    pages = list(list_pages(object(), "/api/v1/pods", "v1", "Pod"))  # type: ignore[arg-type]
    assert [len(page.items) for page in pages] == [size, size, 1]
    assert [page.last for page in pages] == [False, False, True]
    assert [page.restart for page in pages] == [True, False, False]
    assert {page.resource_version for page in pages} == {"4242"}
    assert [query["limit"] for query in server.queries] == [[str(size)]] * 3
    assert pages[0].items[0] == {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p0", "namespace": "ml"}}


def test_a_throttled_page_is_asked_again_after_the_wait_the_server_named(monkeypatch: pytest.MonkeyPatch,
                                                                       sleeps: list[float]) -> None:
    """Request 3 (page 3) is throttled with Retry-After: 7: the same page is asked again after 7 s (longer than the
    0.1 s backoff), and pages 1 and 2 are not asked for again."""
    server = serve(monkeypatch, Paginating(pods(30), faults={3: api_error("throttled", 429, retry_after=7)}))
    pages = list(list_pages(object(), "/api/v1/pods", "v1", "Pod", limit=10))  # type: ignore[arg-type]
    assert names(pages) == [f"p{index}" for index in range(30)]
    assert sleeps == [7.0]
    assert [query.get("continue") for query in server.queries] == [None, ["10"], ["20"], ["20"]]


def test_a_page_past_its_retries_is_asked_again_from_the_progress_not_from_page_1(
        monkeypatch: pytest.MonkeyPatch, sleeps: list[float]) -> None:
    throttled = {number: api_error("throttled", 429, retry_after=1) for number in range(2, 8)}  # page 2: 6 times
    server = serve(monkeypatch, Paginating(pods(30), faults=throttled))
    progress = ListProgress()
    pages = list_pages(object(), "/api/v1/pods", "v1", "Pod", progress, limit=10)  # type: ignore[arg-type]
    first = next(pages)
    with pytest.raises(Throttled):
        next(pages)
    assert progress.token == "10"
    rest = list(list_pages(object(), "/api/v1/pods", "v1", "Pod", progress, limit=10))  # type: ignore[arg-type]
    assert names([first, *rest]) == [f"p{index}" for index in range(30)]
    assert not any(page.restart for page in rest)
    assert [query.get("continue") for query in server.queries] == [None] + [["10"]] * 7 + [["20"]]
    assert sleeps == [1.0, 1.0, 1.0, 1.0, 1.6]  # the longer of Retry-After and the backoff, each time
    assert progress == ListProgress()  # done: the next list starts from the first page


def test_an_expired_continue_token_falls_back_to_one_unpaginated_list(monkeypatch: pytest.MonkeyPatch,
                                                                       sleeps: list[float]) -> None:
    """Page 3's token expired (410): the rest comes from one list without limit or continue, of the state now (p5
    deleted, p30 created meanwhile), in pages of the same size, the first marked restart so the reader forgets the
    older pages; each page carries that list's resourceVersion, the one to watch from. The 410 is not retried."""
    now = [item for item in pods(31) if item["metadata"]["name"] != "p5"]
    server = serve(monkeypatch, Paginating(pods(30), now=now, now_version="5000",
                                           faults={3: api_error("the continue token is too old", 410)}))
    progress = ListProgress()
    pages = list(list_pages(object(), "/api/v1/pods", "v1", "Pod", progress, limit=10))  # type: ignore[arg-type]
    assert [(len(page.items), page.restart, page.last) for page in pages] == [
        (10, True, False), (10, False, False), (10, True, False), (10, False, False), (10, False, False),
        (0, False, True)]
    assert names(pages[2:]) == [item["metadata"]["name"] for item in now]
    assert {page.resource_version for page in pages[2:]} == {"5000"}
    assert pages[2].items[0]["kind"] == "Pod"
    assert server.queries[3] == {}  # no limit, no continue, no resourceVersion: the most recent state
    assert len(server.queries) == 4
    assert sleeps == []
    assert progress == ListProgress()


def test_an_unpaginated_fallback_that_fails_is_resumed_as_one(monkeypatch: pytest.MonkeyPatch,
                                                              sleeps: list[float]) -> None:
    failing = {number: api_error("overloaded", 503) for number in range(3, 9)}  # the fallback: 6 times
    server = serve(monkeypatch, Paginating(pods(20), faults={2: api_error("expired", 410), **failing}))
    progress = ListProgress()
    pages = list_pages(object(), "/api/v1/pods", "v1", "Pod", progress, limit=10)  # type: ignore[arg-type]
    next(pages)
    with pytest.raises(kube.ServerError):
        next(pages)
    assert progress.unpaginated
    rest = list(list_pages(object(), "/api/v1/pods", "v1", "Pod", progress, limit=10))  # type: ignore[arg-type]
    assert rest[0].restart
    assert names(rest) == [f"p{index}" for index in range(20)]
    assert server.queries[-1] == {}


def test_a_410_on_the_first_page_is_raised() -> None:
    """client-go falls back only when page 2 or later expires; the first page has no token to expire."""
    server = Paginating(pods(5), faults={1: api_error("too old resource version", 410)})
    with pytest.MonkeyPatch.context() as patch:
        serve(patch, server)
        with pytest.raises(Gone):
            list(list_pages(object(), "/api/v1/pods", "v1", "Pod"))  # type: ignore[arg-type]


@pytest.mark.parametrize(("status", "header", "seconds"), [
    (429, "3", 3.0), (503, "1", 1.0), (500, " 2 ", 2.0), (429, None, None), (429, "soon", None),
    (429, "1.5", None), (429, "-1", None), (429, "Fri, 27 Nov 2026 05:00:00 GMT", None), (409, "3", None),
    (410, "3", None)])
def test_retry_after_is_read_as_client_go_reads_it(status: int, header: str | None, seconds: float | None) -> None:
    """rest/with_retry.go checkWait: only a 429 or a 5xx; rest/request.go retryAfterSeconds: whole seconds only."""
    assert retry_after_seconds(status, header) == seconds


@pytest.mark.parametrize(("backoff", "asked", "wait"), [
    (0.1, None, 0.1), (0.1, 7.0, 7.0), (1.6, 1.0, 1.6), (0.1, 3600.0, RETRY_AFTER_MAX_SECONDS)])
def test_the_wait_is_the_longer_of_the_backoff_and_retry_after_bounded(backoff: float, asked: float | None,
                                                                      wait: float) -> None:
    assert retry_wait(backoff, api_error("throttled", 429, retry_after=asked)) == wait


def test_with_retries_waits_what_the_server_asks() -> None:
    answers: list[Exception | str] = [api_error("throttled", 429, retry_after=4), api_error("down", 503), "done"]
    waits: list[float] = []

    def action() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert with_retries(action, sleep=waits.append) == "done"
    assert waits == [4.0, 0.2]


items_strategy = st.lists(st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({"name": st.text(min_size=1, max_size=8)}),
    "spec": st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=5), st.none(),
                                                           st.lists(st.booleans(), max_size=3)), max_size=3)}),
    max_size=25)


@given(items=items_strategy, limit=st.integers(min_value=1, max_value=7), indent=st.sampled_from([None, 0, 2]),
       items_first=st.booleans())
def test_a_whole_list_is_read_in_parts_equal_to_json_loads(items: list[dict[str, Any]], limit: int,
                                                           indent: int | None, items_first: bool) -> None:
    """kube._list_parts (the unpaginated fallback, decoded an item at a time) reads what json.loads reads, in
    parts of ``limit``, however the JSON is spaced; the resourceVersion is known once metadata is read (last when it
    comes after the items)."""
    fields: list[tuple[str, Any]] = [("kind", "PodList"), ("metadata", {"resourceVersion": "77"}), ("items", items)]
    if items_first:
        fields.reverse()
    text = json.dumps(dict(fields), indent=indent)
    parts = list(kube._list_parts(text, limit))
    assert [item for part, _, _ in parts for item in part] == json.loads(text)["items"]
    assert all(0 < len(part) <= limit for part, _, _ in parts[:-1])
    assert [last for _, _, last in parts] == [False] * (len(parts) - 1) + [True]
    assert parts[-1][1] == "77"


@pytest.mark.parametrize("text", ["", "[]", '{"items": [{"a": 1}', '{"items" [] }', "null"])
def test_a_whole_list_that_is_not_json_is_one_error(text: str) -> None:
    with pytest.raises(Unreachable, match="not a JSON list"):
        list(kube._list_parts(text, 10))


@given(count=st.integers(min_value=0, max_value=40), limit=st.integers(min_value=1, max_value=9),
       faults=st.dictionaries(st.integers(min_value=1, max_value=40), st.sampled_from([429, 503, 410]), max_size=25))
@example(count=10, limit=1,  # a 410 on page 10, then the unpaginated fallback throttled past its retries and 410
         faults={**dict.fromkeys([*range(1, 8), *range(18, 23)], 429), 17: 410, 23: 410})
def test_a_list_through_any_faults_ends_with_one_consistent_snapshot(count: int, limit: int,
                                                                     faults: dict[int, int]) -> None:
    """Whatever the API server answers along the way (throttling, server errors, expired tokens), a caller that
    calls list_pages again with its progress after each failure gathers exactly one snapshot: the paginated one,
    or, once a continue token expired, the current one — never a mix; and no page is asked for again but the one
    that failed."""
    server = Paginating(pods(count), faults={number: api_error(f"HTTP {status}", status, retry_after=1)
                                             for number, status in faults.items()},
                        now=pods(count + 3)[3:], now_version="5000")
    with pytest.MonkeyPatch.context() as patch:
        serve(patch, server)
        patch.setattr(kube.time, "sleep", lambda _: None)
        progress, gathered, versions = ListProgress(), [], set()
        for _ in range(len(faults) + 2):
            try:
                for page in list_pages(object(), "/api/v1/pods", "v1", "Pod", progress,  # type: ignore[arg-type]
                                       limit=limit):
                    if page.restart:
                        gathered, versions = [], set()
                    gathered.extend(item["metadata"]["name"] for item in page.items)
                    versions.add(page.resource_version)
                break
            except Gone:
                # Only on the first page, which has no token to fall back from, or on the unpaginated fallback
                # itself (a real API server does not answer a list without resourceVersion with 410: it is a quorum
                # read), which the next call asks for again rather than the pages.
                assert progress in (ListProgress(), ListProgress(unpaginated=True))
            except (Throttled, kube.ServerError):
                pass
        else:
            pytest.fail("the list did not end")
    fell_back = any(not query for query in server.queries)
    expected = pods(count + 3)[3:] if fell_back else pods(count)
    assert gathered == [item["metadata"]["name"] for item in expected]
    assert versions == {"5000" if fell_back else "4242"}
    asked = [query.get("continue", [""])[0] for query in server.queries if query]
    answered = [token for number, token in enumerate(asked, 1) if number not in faults]
    assert len(answered) == len(set(answered))  # each page answered once (a page asked again had failed)
