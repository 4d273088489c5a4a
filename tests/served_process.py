"""The admission server (HTTPS, as ``cardquota operator`` serves it) in a process of its own, so its resident memory
is measured apart from the test's (tests/reliability/test_bounded_servers.py, bench/bounded.py)."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from admission_reviews import A100, CLUSTER, review
from builders import pod


def memory_mib() -> tuple[float, float]:
    """(resident, peak resident) of this process, MiB."""
    fields = {}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def raise_open_files(wanted: int) -> None:
    """Raise this process's open-file limit to ``wanted`` (the test is skipped when the hard limit is lower): tests
    holding thousands of connections, each an open file on both sides."""
    import resource

    import pytest

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"{wanted} open files needed (hard limit {hard})")
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def maximal_update(limit: int) -> bytes:
    """An UPDATE review of ``limit`` bytes at most (and within 64 KiB of it) whose object and oldObject are card
    pods of as many JSON objects as fit: the most Python objects a body of that size decodes into."""
    def body(entries: int) -> bytes:
        card = pod("maximal", namespace="ml", card=A100, gpus=1, queue="team-a")
        card["spec"]["containers"][0]["env"] = [{"name": "A"}] * entries
        return json.dumps(review(card, operation="UPDATE", old=card)).encode()

    per_entry = (len(body(1000)) - len(body(0))) / 1000
    made = body(int((limit - len(body(0)) - 2**14) / per_entry))
    assert limit - 2**16 < len(made) <= limit
    return made


def _serve(pipe: Connection, limits: Any) -> None:
    from cardquota.core.policies.config import PolicyConfig
    from cardquota.runtime.cache import ClusterCache
    from cardquota.runtime.tls import ReloadableContext, new_ca, new_serving_cert
    from cardquota.webhooks.admission import Admission
    from cardquota.webhooks.server import build_app, serve

    async def main() -> None:
        ca = new_ca()
        cache = ClusterCache()
        cache.load(CLUSTER)
        tls = ReloadableContext(Path(tempfile.mkdtemp(prefix="cardquota-test-")) / "tls")
        tls.install(new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"]))
        options = {} if limits is None else {"limits": limits}
        runner = await serve(build_app(Admission(cache, PolicyConfig())), "127.0.0.1", 0, tls.context, **options)
        pipe.send((runner.addresses[0][1], ca.cert_pem))
        loop = asyncio.get_running_loop()
        while (command := await loop.run_in_executor(None, pipe.recv)) != "stop":
            if command == "memory":
                pipe.send(memory_mib())
        await runner.cleanup()

    asyncio.run(main())


@dataclass
class ServedProcess:
    port: int
    ca_pem: bytes
    pipe: Connection

    def memory(self) -> tuple[float, float]:
        """The server's (resident, peak resident), MiB."""
        self.pipe.send("memory")
        rss, peak = self.pipe.recv()
        return float(rss), float(peak)


@contextmanager
def served(limits: Any = None) -> Iterator[ServedProcess]:
    """The admission server over ``CLUSTER`` in a fresh process (``limits``: a ServerLimits, or the default)."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=_serve, args=(theirs, limits), daemon=True)
    process.start()
    try:
        if not ours.poll(60):
            raise RuntimeError("the admission server did not start within 60 s")
        port, ca_pem = ours.recv()
        yield ServedProcess(port, ca_pem, ours)
    finally:
        ours.send("stop")
        process.join(10)
        if process.is_alive():
            process.kill()
