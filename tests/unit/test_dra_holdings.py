"""The ledger's DRA holdings (what the card-quota gate reads for the queues' DRA quotas) are kept as pods and claims
change, not added up each round: after any sequence of events they equal what a ledger built from the final
objects counts — except that a pod whose claim or template has gone keeps what it was last read to hold (never
less than a fresh count)."""

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
    if not list(rebuilt.dra_unread_queues()):  # every claim a holder names is known: the same count
        assert totals(ledger) == totals(rebuilt)
    else:  # a holder whose claim has gone keeps what it was last read to hold in full: never less
        fresh = totals(rebuilt)
        kept = totals(ledger)
        for queue_name, amounts in fresh.items():
            for device_class, count in amounts.items():
                assert kept.get(queue_name, {}).get(device_class, 0) >= count
        assert set(ledger.dra_unread_queues()) <= set(rebuilt.dra_unread_queues())


def test_a_bound_pods_devices_follow_its_template_and_its_end() -> None:
    ledger = Ledger.build([node("n1"), queue("team-a"), template("one", 2),
                           claiming("p", "one", state="bound", group=None, is_template=True)])
    assert totals(ledger) == {"team-a": {CLASS: 2}}
    ledger.upsert(template("one", 3))
    assert totals(ledger) == {"team-a": {CLASS: 3}}
    ledger.upsert(claiming("p", "one", state="done", group=None, is_template=True))
    assert totals(ledger) == {}


def test_a_template_deleted_while_its_pods_run_leaves_what_they_hold() -> None:
    """Deleting a template is allowed while the pods made from it run (their generated claims live on): they keep
    what they were last read to hold; once the pod's status names its generated claim, that claim is read."""
    bound = claiming("p", "one", state="bound", group=None, is_template=True)
    ledger = Ledger.build([node("n1"), queue("team-a"), template("one", 2), bound])
    ledger.delete(template("one", 2))
    assert totals(ledger) == {"team-a": {CLASS: 2}}
    assert list(ledger.dra_unread_queues()) == []
    restarted = Ledger.build([node("n1"), queue("team-a"), bound])  # (a restart after the delete: never read)
    assert list(restarted.dra_unread_queues()) == ["team-a"]
    bound["status"]["resourceClaimStatuses"] = [{"name": "g", "resourceClaimName": "p-g-x7k2"}]
    restarted.upsert(template("p-g-x7k2", 2, kind="ResourceClaim"))
    restarted.upsert(bound)
    assert totals(restarted) == {"team-a": {CLASS: 2}}
    assert list(restarted.dra_unread_queues()) == []
