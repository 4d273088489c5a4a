"""``kubectl cardquota`` offline (``--cluster``): the tables, JSON and YAML, limits, colour, exit codes, errors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from kubeconfigs import write_kubeconfig
from user_docs import section

from cardquota.cli.kubectl import _kube
from cardquota.cli.main import run
from cardquota.cli.output import usage_table
from cardquota.core.errors import InputError
from cardquota.core.ledger import QueueUsage
from cardquota.kube import api_error

REPO = Path(__file__).resolve().parents[2]
CLUSTER = str(REPO / "examples" / "cluster.yaml")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


EXAMPLE_ARGUMENTS_NOTE = (
    "assumed: cardUnlimitedCpuMemory=false, predicate.MGPUEnable=false, crossquota off (the plugins' defaults: no "
    "ConfigMap cardquota-extender-conf or volcano-scheduler-configmap in the input)\n")
"""What an offline command that applies the scheduler's rules says of the bundled example (it holds no ConfigMap)."""


def plugin(*argv: str, stdout: io.StringIO | None = None) -> tuple[int, str, str]:
    out, err = stdout or io.StringIO(), io.StringIO()
    code = run("kubectl cardquota", list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_usage_json_and_yaml_carry_the_ledger() -> None:
    code, text, _ = plugin("usage", "team-b", "--cluster", CLUSTER, "-o", "json")
    assert code == 0
    document = json.loads(text)
    assert document["queues"]["team-b"]["quota"] == {"NVIDIA-A100": 3, "NVIDIA-GeForce-RTX-4090": 8}
    _, text, _ = plugin("usage", "team-b", "--cluster", CLUSTER, "-o", "yaml")
    assert yaml.safe_load(text) == document


def test_usage_table_shows_free_and_used_share_and_a_bar_when_wide() -> None:
    usage = {"q": QueueUsage(quota={"A": 10}, allocated={"A": 6}, inqueue={"A": 2}, pending={"A": 5})}
    table = usage_table(usage, wide=True, color=False, limit=None, err=io.StringIO())
    assert table.splitlines() == [
        "QUEUE  CARD  QUOTA  ALLOCATED  INQUEUE  PENDING  FREE  USED  BAR",
        "q      A     10     6          2        5        2     80%   [################....]",
    ]
    painted = usage_table(usage, wide=False, color=True, limit=None, err=io.StringIO())
    assert "\033[33m" in painted  # 80 % used: yellow
    assert "\033[" not in usage_table(usage, wide=False, color=False, limit=None, err=io.StringIO())


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    _, on_tty, _ = plugin("usage", "--cluster", CLUSTER, stdout=Terminal())
    assert "\033[" in on_tty
    monkeypatch.setenv("NO_COLOR", "1")
    _, without, _ = plugin("usage", "--cluster", CLUSTER, stdout=Terminal())
    assert "\033[" not in without
    assert without.startswith("QUEUE")


def test_limit_cuts_the_table_and_says_so() -> None:
    code, text, err = plugin("nodes", "--cluster", CLUSTER, "-o", "table", "--limit", "2")
    assert code == 0
    assert len(text.split("\n\n")[0].splitlines()) == 3  # header and two rows
    assert err.startswith("10 more rows not shown (raise --limit)")


def test_nodes_totals_and_selector() -> None:
    _, text, _ = plugin("nodes", "--cluster", CLUSTER, "-o", "json", "-l", "nvidia.com/gpu.product=NVIDIA-H100")
    document = json.loads(text)
    assert list(document["nodes"]) == ["gpu-h100-01"]
    assert document["totals"] == {"NVIDIA-H100": {"kind": "whole", "resource": "nvidia.com/gpu", "allocatable": 8,
                                                  "used": 4}}


def test_explain_exits_1_when_something_blocks_and_0_when_nothing_does() -> None:
    good = str(REPO / "examples" / "check" / "good.yaml")
    code, text, _ = plugin("explain", "job/training-job", "-n", "team-a", "--cluster", CLUSTER, "--cluster", good)
    assert code == 1
    assert "Queue team-a has insufficient NVIDIA-A100 quota: requested 8, total would be 16" in " ".join(text.split())
    code, text, _ = plugin("explain", "pod/diffusion-train-0", "-n", "team-b", "--cluster", CLUSTER, "-o", "json")
    assert code == 0
    assert json.loads(text)[0]["blocked"] is False


@pytest.mark.parametrize(("argv", "message"), [
    (["explain", "pod/nope", "-n", "ml"], "pod ml/nope not found in"),
    (["explain", "deployment/x"], "expected pod/NAME, podgroup/NAME, job/NAME or a workload of a registered kind"),
    (["explain"], "name what to explain"),
    (["usage", "nobody"], "no queue named nobody"),
    (["nodes", "-l", "gpu in (a"], "--selector: 'gpu in (a': expected ',' or ')' in the values, found the end"),
])
def test_input_errors_are_one_line_and_exit_2(argv: list[str], message: str) -> None:
    code, _, err = plugin(*argv, "--cluster", CLUSTER)
    assert code == 2
    assert message in err
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_api_errors_become_one_line_naming_what_was_refused() -> None:
    forbidden = api_error('GET /api/v1/pods: HTTP 403: pods is forbidden: User "dev" cannot list resource "pods" in '
                          'API group "" at the cluster scope', 403)

    def refuse() -> None:
        raise forbidden

    with pytest.raises(InputError, match=r'not allowed: .*cannot list resource "pods"'):
        _kube(refuse)


def test_an_unreachable_cluster_is_one_line(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path, "http://127.0.0.1:9")
    code, _, err = plugin("usage", "--kubeconfig", kubeconfig)
    assert code == 2
    assert "no Kubernetes API reachable at http://127.0.0.1:9" in err
    assert err.count("\n") == 1


def test_the_readme_shows_what_the_plugin_prints() -> None:
    """Every ``$ kubectl cardquota …`` example of the plugin's section (README or docs/), run again, prints exactly
    what it shows."""
    block = section("`kubectl cardquota`: usage").split("```console\n", 1)[1].split("```", 1)[0]
    examples = block.split("$ kubectl cardquota ")[1:]
    assert len(examples) == 3
    for example in examples:
        command, _, shown = example.partition("\n")
        argv = [arg.replace("examples/", f"{REPO}/examples/") for arg in command.split()]
        _, text, _ = plugin(*argv)
        assert text.rstrip() == shown.rstrip(), command


def test_all_namespaces_finds_the_object_and_an_ambiguous_name_is_refused(tmp_path: Path) -> None:
    code, text, _ = plugin("explain", "pod/diffusion-train-0", "-A", "--cluster", CLUSTER)
    assert code == 0
    assert text.startswith("Pod team-b/diffusion-train-0:")
    twins = tmp_path / "twins.yaml"
    twins.write_text(yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "same", "namespace": namespace},
         "spec": {"containers": [{"name": "c"}]}} for namespace in ("a", "b")]))
    code, _, err = plugin("explain", "pod/same", "-A", "--cluster", str(twins))
    assert code == 2
    assert "pod same is in several namespaces (a, b): choose one with -n" in err


