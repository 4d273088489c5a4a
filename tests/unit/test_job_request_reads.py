"""The extender reads a ``jobEnqueueable`` / ``jobEnqueued`` body for its PodGroup only (``read_job_request``):
the verbs must see the same PodGroup as from the whole body read with ``json.loads`` — for what Volcano sends
(``JobEnqueueableRequest{Job *api.JobInfo `json:"job"`}``, pkg/scheduler/plugins/extender/argument.go, and
``api.JobInfo`` without json tags, so Go field names: pkg/scheduler/api/job_info.go, Volcano v1.15.1) and for
anything else a caller may send."""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import pod, podgroup
from hypothesis import given, settings
from hypothesis import strategies as st
from volcano_payloads import job_info

from cardquota.core.scheduling.extender import _job_key
from cardquota.operator import extender as served
from cardquota.operator.extender import read_job_request

A100 = "NVIDIA-A100"


def _realistic(pods: int) -> bytes:
    group = podgroup("train", namespace="ml", queue="team", phase="Pending", min_member=pods,
                     request={A100: pods})
    members = [pod(f"train-{index}", namespace="ml", card=A100, gpus=1, group="train") for index in range(pods)]
    return json.dumps({"job": job_info(group, members)}).encode()


@pytest.mark.parametrize("pods", [0, 8, 200])
def test_what_volcano_sends_is_read_for_its_podgroup_without_decoding_the_tasks(
        pods: int, monkeypatch: pytest.MonkeyPatch) -> None:
    body = _realistic(pods)
    expected = _job_key(json.loads(body))
    assert expected == ("ml", "train")

    def whole(_: object) -> None:
        raise AssertionError("the whole body was decoded")

    monkeypatch.setattr(served.json, "loads", whole)
    read = read_job_request(body)
    assert set(read["job"]) == {"PodGroup"}  # (no Tasks built)
    assert _job_key(read) == expected


KEYS = st.sampled_from(["job", "Job", "JOB", "PodGroup", "podgroup", "podGroup", "metadata", "Metadata", "spec",
                        "status", "name", "namespace", "Tasks", "Version", "minMember", "queue", ""])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                    st.text(max_size=8))
VALUES = st.recursive(SCALARS, lambda children: st.one_of(st.lists(children, max_size=4),
                                                          st.dictionaries(KEYS, children, max_size=5)),
                      max_leaves=20)
NAMES = st.text(min_size=0, max_size=6)


@st.composite
def job_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """Volcano's shape, bent: keys in other cases, fields missing or of the wrong type, extra fields anywhere."""
    metadata = draw(st.one_of(
        st.fixed_dictionaries({"name": NAMES, "namespace": NAMES}, optional={"uid": NAMES, "labels": VALUES}),
        VALUES))
    group = {draw(st.sampled_from(["metadata", "Metadata"])): metadata}
    for name in draw(st.lists(st.sampled_from(["spec", "status", "Version", "extra"]), unique=True)):
        group[name] = draw(st.one_of(VALUES, st.fixed_dictionaries(
            {}, optional={"minMember": st.integers(-5, 5), "queue": NAMES, "phase": NAMES})))
    job = {draw(st.sampled_from(["PodGroup", "podgroup", "PodGroup"])): draw(st.one_of(st.just(group), VALUES)),
           **draw(st.dictionaries(st.sampled_from(["Tasks", "Name", "Namespace", "MinAvailable"]), VALUES))}
    request = {draw(st.sampled_from(["job", "Job", "job"])): draw(st.one_of(st.just(job), VALUES))}
    request.update(draw(st.dictionaries(KEYS, VALUES, max_size=2)))
    return request


@settings(max_examples=250, deadline=None)
@given(job_bodies())
def test_the_podgroup_read_is_the_one_the_whole_body_gives(request: dict[str, Any]) -> None:
    body = json.dumps(request).encode()
    assert _job_key(read_job_request(body)) == _job_key(json.loads(body))


@settings(max_examples=150, deadline=None)
@given(job_bodies(), job_bodies(), st.sampled_from(["{}", '{"job": {}}', '{"job": {"PodGroup": {}}}',
                                                    '{"job": {"PodGroup": {"metadata": {}}}}']))
def test_a_key_given_twice_reads_as_json_loads_reads_it(first: dict[str, Any], second: dict[str, Any],
                                                        where: str) -> None:
    """Duplicate keys (json.loads keeps the last) at any level: two bodies' members written side by side inside
    ``where``'s innermost object."""
    def members(value: object) -> str:
        return json.dumps(value)[1:-1] if isinstance(value, dict) else '"x": 1'

    depth = where.count("{")
    inner = members(first) + (", " if first and second else "") + members(second) if first or second else ""
    text = where[:len(where) - depth] + inner + where[len(where) - depth:]
    body = text.encode()
    assert _job_key(read_job_request(body)) == _job_key(json.loads(body))


@pytest.mark.parametrize("body", [b"[]", b'"job"', b"{", b'{"job": NaN}', b'{"job": {"PodGroup": {"metadata": '
                                  b'{"name": "a", "namespace": "\\ud800"}}}}', b'{"job": 1e999}', "{\"job\": \"\xff\"}"
                                  .encode("latin-1"), b'{"job": {"PodGroup": {"metadata": {"name": "a", "namespace": '
                                  b'"b"}, "spec": {"minMember": 99999999999999999999999}}}}',
                                  b'{"job": {"PodGroup": {"metadata": {"name": "a", "namespace": "b"}}, "Tasks": '
                                  b'"\xc0\x80"}}', b'{"job": {"PodGroup": {"metadata": {"name": "a", "namespace": '
                                  b'"b"}}, "Tasks": "\xed\xa0\x80 \xc3\xa9"}}'])
def test_text_only_pythons_decoder_takes_or_none_takes_reads_the_same(body: bytes) -> None:
    try:
        expected: object = _job_key(json.loads(body)) if isinstance(json.loads(body), dict) else "not an object"
    except ValueError:
        expected = ValueError
    try:
        read = read_job_request(body)
        got: object = _job_key(read) if isinstance(read, dict) else "not an object"
    except ValueError:
        got = ValueError
    assert got == expected
