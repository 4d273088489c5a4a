"""Annotation and label names cardquota reads and writes (one place, so a typo cannot split a contract)."""

from __future__ import annotations

CARD_QUOTA = "volcano.sh/card.quota"
"""Queue annotation: JSON object card type → non-negative integer quota."""

CARD_REQUEST = "volcano.sh/card.request"
"""PodGroup / Volcano Job annotation: JSON object card type (or ``A|B`` alternatives) → cards requested."""

CARD_NAME = "volcano.sh/card.name"
"""Pod annotation: the card type the pod uses, or ``A|B`` alternatives in order of preference."""

QUEUE_NAME = "scheduling.volcano.sh/queue-name"
"""Pod annotation naming the pod's queue directly."""

GROUP_NAME = "scheduling.k8s.io/group-name"
"""Pod annotation naming the pod's PodGroup (same namespace)."""

DEFAULT_QUEUE = "default"
"""The queue of a pod that names none, directly or through its PodGroup."""

CARD_ALTERNATIVE_SEPARATOR = "|"
