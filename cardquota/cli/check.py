"""What ``cardquota check`` keeps per document: its identity, the verdict, and the JSON it prints."""

from __future__ import annotations

import argparse
import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonpatch

from cardquota.core.errors import InputError
from cardquota.core.ledger import Ledger
from cardquota.core.objects import Manifest, completed, given_name, is_generated
from cardquota.core.policies.common import CLUSTER_RULES, skipped_rule
from cardquota.core.snapshot import DEFAULT_CARD_POLICY, CardPolicy, OutsideVolcano, UnquotedQueues, kind_of
from cardquota.core.verdict import PatchOperation, Verdict
from cardquota.core.workloads import as_defaulted
from cardquota.loader import Document

Identity = tuple[str, str, str, str]
"""(API group, kind, namespace, name)."""

NAMESPACED = frozenset({"Pod", "PodGroup", "Job", "ConfigMap", "Deployment", "StatefulSet", "ReplicaSet",
                        "DaemonSet", "CronJob", "HorizontalPodAutoscaler", "Service", "Secret",
                        # upstream workload kinds no rule concerns (shown in their namespace all the same)
                        "Workflow", "CronWorkflow", "PipelineRun", "TaskRun", "JobSet", "Workload", "RayJob",
                        "RayCluster", "PyTorchJob", "TFJob", "MPIJob"})


def identity(manifest: Manifest) -> Identity:
    """Which object a manifest is, as the API server would key it (namespaced kinds default to ``default``)."""
    api_version = str(manifest.get("apiVersion", ""))
    kind = str(manifest.get("kind", ""))
    metadata = manifest.get("metadata") or {}
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    if not isinstance(namespace, str) or not namespace:
        namespace = "default" if kind in NAMESPACED else ""
    return (api_version.rpartition("/")[0], kind, namespace, given_name(metadata))


def to_admit(manifest: Manifest, existing: Mapping[Identity, Manifest]) -> tuple[Identity, Manifest, Manifest | None]:
    """What the webhooks would be asked about a manifest ``kubectl apply`` sends: its identity (an object with only
    ``generateName`` is ``<generateName>*``, always a CREATE), the object as the policy reads it (named, see
    :func:`completed`; for an object already in the cluster, the manifest merged onto it as ``kubectl apply``
    merges: see :func:`applied`) and the old object (None for a CREATE)."""
    key = identity(manifest)
    old = None if is_generated(key[3]) else existing.get(key)
    new = completed(manifest) if old is None else applied(manifest, old)
    if key[0] == "" and key[1] == "Pod" and isinstance(new.get("spec"), Mapping):
        new = {**new, "spec": as_defaulted(new["spec"])}  # (as the API server stores a pod, webhooks after it)
    return key, new, old


def add_namespace_queues_option(parser: argparse.ArgumentParser) -> None:
    """``--map-namespace-queues`` (:attr:`~cardquota.core.policies.config.PolicyConfig.map_namespace_queues`), for
    every command that resolves a queue Volcano has yet to store."""
    parser.add_argument("--map-namespace-queues", action="store_true",
                        help="the cluster's Volcano maps namespaces to queues (its PodGroup mutation webhook or "
                        "policy is on): a PodGroup-to-be with queue default in a namespace annotated "
                        "scheduling.volcano.sh/queue-name goes to that queue (the Namespaces are read from the "
                        "cluster)")


def add_card_policy_options(parser: argparse.ArgumentParser) -> None:
    """``--unquoted-queues`` and ``--card-pods-outside-volcano`` (:class:`~cardquota.core.snapshot.CardPolicy`), as
    the operator runs with them, for every command that judges or shows card quotas (not given: against a live
    cluster, the operator's own, else the defaults)."""
    parser.add_argument("--unquoted-queues", choices=[value.value for value in UnquotedQueues],
                        help="how many cards a queue without volcano.sh/card.quota holds: zero (the capacity-card "
                        "design's default: card work there is refused) or unlimited (pods naming no card type are "
                        "not limited there); as the operator's --unquoted-queues (default: the operator's, read from "
                        "its Deployment on a live cluster, else zero)")
    parser.add_argument("--card-pods-outside-volcano", choices=[value.value for value in OutsideVolcano],
                        help="card pods another scheduler places: enforce (charged to their queue: gated with the "
                        "card-quota gate, refused without it), warn, or off; as the operator's option (default: the "
                        "operator's on a live cluster, else warn)")


