"""A Volcano Job's gang size as Volcano's own Job mutation defaults it (pkg/webhooks/admission/jobs/mutate/
mutate_job.go, ``patchDefaultMinAvailable``, v1.8 to v1.15.1): a written, non-zero ``spec.minAvailable`` as is;
unset or 0, the tasks' ``minAvailable`` added up, a task's replicas where it sets none. cardquota's Job mutation
runs before Volcano's (its configuration's name sorts first), so it must read an undefaulted Job the same way."""

from __future__ import annotations

from typing import Any

import pytest

from cardquota.core.workloads import gang_pod_counts, job_min_available


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
