"""Admission latency over HTTPS on loopback: this server against a no-op aiohttp server, in one run.

    python bench/webhook.py [--clients 50] [--requests 20] [--rounds 10] [--bodies small|realistic|both]

Each server runs in its own process (so the load generator does not share its event loop); 50 concurrent clients
with keep-alive connections (as the API server uses) send AdmissionReview requests for Pods — half plain pods,
half card pods (which get a patch) — to /mutate and to /validate, in two sets of bodies, each against both servers.
As the API server does, /validate gets the object after the mutating webhook's patch (for a card pod, with the node
affinity cardquota adds; the driver applies the patch this server gives, before the measured runs). The sets:
``small`` (~0.6 KB reviews: only what the policy reads, the worst case for the ratio, as the no-op's own cost
grows with the body) and ``realistic`` (~5.5 KB: the CREATE of a Volcano job's worker pod as the API server sends
it, with env, probes, volumes, tolerations and managedFields; its plain half the same pod without a card). The
no-op server parses the review and answers ``allowed: true`` with the uid.

Whether the core runs compiled (``make compiled``; see docs/development.md, "Compiled core") or interpreted is printed:
``PYTHONPATH=build/compiled/tree python bench/webhook.py`` measures the compiled build ``make test-compiled``
left there. Both servers get the same GC treatment: collector on, their start-up heap frozen
(``gc.freeze``, as ``ClusterCache.load`` does once the cache is loaded).

Both servers run at once, each idle while the other is driven: after a warm-up round each, ``--rounds`` rounds
(10) each drive one server then the other (in alternating order) with ``--requests`` requests per client (20, so
1,000 reviews a server and round). Short interleaved rounds keep a slow spell of a shared machine (they last seconds
and move a lone measurement by tens of percent) from landing on one server only. Prints, over every round, the
p50/p99/mean latency of each and the CPU each server process spent per review (every thread; the latency at 50
clients is mostly queueing behind that CPU), their ratios (target: p50 and p99 at most 1.3 at 50 clients), and the
median and range of the per-round ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import ssl
import statistics
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import cluster, realistic_pod
from timing import cpu_seconds, frozen_heap, percentile, server_cpu_seconds, timed_post

from cardquota.cli.check import apply_patch
from cardquota.core.policies.config import PolicyConfig
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.tls import KeyPair, ReloadableContext, new_ca, new_serving_cert
from cardquota.webhooks.admission import Admission
from cardquota.webhooks.review import read_review
from cardquota.webhooks.server import build_app


class Run(NamedTuple):
    latencies: list[float]
    """Seconds per request, as the client saw it."""
    cpu_per_review: float
    """Server CPU seconds (all its threads) per review over the measured round."""


def noop_app() -> web.Application:
    async def answer(request: web.Request) -> web.Response:
        review = json.loads(await request.read())
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                  "response": {"uid": review["request"]["uid"], "allowed": True}})

    app = web.Application()
    app.router.add_post("/validate", answer)
    app.router.add_post("/mutate", answer)
    return app


def our_app() -> web.Application:
    cache = ClusterCache()
    cache.load(cluster(nodes=200, pods=3000))
    return build_app(Admission(cache, PolicyConfig()))


def serve(kind: str, pair: KeyPair, directory: str, ports: Any) -> None:
    async def main() -> None:
        tls = ReloadableContext(Path(directory) / kind)
        tls.install(pair)
        app = our_app() if kind == "ours" else noop_app()
        app.router.add_get("/cpu-seconds", cpu_seconds)
        frozen_heap()  # both servers alike (ClusterCache.load freezes the subject's heap once the cache is loaded)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.context)
        await site.start()
        ports.put(runner.addresses[0][1])
        await asyncio.Event().wait()

    asyncio.run(main())


def realistic_review(index: int) -> bytes:
    """The CREATE review of a Volcano job's worker pod (card pods at odd indexes), as the API server sends it to a
    webhook: no name yet (``generateName``), no status, the creating controller's managedFields."""
    pod = realistic_pod(index, None, groups=64)
    metadata = pod["metadata"]
    for generated in ("name", "uid", "resourceVersion", "creationTimestamp"):
        metadata.pop(generated, None)
    metadata["managedFields"] = [entry for entry in metadata["managedFields"] if "subresource" not in entry]
    pod.pop("status")
    if index % 2 == 0:  # the same worker on CPU: no card name, no GPU
        metadata["annotations"].pop("volcano.sh/card.name")
        for container in pod["spec"]["containers"]:
            container.get("resources", {}).get("limits", {}).pop("nvidia.com/gpu", None)
    return _review_body(pod)


