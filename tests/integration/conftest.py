"""Fixtures: a CA and a running HTTPS admission server over a loaded cache; Connections to kmock as the operator's
and the extender's accounts, held to their shipped RBAC."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from admission_reviews import CLUSTER, Server, client_context
from operator_runs import calling_as, extender_grants, shipped_grants

from cardquota.core.policies.config import PolicyConfig
from cardquota.kube import Connection
from cardquota.operator.settings import Settings
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.tls import KeyPair, ReloadableContext, new_ca, new_serving_cert
from cardquota.webhooks.admission import Admission
from cardquota.webhooks.server import build_app, serve


@pytest.fixture
def ca() -> KeyPair:
    return new_ca()


@pytest.fixture
async def server(tmp_path: Path, ca: KeyPair) -> AsyncIterator[Server]:
    cache = ClusterCache()
    cache.load(CLUSTER)
    admission = Admission(cache, PolicyConfig())
    tls = ReloadableContext(tmp_path / "tls")
    tls.install(new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"]))
    runner = await serve(build_app(admission), "127.0.0.1", 0, tls.context)
    port = runner.addresses[0][1]
    connector = aiohttp.TCPConnector(ssl=client_context(ca), force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        yield Server(f"https://localhost:{port}", admission, cache, tls, ca, session)
    await runner.cleanup()


@pytest.fixture
def operator_connection(volcano_kmock: Any) -> Iterator[Connection]:
    """A Connection to kmock as the operator's account (``cardquota``, all-in-one), held to the RBAC the chart
    renders for it; none of its requests was refused at the end."""
    with calling_as(volcano_kmock, shipped_grants(Settings())) as connection:
        yield connection


@pytest.fixture
def extender_connection(volcano_kmock: Any) -> Iterator[Connection]:
    """A Connection to kmock as the served extender's account (``cardquota-extender``), held to the RBAC
    manifests/components/extender grants it; none of its requests was refused at the end."""
    with calling_as(volcano_kmock, extender_grants()) as connection:
        yield connection
