"""The watch-fed extender's verbs in the order and with the task states Volcano's actions use (v1.15.1, master
ed72c7c8):

* allocate skips a whole queue that any plugin calls overused (pkg/scheduler/actions/allocate/allocate.go,
  ``allocateResources``: ``if ssn.Overused(queue) { continue }``), while card quotas are per card type;
* ``Statement.Pipeline`` sets the task Pipelined (4, pkg/scheduler/api/types.go ``TaskStatus``) and calls the
  AllocateFunc handlers (pkg/scheduler/framework/statement.go); a job that is pipelined only is neither committed
  nor discarded (allocate.go, ``allocateForJob``), so no deallocateFunc comes and the next session sees the task
  Pending; a bind that fails after Commit puts the task back to Pending the same way;
* ``Session.JobEnqueueable`` asks the voters of a tier in order and the first reject wins
  (pkg/scheduler/framework/session_plugins.go); only then does the enqueue action call ``JobEnqueued`` and mark the
  PodGroup Inqueue (pkg/scheduler/actions/enqueue/enqueue.go), written to the API server after the plugins'
  OnSessionClose (pkg/scheduler/framework/framework.go ``CloseSession``); allocate skips pending jobs
  (allocate.go, ``buildAllocateContext``).
"""

from __future__ import annotations

from typing import Any

from builders import gpu_labels, node, pod, podgroup, queue
from volcano_payloads import ALLOCATED, job_info, node_info, queue_info, task_info

from cardquota.core.scheduling.capacity_card import CapacityCardConfig
from cardquota.core.scheduling.extender import ASSUMED_SECONDS, PIPELINED, Extender
from cardquota.core.scheduling.session import SchedulerConfig
from cardquota.runtime.cache import ClusterCache

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gpu_node(name: str, product: str, gpus: int) -> dict[str, Any]:
    return node(name, labels=gpu_labels(product, count=gpus), allocatable={"nvidia.com/gpu": str(gpus)})


NODES = {"a1": gpu_node("a1", A100, 4), "h1": gpu_node("h1", H100, 4)}


def extender_of(quota: dict[str, int], *objects: dict[str, Any]) -> tuple[Extender, Clock]:
    clock = Clock()
    extender = Extender(SchedulerConfig(capacity_card=CapacityCardConfig(card_unlimited_cpu_memory=True)),
                        clock=clock)
    team = queue("team-a", quota)
    team["spec"]["capability"] = {"cpu": "64", "memory": "256Gi"}  # (CPU-only tasks need a cpu capability)
    ClusterCache(sink=extender).load([*NODES.values(), team, *objects])
    return extender, clock


def card_pod(name: str, card: str = A100, *, node_name: str | None = None, group: str | None = None
             ) -> dict[str, Any]:
    return pod(name, namespace="ml", card=card, gpus=1, queue="team-a", node_name=node_name, group=group,
               phase="Running" if node_name else "Pending")


def predicate(extender: Extender, manifest: dict[str, Any], node_name: str) -> dict[str, Any]:
    return extender.predicate({"task": task_info(manifest), "node": node_info(NODES[node_name])})


def cycle(extender: Extender) -> None:
    extender.on_session_close({})
    extender.on_session_open({})


def test_a_queue_over_its_quota_of_one_card_type_still_gets_other_types_and_cpu_work() -> None:
    # Two A100s held where the quota (lowered since) allows one: A100 work waits, nothing else does.
    extender, _ = extender_of({A100: 1, H100: 2}, card_pod("x", node_name="a1"), card_pod("y", node_name="a1"),
                              card_pod("h", H100), pod("cpu", namespace="ml", queue="team-a"),
                              card_pod("a", A100))
    extender.on_session_open({})
    assert extender.queue_overused({"queue": queue_info(queue("team-a", {A100: 1, H100: 2}))}) == {
        "overused": False}
    assert predicate(extender, card_pod("h", H100), "h1")["code"] == 0
    assert predicate(extender, pod("cpu", namespace="ml", queue="team-a"), "a1")["code"] == 0
    for name, manifest, node_name in (("h", card_pod("h", H100), "h1"),
                                      ("cpu", pod("cpu", namespace="ml", queue="team-a"), "a1")):
        answer, _, _ = extender.allocate_func({"task": task_info(manifest, status=ALLOCATED, node=node_name)})
        assert answer == {"errorMessage": ""}, name
    assert predicate(extender, card_pod("a", A100), "a1")["code"] != 0  # the A100 quota still holds per task


def test_a_pipelined_task_does_not_refuse_itself_in_the_next_session() -> None:
    extender, _ = extender_of({A100: 2}, card_pod("x", node_name="a1"), card_pod("p"), card_pod("other"))
    extender.on_session_open({})
    answer, patched, annotations = extender.allocate_func(
        {"task": task_info(card_pod("p"), status=PIPELINED, node="a1")})
    assert answer == {"errorMessage": ""}
    assert patched is None
    assert annotations == {}
    assert predicate(extender, card_pod("other"), "a1")["code"] != 0  # in its session, the card is taken
    cycle(extender)  # the job was pipelined only: neither committed nor discarded, no deallocateFunc
    assert predicate(extender, card_pod("p"), "a1") == {"status": "", "code": 0}
    assert predicate(extender, card_pod("other"), "a1") == {"status": "", "code": 0}


