"""cardquota's additions to Volcano's CRDs against a live API (kmock serving Volcano v1.15.1's real CRDs, rebuilt
from tests/data): ``kubectl cardquota crd install|status|uninstall`` patch only what they add, and the operator's
drift check notices a Volcano upgrade that dropped them (warning, gauge, one Event, Queue admission warnings)."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from builders import queue
from polling import eventually
from volcano_crds import patched_crd, upstream_crd

from cardquota.cli.main import run
from cardquota.core.crd_additions import CRD_NAMES, QUEUE_CRD
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.policies.queue import admit
from cardquota.kube import Connection, api_client
from cardquota.operator.crd_drift import MISSING, REASON, CrdDriftCheck
from cardquota.runtime.cache import ClusterCache
from tests.integration.test_kubectl_kmock import kubeconfig

pytestmark = [pytest.mark.asyncio,
              pytest.mark.kmock(client_fct=lambda url: aiohttp.ClientSession(
                  base_url=url, connector=aiohttp.TCPConnector(force_close=True)))]
CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"
RELEASE = "v1.15.1"


def install_volcano_crds(kmock: Any, *, patched: bool = False) -> None:
    for name in CRD_NAMES:
        crd = patched_crd(name, RELEASE) if patched else upstream_crd(name, RELEASE)
        crd["metadata"].pop("resourceVersion", None)
        kmock.objects[CRDS, None, name] = crd


def stored(kmock: Any, name: str) -> dict[str, Any]:
    crd = dict(kmock.objects[CRDS, None, name])
    crd["metadata"] = {key: value for key, value in crd["metadata"].items() if key == "name"}
    return crd


async def plugin(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(run, "kubectl cardquota", list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def without_resource_version(crd: dict[str, Any]) -> dict[str, Any]:
    crd["metadata"].pop("resourceVersion", None)
    return crd


async def test_install_status_uninstall_round_trip(volcano_kmock: Any, tmp_path: Path) -> None:
    install_volcano_crds(volcano_kmock)
    config = kubeconfig(tmp_path, str(volcano_kmock.url))
    code, text, _ = await plugin("crd", "status", "--kubeconfig", config)
    assert code == 1
    assert text.count("✗") == 5
    assert "missing — run: kubectl cardquota crd install" in text

    code, text, err = await plugin("crd", "install", "--kubeconfig", config)
    assert (code, err) == (0, "")
    assert "✓ queues.scheduling.volcano.sh: added column CARD-QUOTA, column CARD-USAGE, schema spec.dra" in text
    for name in CRD_NAMES:
        assert stored(volcano_kmock, name) == without_resource_version(patched_crd(name, RELEASE))

    code, text, _ = await plugin("crd", "install", "--kubeconfig", config)
    assert code == 0
    assert text.count("nothing to install (all in place)") == 3
    patches = [r for r in volcano_kmock if str(r.method).lower().endswith("patch") and CRDS in str(r.url)]
    assert len(patches) == 3  # the second install sent nothing
    code, text, _ = await plugin("crd", "--kubeconfig", config)
    assert code == 0
    assert text.count("✓") == 5

    code, text, _ = await plugin("crd", "uninstall", "queue", "--kubeconfig", config)
    assert code == 0
    assert "removed column CARD-QUOTA, column CARD-USAGE, schema spec.dra" in text
    assert stored(volcano_kmock, QUEUE_CRD) == without_resource_version(upstream_crd(QUEUE_CRD, RELEASE))


async def test_install_without_volcano_says_so(volcano_kmock: Any, tmp_path: Path) -> None:
    code, text, _ = await plugin("crd", "install", "--kubeconfig", kubeconfig(tmp_path, str(volcano_kmock.url)))
    assert code == 1
    assert text.count("not installed — install Volcano first") == 3


def events(kmock: Any) -> list[dict[str, Any]]:
    return [dict(obj) for key, obj in kmock.objects.items() if "events" in str(key[0])]


async def test_the_drift_check_notices_a_volcano_upgrade_and_its_repair(volcano_kmock: Any) -> None:
    install_volcano_crds(volcano_kmock)  # as a Volcano upgrade leaves it: Volcano's own CRD, no additions
    api = api_client(Connection(host=str(volcano_kmock.url).rstrip("/")))
    cache = ClusterCache()
    cache.load([])
    drift = CrdDriftCheck(api, cache, is_leader=lambda: True)
    await drift.check()
    assert drift.missing == ("schema spec.dra", "column CARD-QUOTA", "column CARD-USAGE")
    assert MISSING.labels(crd=QUEUE_CRD)._value.get() == 3
    await eventually(lambda: len(events(volcano_kmock)) == 1)
    (event,) = events(volcano_kmock)
    assert (event["reason"], event["involvedObject"]["kind"], event["metadata"]["namespace"]) == (
        REASON, "CustomResourceDefinition", "default")
    assert "kubectl cardquota crd install" in event["message"]

    with_dra = queue("team-a", {"NVIDIA-A100": 2}, capability={"cpu": "8", "memory": "8Gi"})
    with_dra["spec"]["dra"] = {"capability": {"gpu.example.com": {"count": 2}}}
    verdict = admit(with_dra, None, cache.ledger.snapshot, PolicyConfig())
    assert verdict.allowed
    assert any(w.startswith("spec.dra of this queue is dropped") and "kubectl cardquota crd install" in w
               for w in verdict.warnings)

    await drift.check()
    assert len(events(volcano_kmock)) == 1  # the same drift is reported once

    install_volcano_crds(volcano_kmock, patched=True)  # kubectl cardquota crd install
    await drift.check()
    assert drift.missing == ()
    assert MISSING.labels(crd=QUEUE_CRD)._value.get() == 0
    assert admit(with_dra, None, cache.ledger.snapshot, PolicyConfig()).warnings == ()


async def test_the_drift_check_without_leadership_or_access_keeps_quiet(volcano_kmock: Any) -> None:
    install_volcano_crds(volcano_kmock)
    api = api_client(Connection(host=str(volcano_kmock.url).rstrip("/")))
    cache = ClusterCache()
    drift = CrdDriftCheck(api, cache, is_leader=lambda: False)
    await drift.check()
    assert cache.ledger.snapshot.queue_crd_missing == ("schema spec.dra", "column CARD-QUOTA", "column CARD-USAGE")
    assert events(volcano_kmock) == []  # the leader records the event

    unreachable = CrdDriftCheck(api_client(Connection(host="http://127.0.0.1:9")), ClusterCache(),
                                is_leader=lambda: True)
    await unreachable.check()
    assert unreachable.missing is None
    assert MISSING.labels(crd=QUEUE_CRD)._value.get() == -1