def card_policy_of(args: argparse.Namespace, running: CardPolicy = DEFAULT_CARD_POLICY) -> CardPolicy:
    """The :class:`~cardquota.core.snapshot.CardPolicy` :func:`add_card_policy_options` read, each option not given
    taken from ``running`` (the operator's, or the defaults)."""
    unquoted = getattr(args, "unquoted_queues", None)
    outside = getattr(args, "card_pods_outside_volcano", None)
    return CardPolicy(unquoted_queues=UnquotedQueues(unquoted) if unquoted else running.unquoted_queues,
                      outside_volcano=OutsideVolcano(outside) if outside else running.outside_volcano)


def stored_as(admitted: Manifest, existing: Mapping[Identity, Manifest]) -> tuple[Identity, Manifest]:
    """The key and object under which an admitted object joins the cluster for the documents after it: objects
    created from the same ``generateName`` are different objects (``train-*``, ``train-*2``, …)."""
    key = identity(admitted)
    if not is_generated(key[3]):
        return key, admitted
    serial, name = 1, key[3]
    while (key[0], key[1], key[2], name) in existing:
        serial += 1
        name = f"{key[3]}{serial}"
    return (key[0], key[1], key[2], name), {**admitted, "metadata": {**admitted.get("metadata", {}), "name": name}}


def applied(manifest: Manifest, live: Manifest) -> Manifest:
    """The object ``kubectl apply`` makes of a manifest for an object that exists: the manifest's maps merged onto
    the live object's (fields it leaves out are kept, lists it sets replace the live ones) and the live status
    carried (``status`` is a subresource apply does not write)."""
    merged = _merged(live, {key: value for key, value in manifest.items() if key != "status"})
    if "status" in live:
        merged["status"] = live["status"]
    elif "status" in manifest:
        merged["status"] = manifest["status"]
    return merged


def _merged(live: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(live)
    for key, value in patch.items():
        before = merged.get(key)
        merged[key] = _merged(before, value) if isinstance(before, Mapping) and isinstance(value, Mapping) else value
    return merged


def validate(documents: Sequence[Document]) -> None:
    """Read every accounted object once, so a malformed one is reported naming its file and document (the
    commands that hand the objects on to the core as a whole would lose where it came from)."""
    checker = Ledger()
    for document in documents:
        if kind_of(document.manifest) is not None:
            try:
                checker.upsert(document.manifest)
            except InputError as error:
                raise error.located(document.source) from None


def in_namespace(manifest: Manifest, namespace: str) -> Manifest:
    """A namespaced object that names no namespace, put in ``namespace`` (as ``kubectl apply -n`` would)."""
    metadata = manifest.get("metadata")
    if str(manifest.get("kind", "")) not in NAMESPACED or not isinstance(metadata, dict) or metadata.get("namespace"):
        return manifest
    return {**manifest, "metadata": {**metadata, "namespace": namespace}}


def apply_patch(manifest: Manifest, patch: Sequence[PatchOperation]) -> Manifest:
    """The object as the API server would store it after the mutating webhook's patch (the operations' values
    copied in: a policy may share an operation between verdicts, and the object may be changed later)."""
    if not patch:
        return manifest
    try:
        patched: Manifest = jsonpatch.apply_patch(manifest, copy.deepcopy([dict(op) for op in patch]))
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
        raise InputError(f"the policy's patch does not apply: {error}") from None
    return patched


@dataclass(frozen=True)
class CheckResult:
    document: Document
    identity: Identity
    verdict: Verdict

    @property
    def kind(self) -> str:
        return self.identity[1]

    @property
    def namespace(self) -> str:
        return self.identity[2]

    @property
    def name(self) -> str:
        return self.identity[3]

    def as_json(self) -> dict[str, Any]:
        verdict = self.verdict.as_json()
        return {
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "allowed": verdict["allowed"],
            "message": verdict["message"],
            "warnings": verdict["warnings"],
            "patch": verdict["patch"],
            "violations": verdict["violations"],
            "source": self.document.source,
        }


def skipped_notes(results: Sequence[CheckResult], *, complete: bool) -> list[str]:
    """Every rule skipped for want of the cluster, each said once for the run (``not checked without --cluster:
    …``; the table leaves them out of the objects' warnings, the JSON keeps them as the webhook says them): the
    rules that skip without a word (:data:`~cardquota.core.policies.common.CLUSTER_RULES`) for the kinds checked,
    when the snapshot is not complete, then those the verdicts said (the same parent queue for many children:
    once)."""
    checked = {(result.identity[0], result.kind) for result in results}
    rules = [rule.what for rule in CLUSTER_RULES if not complete and rule.kinds & checked]
    said = (skipped_rule(warning) for result in results for warning in result.verdict.warnings)
    return [f"not checked without --cluster: {what}"
            for what in dict.fromkeys([*rules, *(what for what in said if what is not None)])]
