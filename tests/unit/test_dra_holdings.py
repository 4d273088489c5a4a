"""The ledger's DRA holdings (what the card-quota gate reads for the queues' DRA quotas) are kept as pods and claims
change, not added up each round: after any sequence of events they equal what a ledger built from the final
objects counts."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

from builders import node, pod, podgroup, queue
from hypothesis import given, settings
from hypothesis import strategies as st

from cardquota.core.ledger import Ledger

CLASS = "gpu.example.com"
PODS = [f"p{index}" for index in range(4)]
CLAIMS = ["one", "two"]


def template(name: str, count: int, *, kind: str = "ResourceClaimTemplate") -> dict[str, Any]:
    request = {"name": "g", "exactly": {"deviceClassName": CLASS, "count": count}}
    spec: dict[str, Any] = {"devices": {"requests": [request]}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": {"name": name, "namespace": "ml"},
            "spec": {"spec": spec} if kind == "ResourceClaimTemplate" else spec}


def claiming(name: str, claim: str, *, state: str, group: str | None, is_template: bool) -> dict[str, Any]:
    made = pod(name, namespace="ml", queue=None if group else "team-a", group=group, uid=f"uid-{name}",
               gated=state == "gated", node_name="n1" if state in ("bound", "done") else None)
    made["spec"]["resourceClaims"] = [{"name": "g", ("resourceClaimTemplateName" if is_template else
                                                      "resourceClaimName"): claim}]
    if state == "done":
        made["status"] = {"phase": "Succeeded"}
    return made


def totals(ledger: Ledger) -> dict[str, dict[str, Fraction]]:
    return {queue_name: {device_class: amount.count for device_class, amount in held.items() if amount.count}
            for queue_name, held in ledger.dra_held().items()
            if any(amount.count for amount in held.values())}


events = st.lists(st.one_of(
    st.tuples(st.just("pod"), st.sampled_from(PODS), st.sampled_from(CLAIMS),
              st.sampled_from(["gated", "past", "bound", "done"]), st.sampled_from([None, "g-a", "g-b"]),
              st.booleans()),
    st.tuples(st.just("delete-pod"), st.sampled_from(PODS)),
    st.tuples(st.just("claim"), st.sampled_from(CLAIMS), st.integers(1, 3), st.booleans()),
    st.tuples(st.just("delete-claim"), st.sampled_from(CLAIMS), st.booleans()),
    st.tuples(st.just("group"), st.sampled_from(["g-a", "g-b"]), st.sampled_from(["team-a", "team-b"])),
), max_size=25)


@settings(max_examples=150, deadline=None)
@given(events)
def test_dra_holdings_follow_every_event_as_a_fresh_build_counts_them(steps: list[tuple[Any, ...]]) -> None:
    base = [node("n1"), queue("team-a"), queue("team-b"), podgroup("g-a", namespace="ml", queue="team-a"),
            podgroup("g-b", namespace="ml", queue="team-a")]
    ledger = Ledger.build(base)
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    for step in steps:
        if step[0] == "pod":
            _, name, claim, state, group, is_template = step
            manifest = claiming(name, claim, state=state, group=group, is_template=is_template)
            ledger.upsert(manifest)
            objects["Pod", name] = manifest
        elif step[0] == "delete-pod" and ("Pod", step[1]) in objects:
            ledger.delete(objects.pop(("Pod", step[1])))
        elif step[0] == "claim":
            _, name, count, is_template = step
            kind = "ResourceClaimTemplate" if is_template else "ResourceClaim"
            manifest = template(name, count, kind=kind)
            ledger.upsert(manifest)
            objects[kind, name] = manifest
        elif step[0] == "delete-claim":
            kind = "ResourceClaimTemplate" if step[2] else "ResourceClaim"
            if (kind, step[1]) in objects:
                ledger.delete(objects.pop((kind, step[1])))
        elif step[0] == "group":
            manifest = podgroup(step[1], namespace="ml", queue=step[2])
            ledger.upsert(manifest)
            objects["PodGroup", step[1]] = manifest
    rebuilt = Ledger.build([*base, *(copy.deepcopy(manifest) for manifest in objects.values())])
    assert totals(ledger) == totals(rebuilt)


def test_a_bound_pods_devices_follow_its_template_and_its_end() -> None:
    ledger = Ledger.build([node("n1"), queue("team-a"), template("one", 2),
                           claiming("p", "one", state="bound", group=None, is_template=True)])
    assert totals(ledger) == {"team-a": {CLASS: 2}}
    ledger.upsert(template("one", 3))
    assert totals(ledger) == {"team-a": {CLASS: 3}}
    ledger.upsert(claiming("p", "one", state="done", group=None, is_template=True))
    assert totals(ledger) == {}
