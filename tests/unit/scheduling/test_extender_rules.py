"""The extender's verbs, bodies shaped as Volcano marshals them, give the rules' answers: a queue not Open enqueues
and places nothing, and a GPU pod without ``volcano.sh/card.name`` is refused on a node whose card type it would
overfill (it was passed, then charged: ``queueOverused`` then held the whole queue)."""

from __future__ import annotations

import json
from typing import Any

from builders import gpu_labels, node, pod, podgroup, queue
from volcano_payloads import job_info, node_info, session_open, task_info

from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.extender import Extender
from cardquota.core.scheduling.session import SchedulerConfig

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
CONFIG = SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True))
NODES = [node(name, labels=gpu_labels(product, count=4), allocatable={"nvidia.com/gpu": "4"})
         for name, product in (("a1", A100), ("h1", H100))]


def _opened(team: dict[str, Any], groups: list[dict[str, Any]], bound: dict[str, list[dict[str, Any]]],
            pending: list[dict[str, Any]]) -> Extender:
    extender = Extender(CONFIG)
    groups = [*groups, *(podgroup(p["metadata"]["name"], namespace="ml", queue="team-a", phase="Inqueue")
                         for p in pending)]
    body = session_open(NODES, [team], groups, bound, {p["metadata"]["name"]: [p] for p in pending})
    assert extender.on_session_open(json.loads(json.dumps(body))) == {}
    return extender


def test_a_closed_queue_enqueues_and_places_nothing() -> None:
    team = queue("team-a", {A100: 4})
    team["status"] = {"state": "Closed"}
    waiting = pod("w", namespace="ml", card=A100, gpus=1, queue="team-a")
    job = podgroup("job", namespace="ml", queue="team-a", phase="Pending", request={A100: 1})
    extender = _opened(team, [job], {}, [waiting])
    assert extender.job_enqueueable({"job": job_info(job)}) == {"status": -1}
    verdict = extender.predicate({"task": task_info(waiting), "node": node_info(NODES[0])})
    assert verdict == {"status": "QueueNotOpen: Queue team-a is Closed, not Open: it allocates no new task",
                       "code": 2}


def test_a_gpu_pod_without_card_name_is_refused_where_it_would_overfill_the_type() -> None:
    team = queue("team-a", {A100: 2, H100: 2})
    held = pod("held", namespace="ml", card=A100, gpus=2, queue="team-a", node_name="a1")
    unnamed = pod("u", namespace="ml", gpus=1, queue="team-a")
    extender = _opened(team, [], {"a1": [held]}, [unnamed])
    task = task_info(unnamed)
    refused = extender.predicate({"task": task, "node": node_info(NODES[0])})
    assert refused["code"] == 2
    assert refused["status"].startswith("InsufficientScalarQuota: Queue team-a has insufficient NVIDIA-A100 quota: "
                                        "requested 1, total would be 3, but capability is 2")
    assert extender.predicate({"task": task, "node": node_info(NODES[1])}) == {"status": "", "code": 0}