def test_after_a_failed_bind_the_task_is_judged_without_its_own_allocation() -> None:
    extender, clock = extender_of({A100: 2}, card_pod("x", node_name="a1"), card_pod("p"), card_pod("other"))
    extender.on_session_open({})
    assert extender.allocate_func({"task": task_info(card_pod("p"), status=ALLOCATED, node="a1")})[0] == {
        "errorMessage": ""}
    cycle(extender)  # committed, the bind failed: Volcano sees p Pending again; the watch never showed it bound
    assert predicate(extender, card_pod("p"), "a1") == {"status": "", "code": 0}
    assert predicate(extender, card_pod("other"), "a1")["code"] != 0  # for others, p's card stays assumed
    assert extender.allocate_func({"task": task_info(card_pod("p"), status=ALLOCATED, node="a1")})[0] == {
        "errorMessage": ""}
    clock.now += ASSUMED_SECONDS / 2
    assert predicate(extender, card_pod("p"), "a1") == {"status": "", "code": 0}


def test_a_reservation_a_later_voter_overrules_lasts_only_its_cycle() -> None:
    first = podgroup("first", namespace="ml", queue="team-a", phase="Pending", request={A100: 2})
    second = podgroup("second", namespace="ml", queue="team-a", phase="Pending", request={A100: 1})
    extender, _ = extender_of({A100: 2}, first, second)
    extender.on_session_open({})
    assert extender.job_enqueueable({"job": job_info(first)}) == {"status": 1}
    assert extender.job_enqueueable({"job": job_info(second)}) == {"status": -1}  # in its cycle: 2 of 2 reserved
    cycle(extender)  # a voter after cardquota rejected "first": Volcano never enqueued it, the watch shows Pending
    assert extender.job_enqueueable({"job": job_info(second)}) == {"status": 1}
    assert extender.job_enqueueable({"job": job_info(first)}) == {"status": -1}  # second holds 1 of 2 now


def test_a_reservation_volcano_is_seen_to_take_up_outlives_the_cycle_until_the_watch_shows_it() -> None:
    first = podgroup("first", namespace="ml", queue="team-a", phase="Pending", request={A100: 2})
    second = podgroup("second", namespace="ml", queue="team-a", phase="Pending", request={A100: 1})
    extender, clock = extender_of({A100: 2}, first, second, card_pod("w", group="first"))
    extender.on_session_open({})
    assert extender.job_enqueueable({"job": job_info(first)}) == {"status": 1}
    predicate(extender, card_pod("w", group="first"), "a1")  # allocate asks about its task: it was enqueued
    cycle(extender)  # the Inqueue phase is written after the plugins' OnSessionClose: not watched yet
    assert extender.job_enqueueable({"job": job_info(second)}) == {"status": -1}
    clock.now += ASSUMED_SECONDS + 1
    extender.on_session_open({})
    assert extender.job_enqueueable({"job": job_info(second)}) == {"status": 1}


def test_once_the_scheduler_asks_job_ready_only_the_jobs_it_commits_keep_their_cards_past_the_cycle() -> None:
    # ssn.JobReady asks the extender only when the plugins before it found the job ready, and allocate commits
    # then (session_plugins.go JobReady, allocate.go allocateResources); a job partly allocated and partly
    # pipelined is neither committed nor discarded, its Allocated tasks never bound in that session.
    committed = podgroup("committed", namespace="ml", queue="team-a", phase="Inqueue", request={A100: 1})
    waiting = podgroup("waiting", namespace="ml", queue="team-a", phase="Inqueue", request={A100: 1})
    extender, _ = extender_of({A100: 2}, committed, waiting, card_pod("c", group="committed"),
                              card_pod("w", group="waiting"), card_pod("other"))
    extender.on_session_open({})
    extender.job_ready({"job": job_info(podgroup("earlier", namespace="ml", queue="team-a"))})  # it asks jobReady
    cycle(extender)
    for name, group_name in (("c", "committed"), ("w", "waiting")):
        answer, _, _ = extender.allocate_func(
            {"task": task_info(card_pod(name, group=group_name), status=ALLOCATED, node="a1")})
        assert answer == {"errorMessage": ""}
    assert extender.job_ready({"job": job_info(committed)}) == {"status": True}  # "waiting": gang said not ready
    cycle(extender)
    assert extender.session is not None
    assert extender.session.ledger.usage("team-a").allocated == {A100: 1}  # c's card is assumed until bound, w's not
    assert extender.session.view(("ml", "c")).bound
    assert not extender.session.view(("ml", "w")).bound
    assert predicate(extender, card_pod("other"), "a1") == {"status": "", "code": 0}
