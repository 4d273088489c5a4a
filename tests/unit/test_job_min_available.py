"""A Volcano Job's gang size as Volcano's own Job mutation defaults it (pkg/webhooks/admission/jobs/mutate/
mutate_job.go, ``patchDefaultMinAvailable``, v1.8 to v1.15.1): a written, non-zero ``spec.minAvailable`` as is;
unset or 0, the tasks' ``minAvailable`` added up, a task's replicas where it sets none. cardquota's Job mutation
runs before Volcano's (its configuration's name sorts first), so it must read an undefaulted Job the same way."""

from __future__ import annotations

from typing import Any

import pytest

from cardquota.core.workloads import gang_pod_counts, job_min_available, task_min_available


@pytest.mark.parametrize(("spec", "tasks", "expected"), [
    ({"minAvailable": 3}, [{"replicas": 4, "minAvailable": 2}], 3),
    ({}, [{"replicas": 4}], 4),
    ({}, [{"replicas": 4, "minAvailable": 2}], 2),
    ({"minAvailable": 0}, [{"replicas": 4, "minAvailable": 2}, {"replicas": 1}], 3),
    ({}, [{"replicas": 4, "minAvailable": 0}, {"replicas": 2}], 2),
    ({}, [], 1),
], ids=["written", "replicas", "task-minimum", "zero-is-defaulted", "task-minimum-zero", "no-tasks"])
def test_an_unset_min_available_is_volcanos_default(spec: dict[str, Any], tasks: list[dict[str, Any]],
                                                     expected: int) -> None:
    assert job_min_available(spec, tasks) == expected


def test_the_gang_of_an_undefaulted_job_is_each_tasks_minimum() -> None:
    tasks = [{"replicas": 4, "minAvailable": 2}, {"replicas": 3, "minAvailable": 1}]
    assert gang_pod_counts(tasks, job_min_available({}, tasks)) == [2, 1]


@pytest.mark.parametrize(("task", "expected"), [
    ({"replicas": 8, "partitionPolicy": {"totalPartitions": 4, "partitionSize": 2, "minPartitions": 2}}, 4),
    ({"replicas": 8, "partitionPolicy": {"totalPartitions": 4, "partitionSize": 2}}, 8),
    ({"replicas": 8, "partitionPolicy": {"totalPartitions": 4, "partitionSize": 2, "minPartitions": 0}}, 8),
    ({"replicas": 8, "minAvailable": 6, "partitionPolicy": {"partitionSize": 2, "minPartitions": 2}}, 6),
    ({"replicas": 8, "partitionPolicy": {"minPartitions": 2}}, 8),
    ({"replicas": 8, "partitionPolicy": "junk"}, 8),
], ids=["min-partitions", "no-min-partitions", "min-partitions-zero", "written-wins", "no-size", "not-a-mapping"])
def test_a_partition_policy_sets_an_unset_task_minimum(task: dict[str, Any], expected: int) -> None:
    """Volcano v1.15.1 mutate_job.go ``mutateSpec``: a task without ``minAvailable`` whose partition policy sets
    ``minPartitions`` (> 0) gets ``minPartitions * partitionSize``; otherwise its replicas. The job controller's
    ``getMinTaskMember`` (job_controller_actions.go) reads it the same way, and also needs ``partitionSize``."""
    assert task_min_available(task) == expected
    assert job_min_available({}, [task]) == expected


def test_the_gang_of_a_partitioned_job_is_its_minimum_partitions() -> None:
    """An 8-replica task in 4 partitions of 2 that needs 2 of them: Volcano's gang is 4 pods, not 8."""
    tasks = [{"replicas": 8, "partitionPolicy": {"totalPartitions": 4, "partitionSize": 2, "minPartitions": 2}},
             {"replicas": 1}]
    assert gang_pod_counts(tasks, job_min_available({}, tasks)) == [4, 1]