def _review_body(pod: dict[str, Any]) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE", "namespace": "ml", "name": "", "object": pod}}).encode()


def pod_review(index: int) -> bytes:
    card = index % 2 == 1
    annotations = {"volcano.sh/card.name": "NVIDIA-A100|NVIDIA-H100", "scheduling.k8s.io/group-name": "pg-1"} \
        if card else {}
    limits = {"nvidia.com/gpu": "1"} if card else {"cpu": "500m"}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "worker-", "namespace": "ml", "annotations": annotations},
           "spec": {"schedulerName": "volcano",
                    "containers": [{"name": "main", "image": "app:1", "resources": {"limits": limits}}]}}
    return _review_body(pod)


BODIES = {"small": pod_review, "realistic": realistic_review}


class Bodies(NamedTuple):
    mutate: list[bytes]
    validate: list[bytes]
    """The same reviews, each object as it is after the mutating webhook's patch."""


def mutated(bodies: list[bytes]) -> list[bytes]:
    """Each review's object after cardquota's mutating webhook, as the API server sends it to validating webhooks
    (reinvocation aside)."""
    cache = ClusterCache()
    cache.load(cluster(nodes=200, pods=3000))
    admission = Admission(cache, PolicyConfig())
    result = []
    for body in bodies:
        review = json.loads(body)
        verdict = admission.review(read_review(body), mutating=True)
        review["request"]["object"] = apply_patch(review["request"]["object"], verdict.patch)
        result.append(json.dumps(review).encode())
    return result


async def drive(session: aiohttp.ClientSession, port: int, clients: int, requests: int, bodies: Bodies) -> Run:
    """One round against one server, over the session's kept-alive connections."""
    latencies: list[float] = []

    base = f"https://localhost:{port}"

    async def client(offset: int) -> None:
        for i in range(requests):
            path, sent = ("/mutate", bodies.mutate) if i % 2 else ("/validate", bodies.validate)
            latencies.append(await timed_post(session, base + path, sent[(offset + i) % 64]))

    before = await server_cpu_seconds(session, base)
    await asyncio.gather(*(client(c) for c in range(clients)))
    spent = await server_cpu_seconds(session, base) - before
    return Run(latencies, spent / len(latencies))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=20, help="requests per client, server and round")
    parser.add_argument("--rounds", type=int, default=10, help="rounds, each driving both servers in turn")
    parser.add_argument("--bodies", choices=[*BODIES, "both"], default="both")
    args = parser.parse_args()
    ca = new_ca()
    pair = new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"])
    print(f"{args.rounds} rounds of {args.clients * args.requests} AdmissionReview requests per server and body set, "
          f"{args.clients} concurrent clients, HTTPS on loopback; the core is {core_build()}")
    for name in BODIES if args.bodies == "both" else [args.bodies]:
        created = [BODIES[name](index) for index in range(64)]
        bodies = Bodies(created, mutated(created))
        size = statistics.fmean(map(len, created)) / 1024
        print(f"{name} bodies ({size:.1f} KiB on average)")
        with servers(pair) as ports:
            rounds = asyncio.run(interleaved(ports, ca, args, bodies))
        report(rounds)


