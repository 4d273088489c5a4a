"""Volcano CronJob (``batch.volcano.sh/v1alpha1``, kind CronJob) admission: ``spec.jobTemplate`` is the Volcano
Job its controller creates on schedule, so it goes through the Volcano Job policy — the card.request rules on the
template's annotations, each task's template through the pod rules — with every path under ``spec.jobTemplate``.

No mutation: the Jobs the CronJob creates get their derived ``card.request`` from the Job webhook when they are
created. The Job policy's own patch is left out; its checks (the derived request must fit the queue) are kept.
"""

from __future__ import annotations

from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.objects import Manifest, given_name
from cardquota.core.policies import job as job_policy
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.verdict import Verdict, allow, decide
from cardquota.core.violations import FieldPath, Violation, invalid, warning_under

TEMPLATE = FieldPath.of("spec", "jobTemplate")
VOLCANO_JOB_API = "batch.volcano.sh/v1alpha1"


def admit(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot, config: PolicyConfig) -> Verdict:
    job, violation = template_job(manifest)
    if violation is not None:
        return decide([violation])
    if job is None:
        return allow()
    old_job = template_job(old)[0] if old is not None else None
    verdict = job_policy.admit(job, old_job, snapshot, config)
    return decide([violation.under(TEMPLATE) for violation in verdict.violations],
                  [warning_under(TEMPLATE, warning) for warning in verdict.warnings])


def template_job(manifest: Manifest) -> tuple[Manifest | None, Violation | None]:
    """The Volcano Job a CronJob's ``spec.jobTemplate`` describes (named after the CronJob, in its namespace), or
    None when it has none; the violation when the template is not a map."""
    spec = manifest.get("spec")
    template = spec.get("jobTemplate") if isinstance(spec, MAPPING_TYPES) else None
    if template is None:
        return None, None
    if not isinstance(template, MAPPING_TYPES):
        return None, invalid(TEMPLATE, "must be a map")
    metadata = template.get("metadata")
    if metadata is not None and not isinstance(metadata, MAPPING_TYPES):
        return None, invalid(TEMPLATE.child("metadata"), "must be a map")
    outer = manifest.get("metadata")
    outer = outer if isinstance(outer, MAPPING_TYPES) else {}
    job_metadata = {**(metadata or {}), "name": f"{given_name(outer) or 'cronjob'}-*"}
    if isinstance(outer.get("namespace"), str) and outer["namespace"]:
        job_metadata["namespace"] = outer["namespace"]
    return {"apiVersion": VOLCANO_JOB_API, "kind": "Job", "metadata": job_metadata,
            "spec": template.get("spec") if template.get("spec") is not None else {}}, None
