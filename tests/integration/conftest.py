"""Fixtures: a CA and a running HTTPS admission server over a loaded cache."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from admission_reviews import CLUSTER, Server, client_context

from cardquota.core.policies.config import PolicyConfig
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