async def interleaved(ports: dict[str, int], ca: KeyPair, args: argparse.Namespace, bodies: Bodies
                      ) -> list[dict[str, Run]]:
    """A warm-up round each (it opens the connections: no TLS handshake is measured), then ``args.rounds`` rounds
    driving both servers in turn (in alternating order)."""
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    async with contextlib.AsyncExitStack() as stack:
        sessions = {kind: await stack.enter_async_context(aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context, limit=args.clients))) for kind in ports}
        for kind, port in ports.items():
            await drive(sessions[kind], port, args.clients, args.requests, bodies)
        rounds = []
        for number in range(args.rounds):
            order = ("noop", "ours") if number % 2 == 0 else ("ours", "noop")
            rounds.append({kind: await drive(sessions[kind], ports[kind], args.clients, args.requests, bodies)
                           for kind in order})
    return rounds


def report(rounds: list[dict[str, Run]]) -> None:
    """Each server's figures over every round, their ratios, and the median and range of the per-round ratios."""
    for kind, label in (("noop", "no-op aiohttp server"), ("ours", "cardquota webhooks")):
        values = [latency for one in rounds for latency in one[kind].latencies]
        print(f"  {label:22} p50 {percentile(values, 0.5) * 1e3:6.2f} ms   p99 "
              f"{percentile(values, 0.99) * 1e3:6.2f} ms   mean {statistics.fmean(values) * 1e3:6.2f} ms   "
              f"server CPU {cpu_per_review(rounds, kind) * 1e6:4.0f} µs/review")
    ours = [latency for one in rounds for latency in one["ours"].latencies]
    noop = [latency for one in rounds for latency in one["noop"].latencies]
    extra = (cpu_per_review(rounds, "ours") - cpu_per_review(rounds, "noop")) * 1e6
    print(f"  p50 ratio {percentile(ours, 0.5) / percentile(noop, 0.5):.2f} (target <= 1.3)   p99 ratio "
          f"{percentile(ours, 0.99) / percentile(noop, 0.99):.2f} (target <= 1.3)   server CPU {extra:+.0f} µs/review "
          "over the no-op")
    per_round = [(percentile(one["ours"].latencies, 0.5) / percentile(one["noop"].latencies, 0.5),
                  percentile(one["ours"].latencies, 0.99) / percentile(one["noop"].latencies, 0.99),
                  (one["ours"].cpu_per_review - one["noop"].cpu_per_review) * 1e6) for one in rounds]
    print(f"  per round ({len(rounds)}): " + "   ".join(
        f"{label} median {statistics.median(values):{spec}} ({min(values):{spec}} to {max(values):{spec}})"
        for label, spec, values in zip(("p50 ratio", "p99 ratio", "server CPU over the no-op (µs/review)"),
                                       (".2f", ".2f", "+.0f"), zip(*per_round, strict=True), strict=True)))


def cpu_per_review(rounds: list[dict[str, Run]], kind: str) -> float:
    return (sum(one[kind].cpu_per_review * len(one[kind].latencies) for one in rounds)
            / sum(len(one[kind].latencies) for one in rounds))


@contextlib.contextmanager
def servers(pair: KeyPair) -> Iterator[dict[str, int]]:
    """Both servers (``noop`` and ``ours``), each in a process of its own; yields their ports."""
    with tempfile.TemporaryDirectory() as directory:
        context = multiprocessing.get_context("spawn")
        processes, ports = [], {}
        try:
            for kind in ("noop", "ours"):
                queue = context.Queue()
                process = context.Process(target=serve, args=(kind, pair, directory, queue), daemon=True)
                process.start()
                processes.append(process)
                ports[kind] = queue.get(timeout=60)
            yield ports
        finally:
            for process in processes:
                process.terminate()
                process.join()


def core_build() -> str:
    """``compiled (mypyc)`` when the core's modules are the compiled build's extension modules."""
    from cardquota.core.policies import pod
    return "compiled (mypyc)" if not (pod.__file__ or "").endswith(".py") else "interpreted"


if __name__ == "__main__":
    main()
