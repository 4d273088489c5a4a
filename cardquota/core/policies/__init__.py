"""Admission policies: one module per admitted kind, each ``admit(obj, old, snapshot, config) -> Verdict``.

``admit`` below picks the policy for an object by API group and kind; objects no rule concerns are allowed with
no patch, and with no warning unless the kind looks like a typo (:mod:`cardquota.core.policies.kinds`: ``Queues``
in ``scheduling.volcano.sh``). The CLI (``cardquota check``) and the webhooks call this same function.
"""

from __future__ import annotations

from cardquota.core.objects import Manifest
from cardquota.core.policies.config import Admit, PolicyConfig
from cardquota.core.policies.kinds import unserved_version_violation
from cardquota.core.snapshot import ClusterSnapshot
from cardquota.core.verdict import Verdict, allow, decide


def policy_for(manifest: Manifest) -> Admit | None:
    """The policy that admits this object's kind, or None."""
    from cardquota.core.policies.registry import POLICIES  # the registry imports every policy module

    api_version = manifest.get("apiVersion")
    kind = manifest.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    group = api_version.rpartition("/")[0]
    return POLICIES.get((group, kind))


def admit(manifest: Manifest, old: Manifest | None, snapshot: ClusterSnapshot, config: PolicyConfig) -> Verdict:
    """The verdict on creating (``old`` None) or updating an object."""
    policy = policy_for(manifest)
    if policy is not None:
        unserved = unserved_version_violation(str(manifest["apiVersion"]), str(manifest["kind"]))
        if unserved is not None:
            return decide([unserved])
        return policy(manifest, old, snapshot, config)
    warning = _unknown_kind(manifest)
    return allow([warning] if warning is not None else [])


def _unknown_kind(manifest: Manifest) -> str | None:
    from cardquota.core.policies.kinds import unchecked_workload_warning, unknown_kind_warning
    from cardquota.core.policies.registry import CHECKED_KINDS

    api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    group = api_version.rpartition("/")[0]
    return (unknown_kind_warning(group, kind, CHECKED_KINDS.get(group, frozenset()))
            or unchecked_workload_warning(manifest, group, kind))
