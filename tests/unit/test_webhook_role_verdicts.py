"""``cardquota operator --role webhook`` answers what ``--role all`` answers. The webhook process follows no pod, so
this holds only while no admission rule reads a pod from the cache: every example manifest (examples/check, the
workloads, the simulate example), and every Queue of examples/cluster.yaml as an update lowering each quota to 0
and as a delete, is judged over the cluster with its 35 pods and over the same cluster without them, whose Queues
carry the usage the controller published. A rule that starts reading pods makes them differ here."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from cardquota.core import keys
from cardquota.core.ledger import Ledger
from cardquota.core.policies import admit
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.queue import delete_warnings
from cardquota.core.publish import queue_annotations
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.verdict import Verdict
from cardquota.loader import load_paths

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CLUSTER = [document.manifest for document in load_paths([str(EXAMPLES / "cluster.yaml")])]
JUDGED = [document.manifest for folder in ("check", "workloads", "simulate")
          for document in load_paths([str(EXAMPLES / folder)])]
CONFIG = PolicyConfig()


def ledgers() -> tuple[Ledger, Ledger]:
    """(the ``--role all`` ledger, the ``--role webhook`` one), both complete."""
    everything = Ledger.build(CLUSTER)
    webhook = Ledger(published_usage=True)
    for manifest in CLUSTER:
        if manifest.get("kind") == "Pod":
            continue
        if manifest.get("kind") == "Queue":
            manifest = copy.deepcopy(dict(manifest))
            published = queue_annotations(everything.usage(manifest["metadata"]["name"]))
            manifest["metadata"] = {**manifest["metadata"],
                                    "annotations": {**manifest["metadata"].get("annotations", {}), **published}}
        webhook.upsert(manifest)
    for ledger in (everything, webhook):
        ledger.snapshot.complete = True
    return everything, webhook


ALL, WEBHOOK = ledgers()


def seen(verdict: Verdict) -> tuple[object, ...]:
    return verdict.allowed, verdict.message, tuple(verdict.violations), tuple(verdict.warnings), verdict.patch


def judged(manifest: dict[str, Any], old: dict[str, Any] | None, snapshot: ClusterSnapshot) -> tuple[object, ...]:
    return seen(admit(manifest, old, snapshot, CONFIG))


def test_the_webhook_ledger_holds_no_pod_and_the_clusters_pods_are_charged() -> None:
    assert WEBHOOK.snapshot.pods == {}
    assert len(ALL.snapshot.pods) == 35
    assert any(ALL.queue_use(queue) for queue in ALL.queue_names())


@pytest.mark.parametrize("manifest", JUDGED, ids=lambda m: f"{m.get('kind')}/{m.get('metadata', {}).get('name')}")
def test_every_example_is_judged_alike(manifest: dict[str, Any]) -> None:
    assert judged(manifest, None, WEBHOOK.snapshot) == judged(manifest, None, ALL.snapshot)


QUEUES = [manifest for manifest in CLUSTER if manifest.get("kind") == "Queue"]


def lowered_to_zero(old: dict[str, Any]) -> dict[str, Any]:
    """The queue with every card type of its quota lowered to 0."""
    quota = json.loads(old["metadata"].get("annotations", {}).get(keys.CARD_QUOTA, "{}"))
    lowered = copy.deepcopy(old)
    lowered["metadata"].setdefault("annotations", {})[keys.CARD_QUOTA] = json.dumps(dict.fromkeys(quota, 0))
    return lowered


@pytest.mark.parametrize("old", QUEUES, ids=lambda m: m["metadata"]["name"])
def test_lowering_or_deleting_a_queue_warns_alike(old: dict[str, Any]) -> None:
    name = old["metadata"]["name"]
    lowered = lowered_to_zero(old)
    assert judged(lowered, old, WEBHOOK.snapshot) == judged(lowered, old, ALL.snapshot)
    assert delete_warnings(name, WEBHOOK) == delete_warnings(name, ALL)


def test_the_queue_cases_above_carry_usage_warnings() -> None:
    """(So that the comparisons above compare something: the cluster's pods make some of those warnings.)"""
    warned = []
    for old in QUEUES:
        warned += [w for w in admit(lowered_to_zero(old), old, WEBHOOK.snapshot, CONFIG).warnings
                   if "holds or has reserved" in w]
        warned += delete_warnings(old["metadata"]["name"], WEBHOOK)
    assert len(warned) >= 2
