"""The host kubelet's pure parts (tests/e2e/local/kubelet.py): which image a pod names, the kubelet's ``$(VAR)``
expansion, the downward API, and the atomic writer of configMap/secret volumes — each as the real kubelet does it
(k8s.io/kubernetes v1.35: ``third_party/forked/golang/expansion/expand.go``, ``pkg/fieldpath/fieldpath.go``,
``pkg/volume/util/atomic_writer.go``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from e2e.local import controlplane, kubelet


@pytest.mark.parametrize(("reference", "name"), [
    ("docker.io/volcanosh/vc-scheduler:v1.14.0", "vc-scheduler"),
    ("volcanosh/vc-webhook-manager", "vc-webhook-manager"),
    ("cardquota:dev", "cardquota"),
    ("registry.invalid/set-your-registry/cardquota:0.1.0", "cardquota"),
    ("localhost:5000/cardquota@sha256:0123", "cardquota"),
])
def test_the_image_is_named_by_its_repository(reference: str, name: str) -> None:
    assert kubelet.repository(reference) == name


@pytest.mark.parametrize(("text", "expanded"), [
    ("--namespace=$(NS)", "--namespace=cardquota-system"),
    ("$(NS)/$(NS)", "cardquota-system/cardquota-system"),
    ("$(UNKNOWN)", "$(UNKNOWN)"),  # an undefined name stays as written
    ("$$(NS)", "$(NS)"),  # $$ is a literal $
    ("2>&1", "2>&1"),  # Volcano's installer passes this as an argument: it is not a shell
])
def test_command_and_args_expand_variables_as_the_kubelet_does(text: str, expanded: str) -> None:
    assert kubelet.expand(text, {"NS": "cardquota-system"}) == expanded


POD = {"metadata": {"name": "cardquota-0", "namespace": "cardquota-system", "uid": "u-1",
                    "labels": {"app": "cardquota"}, "annotations": {"a/b": "c"}},
       "spec": {"nodeName": kubelet.NODE, "serviceAccountName": "cardquota"}}


@pytest.mark.parametrize(("path", "value"), [
    ("metadata.name", "cardquota-0"), ("metadata.namespace", "cardquota-system"), ("metadata.uid", "u-1"),
    ("spec.serviceAccountName", "cardquota"), ("spec.nodeName", kubelet.NODE), ("status.podIP", "10.250.0.10"),
    ("metadata.labels['app']", "cardquota"), ("metadata.annotations['a/b']", "c"),
    ("metadata.labels['missing']", ""),
])
def test_the_downward_api_gives_the_pods_fields(path: str, value: str) -> None:
    assert kubelet.field_value(POD, path, "10.250.0.10") == value


def test_an_unsupported_field_is_said_not_guessed() -> None:
    with pytest.raises(kubelet.PodError, match=r"metadata\.generateName"):
        kubelet.field_value(POD, "metadata.generateName", "10.250.0.10")


def test_a_volume_is_written_atomically_and_swapped_when_its_content_changes(tmp_path: Path) -> None:
    content = {"volcano-scheduler.conf": (b"actions: enqueue\n", 0o644)}
    volume = kubelet.Volume(tmp_path, lambda: dict(content))
    volume.sync()
    first = (tmp_path / "..data").resolve()
    assert (tmp_path / "volcano-scheduler.conf").read_bytes() == b"actions: enqueue\n"
    assert (tmp_path / "volcano-scheduler.conf").is_symlink()  # through ..data, as the kubelet lays it out
    volume.sync()
    assert (tmp_path / "..data").resolve() == first  # unchanged content: nothing rewritten

    content["volcano-scheduler.conf"] = (b"actions: enqueue, allocate\n", 0o644)
    content["extra/nested"] = (b"x", 0o600)
    volume.sync()
    assert (tmp_path / "..data").resolve() != first
    assert not first.exists()  # the old generation is removed once the link points at the new one
    assert (tmp_path / "volcano-scheduler.conf").read_bytes() == b"actions: enqueue, allocate\n"
    assert (tmp_path / "extra" / "nested").stat().st_mode & 0o777 == 0o600

    del content["extra/nested"]
    volume.sync()
    assert not (tmp_path / "extra").exists()  # a key that went away goes away


_BRIDGE_CHURN = """
import sys
sys.path.insert(0, sys.argv[1])
from e2e.local import controlplane
controlplane.network()
def mac():  # (not /sys/class/net: that shows the namespace /sys was mounted in)
    return controlplane.sh("ip", "-o", "link", "show", controlplane.BRIDGE).split("link/ether ")[1].split()[0]
seen = [mac()]
for i in range(6):  # pods come: their veths join the bridge
    controlplane.sh("ip", "link", "add", f"v{i}", "type", "veth", "peer", "name", f"p{i}")
    controlplane.sh("ip", "link", "set", f"v{i}", "master", controlplane.BRIDGE, "up")
    seen.append(mac())
for i in range(6):  # and go
    controlplane.sh("ip", "link", "del", f"v{i}")
    seen.append(mac())
print(" ".join(seen))
"""


def test_the_pods_bridge_keeps_one_hardware_address_while_pods_come_and_go() -> None:
    """A bridge left to choose its address takes its lowest port's, so a pod's veth joining or leaving moved it, and
    every other pod's neighbour entry for the host went stale: webhook calls timed out for seconds in CI. Run in a
    network namespace of its own (needs root and ``unshare``)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip")
    tests = Path(__file__).resolve().parents[1]
    result = subprocess.run(["unshare", "-n", sys.executable, "-c", _BRIDGE_CHURN, str(tests)],
                            capture_output=True, text=True)
    if result.returncode != 0 and ("Operation not permitted" in result.stderr or "unshare failed" in result.stderr):
        pytest.skip(f"cannot make a network namespace here: {result.stderr.strip()[:200]}")
    assert result.returncode == 0, result.stderr
    assert set(result.stdout.split()) == {controlplane.BRIDGE_MAC}