def test_watch_prints_the_table_again() -> None:
    code, text, _ = plugin("usage", "team-b", "--cluster", CLUSTER, "-o", "table", "--watch", "--interval", "0",
                           "--refreshes", "2")
    assert code == 0
    assert [line.split()[0] for line in text.splitlines() if line.startswith("QUEUE")] == ["QUEUE", "QUEUE"]


def test_explain_errors_name_the_file_and_jobs_are_told_apart_by_api_group(tmp_path: Path) -> None:
    broken = tmp_path / "job.yaml"
    broken.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                      "spec": {"containers": [{"name": "c", "resources": {
                                          "limits": {"nvidia.com/gpu": "two"}}}]}}))
    code, _, err = plugin("explain", "-f", str(broken), "--cluster", CLUSTER)
    assert code == 2
    assert str(broken) in err
    assert '"two" is not a quantity' in err
    same_name = tmp_path / "jobs.yaml"
    same_name.write_text(yaml.safe_dump_all([
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "zero", "namespace": "team-a"},
         "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}},
        {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "zero", "namespace": "team-a"},
         "spec": {"queue": "team-a", "tasks": []}}]))
    code, text, err = plugin("explain", "job/zero", "-n", "team-a", "--cluster", CLUSTER, "--cluster", str(same_name))
    assert code == 0, err
    assert text.startswith("Job team-a/zero:")


