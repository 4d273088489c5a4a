"""Volcano CronJob (``batch.volcano.sh/v1alpha1``) admission (issue 18 item 5): its job template goes through the
Volcano Job policy, and its task templates through the pod rules, in ``cardquota check`` and the webhooks."""

from __future__ import annotations

import copy
import json
from typing import Any

from builders import container, gpu_node, queue
from verdicts import denied_at

from cardquota.core.ledger import Ledger
from cardquota.core.policies import admit
from cardquota.core.policies.config import FailureMode, PolicyConfig
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.violations import Reason
from cardquota.webhooks.admission import ADMITTED

A100 = "NVIDIA-A100"


def snapshot(quota: int = 8) -> ClusterSnapshot:
    ledger = Ledger.build([gpu_node("gpu-1", A100, 8), queue("team-a", {A100: quota})])
    ledger.snapshot.complete = True
    return ledger.snapshot


def cronjob(card: str = A100, replicas: int = 2, *, request: dict[str, int] | None = None,
            template_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    job_template: dict[str, Any] = {"spec": {
        "queue": "team-a", "schedulerName": "volcano", "minAvailable": replicas,
        "tasks": [{"name": "worker", "replicas": replicas, "template": {
            "metadata": {"annotations": {"volcano.sh/card.name": card}},
            "spec": {"restartPolicy": "Never", "containers": [container(limits={"nvidia.com/gpu": "1"})],
                     **(template_extra or {})}}}]}}
    if request is not None:
        job_template["metadata"] = {"annotations": {"volcano.sh/card.request": json.dumps(request)}}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "CronJob",
            "metadata": {"name": "nightly", "namespace": "ml"},
            "spec": {"schedule": "0 2 * * *", "jobTemplate": job_template}}


def test_a_malformed_card_name_in_the_job_template_is_denied_as_in_a_batch_cronjob() -> None:
    denied_at(admit(cronjob(f"{A100}|"), None, snapshot(), PolicyConfig()),
              ('spec.jobTemplate.spec.tasks[0].template.metadata.annotations["volcano.sh/card.name"]', Reason.INVALID))
    batch = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "ml"},
             "spec": {"jobTemplate": {"spec": {"template": copy.deepcopy(
                 cronjob(f"{A100}|")["spec"]["jobTemplate"]["spec"]["tasks"][0]["template"])}}}}
    batch["spec"]["jobTemplate"]["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    assert not admit(batch, None, snapshot(), PolicyConfig()).allowed


def test_the_job_rules_apply_to_the_template() -> None:
    """A request that can never fit its queue, an uncovered task, a missing queue: paths under spec.jobTemplate."""
    denied_at(admit(cronjob(replicas=9), None, snapshot(quota=8), PolicyConfig()),
              ("spec.jobTemplate.spec.tasks", Reason.INVALID))  # (a derived request: at the tasks)
    verdict = admit(cronjob(request={"NVIDIA-H100": 1}), None, snapshot(), PolicyConfig())
    assert not verdict.allowed
    assert all(violation.path.startswith("spec.jobTemplate.") for violation in verdict.violations)


def test_a_good_cronjob_is_allowed_unmutated_with_the_pod_rules_warnings() -> None:
    typo = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoreDuringExecution": {}}}}
    verdict = admit(cronjob(template_extra=typo), None, snapshot(), PolicyConfig())
    assert (verdict.allowed, verdict.patch) == (True, ())
    assert verdict.warnings[0].startswith(
        "spec.jobTemplate.spec.tasks[0].template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoreDuring")
    assert admit({**cronjob(), "spec": {"schedule": "@daily"}}, None, snapshot(), PolicyConfig()).allowed


def test_the_webhooks_admit_it_failing_closed_like_the_job() -> None:
    kind = ADMITTED[("batch.volcano.sh", "CronJob")]
    assert kind.failure_mode is FailureMode.CLOSED is ADMITTED[("batch.volcano.sh", "Job")].failure_mode
