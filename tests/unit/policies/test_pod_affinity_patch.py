"""The Pod policy's node-affinity patch: shared between pods asking for the same products (and encoded once), read
without copying when the terms are there already (the validating webhook sees the mutated pod), and the read-only
check agreeing with the merge on any affinity, well-formed or not."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

from builders import gpu_node, queue
from hypothesis import event, given
from hypothesis import strategies as st

from cardquota.cli.check import apply_patch
from cardquota.core.ledger import Ledger
from cardquota.core.policies import pod as pod_policy
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.verdict import PatchOperation, SharedOperations, operation_json
from cardquota.webhooks.review import encode_patch

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
LABEL = "nvidia.com/gpu.product"
SNAPSHOT = Ledger.build([gpu_node("a100", A100, 8), gpu_node("h100", H100, 8),
                         queue("team-a", {A100: 10, H100: 5})]).snapshot
SNAPSHOT.complete = True


def card_pod(name: str, card: str = f"{A100}|{H100}", affinity: object = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "volcano",
                            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    if affinity is not None:
        spec["affinity"] = affinity
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec, "metadata": {
        "name": name, "namespace": "ml",
        "annotations": {"volcano.sh/card.name": card, "scheduling.volcano.sh/queue-name": "team-a"}}}


def admitted(manifest: dict[str, Any]) -> tuple[PatchOperation, ...]:
    verdict = pod_policy.admit(manifest, None, SNAPSHOT, PolicyConfig())
    assert verdict.allowed, verdict.message
    return verdict.patch


def decoded(encoded: str) -> Any:
    return json.loads(base64.b64decode(encoded))


def test_pods_asking_for_the_same_products_share_one_operation_and_its_json() -> None:
    first, second = admitted(card_pod("w-0")), admitted(card_pod("w-1"))
    assert len(first) == 1
    assert first[0] is second[0]
    assert admitted(card_pod("w-2", card=A100))[0] is not first[0]  # other products, another operation
    assert decoded(encode_patch(first)) == [dict(first[0])]
    assert operation_json(first[0]) == json.dumps(dict(first[0]), separators=(",", ":"))


def test_the_validating_webhook_gets_no_patch_for_the_mutated_pod_and_its_affinity_is_not_copied(
        monkeypatch: Any) -> None:
    mutated = apply_patch(card_pod("w-0"), admitted(card_pod("w-0")))
    copies: list[object] = []
    monkeypatch.setattr(pod_policy.copy, "deepcopy", lambda value: copies.append(value) or copy.deepcopy(value))
    assert admitted(dict(mutated)) == ()
    assert copies == []


def test_an_existing_affinity_is_copied_and_merged_not_shared() -> None:
    zone = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
    manifest = card_pod("w-0", affinity=zone)
    before = copy.deepcopy(zone)
    (operation,) = admitted(manifest)
    assert manifest["spec"]["affinity"] == before  # the object is not changed
    terms = operation["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"] == [{"key": "zone", "operator": "In", "values": ["a"]},
                                            {"key": LABEL, "operator": "In", "values": [A100, H100]}]
    assert operation is not admitted(card_pod("w-1", affinity=copy.deepcopy(zone)))[0]
    assert operation_json(operation) == json.dumps(dict(operation), separators=(",", ":"))


def test_applying_a_shared_patch_leaves_the_shared_operation_as_it_was() -> None:
    (operation,) = admitted(card_pod("w-0"))
    before = copy.deepcopy(dict(operation))
    patched = apply_patch(card_pod("w-0"), (operation,))
    patched["spec"]["affinity"]["nodeAffinity"]["changed"] = True  # what a later mutation would do
    assert dict(operation) == before


def test_the_shared_table_is_bounded_and_an_operation_outlives_it() -> None:
    table = SharedOperations(limit=2)
    built: list[str] = []

    def build(name: str) -> PatchOperation:
        built.append(name)
        return PatchOperation(op="add", path=f"/metadata/{name}", value={"name": name})

    a = table.get("a", lambda: build("a"))
    assert table.get("a", lambda: build("again")) is a
    assert built == ["a"]
    table.get("b", lambda: build("b"))
    assert table.json_of(a) == '{"op":"add","path":"/metadata/a","value":{"name":"a"}}'
    assert table.json_of(PatchOperation(op="add", path="/metadata/a", value={"name": "a"})) is None  # equal, not it
    table.get("c", lambda: build("c"))  # full: emptied first
    assert len(table) == 1
    assert table.json_of(a) is None
    assert a == {"op": "add", "path": "/metadata/a", "value": {"name": "a"}}


# --- the read-only check agrees with the merge ---------------------------------------------------------------

PRODUCTS = st.sampled_from([(A100,), (A100, H100), (H100, A100)])
scalars = st.one_of(st.none(), st.integers(0, 3), st.text(max_size=3))
expressions = st.one_of(
    PRODUCTS.map(lambda products: {"key": LABEL, "operator": "In", "values": list(products)}),
    st.just({"key": "zone", "operator": "In", "values": ["a"]}), scalars)
terms = st.one_of(st.fixed_dictionaries({}, optional={"matchExpressions": st.one_of(st.lists(expressions,
                                                                                             max_size=3), scalars)}),
                  scalars)
preferred_terms = st.one_of(PRODUCTS.flatmap(lambda products: st.sampled_from(
    pod_policy._preferred_terms(LABEL, products) or [{"weight": 1}])), scalars)
node_affinities = st.one_of(st.fixed_dictionaries({}, optional={
    pod_policy.REQUIRED: st.one_of(st.fixed_dictionaries({}, optional={
        "nodeSelectorTerms": st.one_of(st.lists(terms, max_size=3), scalars)}), scalars),
    pod_policy.PREFERRED: st.one_of(st.lists(preferred_terms, max_size=3), scalars),
}), scalars)
affinities = st.fixed_dictionaries({}, optional={"nodeAffinity": node_affinities, "podAffinity": scalars})


@given(affinities, PRODUCTS)
def test_the_read_only_check_agrees_with_the_merge(affinity: dict[str, Any], products: tuple[str, ...]) -> None:
    before = copy.deepcopy(affinity)
    lacking = pod_policy._product_terms(affinity, LABEL, products, merge=False)
    event(f"lacking: {lacking}")
    assert affinity == before
    merged = copy.deepcopy(affinity)
    assert lacking == pod_policy._product_terms(merged, LABEL, products, merge=True)
    if lacking:  # merged, it has changed, and nothing lacks any more
        assert merged != affinity
        assert not pod_policy._product_terms(merged, LABEL, products, merge=False)
