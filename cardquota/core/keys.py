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
DEFAULT_SCHEDULER = "default-scheduler"
"""The ``spec.schedulerName`` the API server gives a pod that names none (``SetDefaults_PodSpec``)."""
"""The queue of a pod that names none, directly or through its PodGroup."""
VOLCANO_SCHEDULER = "volcano"
"""The ``spec.schedulerName`` of Volcano's scheduler as installed (its ``--scheduler-name``, a list: more can be
configured)."""
VOLCANO_SCHEDULERS: frozenset[str] = frozenset({VOLCANO_SCHEDULER})
"""The schedulers Volcano runs unless told otherwise (the operator's ``--schedulers``)."""

CARD_ALTERNATIVE_SEPARATOR = "|"

# What the controller publishes on each Queue (core/publish.py writes them; a process that follows no pods reads them).

CARD_ALLOCATED = "volcano.sh/card.allocated"
"""Queue annotation: canonical JSON card type → cards the queue's bound pods hold."""
CARD_INQUEUE = "volcano.sh/card.inqueue"
"""Queue annotation: canonical JSON card type → cards its Inqueue PodGroups reserve beyond what their pods hold."""
CARD_PENDING = "volcano.sh/card.pending"
"""Queue annotation: canonical JSON card type → cards its unbound pods want."""
CARD_USAGE = "volcano.sh/card.usage"
"""Queue annotation: ``NVIDIA-A100 3/10, NVIDIA-H100 0/5`` (allocated/quota), for ``kubectl get queue``."""

# mGPU (shared GPUs, mgpu-design.md): the resources and the pod annotation the webhooks and the scheduler read.

MGPU_CORE = "vke.volcengine.com/mgpu-core"
"""Percent of one card's compute; a multiple of 100 asks for whole cards."""
MGPU_MEMORY = "vke.volcengine.com/mgpu-memory"
"""Card memory in MiB."""
CONTAINER_MULTIPLE_GPU = "vke.volcengine.com/container-multiple-gpu"
"""Pod annotation: the number of cards each container of ``spec.containers`` shares, e.g. ``"2,1,3"``."""
GPU_INDEX_PREFIX = "vke.volcengine.com/gpu-index-container-"
"""Pod annotations ``<prefix><container>``: the cards each container was placed on (``"2,3"``; card IDs in the ``id``
schedule mode), written by cardquota's extender when it allocates the pod (mgpu-design.md, "Schedule Result"). The
node's mGPU agent allocates by them, and the scheduling rules count a bound pod's shares on those cards."""

FULL_CARD_CORE = 100
"""What ``mgpu-core`` one whole card is."""

# crossquota (CPU quota on GPU nodes, crossquota-design.md): node annotations and the pod's scoring strategy.

ANNOTATION_QUOTA_PREFIX = "volcano.sh/crossquota-"
"""Node annotation ``volcano.sh/crossquota-<resource>``: an absolute quota (highest priority)."""
ANNOTATION_QUOTA_PERCENTAGE_PREFIX = "volcano.sh/crossquota-percentage-"
"""Node annotation ``volcano.sh/crossquota-percentage-<resource>``: a percentage of the node's allocatable."""
SCORING_STRATEGY_ANNOTATION = "volcano.sh/crossquota-scoring-strategy"
"""Pod annotation choosing how the plugin scores nodes for the pod."""

MOST_ALLOCATED = "most-allocated"
LEAST_ALLOCATED = "least-allocated"

# The card-quota gate (admission by scheduling gate): what the pod webhook adds and the controller's leader lifts.

CARD_GATE = "cardquota.io/card-quota"
"""The pod scheduling gate (``spec.schedulingGates[].name``) a card pod is created with; lifted when its cards fit
its queue and every ancestor. Volcano skips a task carrying any gate in allocate, backfill, preempt and reclaim."""
CARD_NAME_REQUESTED = "cardquota.io/card-name-requested"
"""Pod annotation: the ``volcano.sh/card.name`` alternatives (``A|B``) as the pod was created with, kept when the
gate is lifted and ``volcano.sh/card.name`` is narrowed to the alternative chosen."""

# Priority and preemption inside a card quota (core/preemption.py decides; the gate keeper evicts).

PREEMPTION = "cardquota.io/preemption"
"""Queue annotation: the queue's preemption policy (``Never``, the default; ``LowerPriority``;
``LowerOrNewerEqualPriority``), read by :func:`cardquota.core.preemption.preemption_policy`."""
PREEMPTABLE = "volcano.sh/preemptable"
"""Pod annotation, else label: whether Volcano may preempt the pod (``v1beta1.PodPreemptable``, read by
``api.GetPodPreemptable``); cardquota reads it the same way (:func:`cardquota.core.preemption.pod_preemptable`)."""
ADMITTED_BY_PREEMPTION = "cardquota.io/admitted-by-preemption"
"""Pod annotation (``"true"``) written by the gate's lift of a pod whose unit preempted others to go through: such a
unit is never displaced by one of equal priority, so equals do not evict each other in
turn."""


CARD_KEYS = frozenset({CARD_QUOTA, CARD_REQUEST, CARD_NAME, CARD_ALLOCATED, CARD_INQUEUE, CARD_PENDING, CARD_USAGE,
                       CARD_NAME_REQUESTED, PREEMPTION, ADMITTED_BY_PREEMPTION})
"""Every ``volcano.sh/card.*`` and ``cardquota.io/*`` annotation key cardquota reads or writes (another one is a
misspelling cardquota warns about: :func:`cardquota.core.policies.common.unknown_card_key_warnings`)."""
CARD_KEY_PREFIXES = ("volcano.sh/card.", "cardquota.io/")