def test_check_puts_objects_without_a_namespace_in_the_one_given(tmp_path: Path) -> None:
    manifest = tmp_path / "pg.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                                        "metadata": {"name": "pg"}, "spec": {"queue": "team-b"}}))
    code, text, _ = plugin("check", "-f", str(manifest), "-n", "team-b", "--cluster", CLUSTER, "-o", "json")
    assert code == 0
    assert json.loads(text)[0]["namespace"] == "team-b"


def test_usage_warns_about_an_unreadable_quota_as_cardquota_usage_does(tmp_path: Path) -> None:
    """Issue 18 item 9: ``kubectl cardquota usage`` was silent about a quota that cannot be read, where ``cardquota
    usage`` says "(ignored)"; both now print the same warnings (cli.output.usage_warnings), each once under --watch,
    and only for the queues shown."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all([
        *[{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
           "metadata": {"name": name, "annotations": {"volcano.sh/card.quota": quota}}, "spec": {"weight": 1}}
          for name, quota in (("broken", "{not json"), ("fine", '{"NVIDIA-A100": 2}'))],
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {
            "nvidia.com/gpu.product": "NVIDIA-A100"}}, "status": {"allocatable": {"nvidia.com/gpu": "1"}}}]))
    err = io.StringIO()
    assert run("cardquota", ["usage", "--cluster", str(cluster), "-o", "json"], stdout=io.StringIO(),
               stderr=err) == 0
    expected = ('warning: Queue broken: metadata.annotations["volcano.sh/card.quota"]: is not valid JSON: '
                "expecting property name enclosed in double quotes at line 1, column 2 "
                '(expected {"<card type>": <cards>, ...}) (ignored)\n')
    assert err.getvalue() == expected
    code, _, plugin_err = plugin("usage", "--cluster", str(cluster), "-o", "table", "--watch", "--interval", "0",
                                 "--refreshes", "2")
    assert code == 0
    assert plugin_err == expected
    _, _, only_fine = plugin("usage", "fine", "--cluster", str(cluster), "-o", "json")
    assert only_fine == ""


def test_explain_kind_name_with_a_file_explains_that_object_of_the_file(tmp_path: Path) -> None:
    """Issue 18 item 11: ``explain job/X -f FILE`` ignored ``-f`` (X was looked up in the cluster only: "not found").
    KIND/NAME now picks the object from FILE; FILE's other objects join the cluster (a pod sees its PodGroup from
    the same file), objects naming no namespace go to ``-n``'s."""
    workload = tmp_path / "workload.yaml"
    workload.write_text(yaml.safe_dump_all([
        {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
         # (1 card: team-a holds 8 of its 10 NVIDIA-A100 and 2 of its 5 NVIDIA-H100, and reserves 4 more on either:
         # enqueued, then held at the gate)
         "metadata": {"name": "newjob", "annotations": {"volcano.sh/card.request": '{"NVIDIA-A100": 1}'}},
         "spec": {"schedulerName": "volcano", "queue": "team-a", "minAvailable": 1, "tasks": [
             {"name": "w", "replicas": 1, "template": {
                 "metadata": {"annotations": {"volcano.sh/card.name": "NVIDIA-A100"}},
                 "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}]}},
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
         "metadata": {"name": "huge", "annotations": {"volcano.sh/card.request": '{"NVIDIA-H100": 50}'}},
         "spec": {"queue": "team-a", "minMember": 1}, "status": {"phase": "Pending"}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "huge-0", "annotations": {"scheduling.k8s.io/group-name": "huge",
                                                        "volcano.sh/card.name": "NVIDIA-H100"}},
         "spec": {"schedulerName": "volcano", "containers": [{"name": "c", "resources": {
             "limits": {"nvidia.com/gpu": 1}}}]}}]))
    code, text, err = plugin("explain", "job/newjob", "-n", "team-a", "-f", str(workload), "--cluster", CLUSTER)
    # Its enqueue check lets it in; simulate's gate then holds its pod, team-a's A100|H100 reservation counted
    # against the A100 it asks for (issue 40, item 5: explain -f runs simulate's enqueue and placement).
    assert (code, err) == (1, EXAMPLE_ARGUMENTS_NOTE)
    assert "simulate cannot place pod team-a/newjob-w-0: waiting at the card-quota gate" in " ".join(text.split())
    assert text.startswith("Job team-a/newjob:\n")
    assert "Pod " not in text  # only the object named
    code, text, _ = plugin("explain", "pod/huge-0", "-n", "team-a", "-f", str(workload), "--cluster", CLUSTER)
    assert code == 1
    assert "Its PodGroup team-a/huge cannot be enqueued" in text
    code, _, err = plugin("explain", "job/training-job", "-n", "team-a", "-f", str(workload), "--cluster", CLUSTER)
    assert code == 2
    assert f"job team-a/training-job not found in {workload}" in err


@pytest.mark.parametrize(("selector", "nodes"), [
    ("nvidia.com/gpu.product==NVIDIA-H100", ["gpu-h100-01"]),
    ("nvidia.com/gpu.product!=NVIDIA-A100,nvidia.com/gpu.product", ["gpu-4090-01", "gpu-4090-02", "gpu-h100-01"]),
    ("nvidia.com/gpu.product in (NVIDIA-H100, NVIDIA-GeForce-RTX-4090)", ["gpu-4090-01", "gpu-4090-02",
                                                                          "gpu-h100-01"]),
    ("!nvidia.com/gpu.product", ["cpu-01", "gpu-unlabeled-01", "npu-910b-01"]),
])
def test_nodes_selector_takes_kubectls_grammar(selector: str, nodes: list[str]) -> None:
    """Issue 18 item 13: ``nodes -l 'key!=value'`` (or ``==``) printed an empty table with exit 0; equality,
    inequality, set-based, existence and comparison requirements are read as kubectl reads them."""
    code, text, err = plugin("nodes", "--cluster", CLUSTER, "-o", "json", "-l", selector)
    assert (code, err) == (0, "")
    assert list(json.loads(text)["nodes"]) == nodes


def test_usage_counts_pods_of_the_schedulers_it_is_told_volcano_runs(tmp_path: Path) -> None:
    """A bound GPU pod of scheduler volcano-gpu with no PodGroup: charged to its queue only when usage is told,
    as the operator is, that volcano-gpu is Volcano's (Volcano charges no queue for another scheduler's pod)."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all([
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
         "metadata": {"name": "default", "annotations": {"volcano.sh/card.quota": '{"NVIDIA-A100": 2}'}},
         "spec": {"weight": 1}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {
            "nvidia.com/gpu.product": "NVIDIA-A100"}}, "status": {"allocatable": {"nvidia.com/gpu": "2"}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
         "spec": {"schedulerName": "volcano-gpu", "nodeName": "n", "containers": [
             {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}, "status": {"phase": "Running"}}]))
    _, text, _ = plugin("usage", "default", "--cluster", str(cluster), "-o", "json")
    assert not any(json.loads(text)["queues"]["default"]["allocated"].values())
    _, text, _ = plugin("usage", "default", "--cluster", str(cluster), "--schedulers", "volcano-gpu", "-o", "json")
    assert json.loads(text)["queues"]["default"]["allocated"] == {"NVIDIA-A100": 2}
