"""Admission latency over HTTPS on loopback: this server against a no-op aiohttp server, in one run.

    python bench/webhook.py [--clients 50] [--requests 40] [--bodies small|realistic|both]

Each server runs in its own process (so the load generator does not share its event loop); 50 concurrent clients
with keep-alive connections (as the API server uses) send AdmissionReview requests for Pods — half plain pods,
half card pods (which get a patch) — to /mutate and to /validate, in two sets of bodies, each against both servers.
As the API server does, /validate gets the object after the mutating webhook's patch (for a card pod, with the node
affinity cardquota adds; the driver applies the patch this server gives, before the measured runs). The sets:
``small`` (~0.6 KB reviews: only what the policy reads, the worst case for the ratio, as the no-op's own cost
grows with the body) and ``realistic`` (~5.5 KB: the CREATE of a Volcano job's worker pod as the API server sends
it, with env, probes, volumes, tolerations and managedFields; its plain half the same pod without a card). The
no-op server parses the review and answers ``allowed: true`` with the uid.

Whether the core runs compiled (``make compiled``; see the README's "Compiled core") or interpreted is printed:
``PYTHONPATH=build/compiled/tree python bench/webhook.py`` measures the compiled build ``make test-compiled``
left there. Both servers get the same GC treatment: collector on, their start-up heap frozen
(``gc.freeze``, as ``ClusterCache.load`` does once the cache is loaded). Prints p50/p99 of each, the p99 ratio
(target: at most 1.3 at 50 clients), and the CPU each server process spent per review over the measured round
(every thread; the latency at 50 clients is mostly queueing behind that CPU). A round measures both servers, one
after the other, in alternating order; the median and range of each ratio over the rounds (``--rounds``, 3) are
printed last, as a noisy machine moves a single round's figures by tens of percent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import ssl
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import cluster, realistic_pod
from timing import frozen_heap, percentile

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


async def cpu_seconds(_: web.Request) -> web.Response:
    """The server process's CPU time so far (every thread): the driver reads it around the measured round."""
    return web.Response(text=repr(time.process_time()))


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


async def drive(port: int, ca: KeyPair, clients: int, requests: int, bodies: Bodies) -> Run:
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(ssl=context, limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def client(offset: int) -> None:
            for i in range(requests):
                path, sent = ("/mutate", bodies.mutate) if i % 2 else ("/validate", bodies.validate)
                start = time.perf_counter()
                async with session.post(f"https://localhost:{port}{path}", data=sent[(offset + i) % 64],
                                        headers={"Content-Type": "application/json"}) as response:
                    await response.read()
                    assert response.status == 200
                latencies.append(time.perf_counter() - start)

        async def cpu() -> float:
            async with session.get(f"https://localhost:{port}/cpu-seconds") as response:
                return float(await response.text())

        await asyncio.gather(*(client(c) for c in range(clients)))  # warm-up round
        latencies.clear()
        before = await cpu()
        await asyncio.gather(*(client(c) for c in range(clients)))
        spent = await cpu() - before
    return Run(latencies, spent / len(latencies))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=40, help="requests per client (after a warm-up round)")
    parser.add_argument("--bodies", choices=[*BODIES, "both"], default="both")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds per body set, each measuring both servers (in alternating order)")
    args = parser.parse_args()
    ca = new_ca()
    pair = new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"])
    total = args.clients * args.requests
    print(f"{total} AdmissionReview requests per server, round and body set, {args.clients} concurrent clients, "
          f"HTTPS on loopback; the core is {core_build()}")
    for name in BODIES if args.bodies == "both" else [args.bodies]:
        created = [BODIES[name](index) for index in range(64)]
        bodies = Bodies(created, mutated(created))
        size = statistics.fmean(map(len, created)) / 1024
        print(f"{name} bodies ({size:.1f} KiB on average)")
        rounds = []
        for number in range(args.rounds):
            order = ("noop", "ours") if number % 2 == 0 else ("ours", "noop")
            results = {kind: measure(kind, pair, ca, args, bodies) for kind in order}
            rounds.append(report_round(number + 1, results))
        if len(rounds) > 1:
            print(f"  over {len(rounds)} rounds: " + "   ".join(
                f"{label} median {statistics.median(values):{spec}} ({min(values):{spec}} to {max(values):{spec}})"
                for label, spec, values in zip(("p50 ratio", "p99 ratio", "server CPU over the no-op (µs/review)"),
                                               (".2f", ".2f", "+.0f"), zip(*rounds, strict=True), strict=True)))


def report_round(number: int, results: dict[str, Run]) -> tuple[float, float, float]:
    """Prints one round; returns its p50 ratio, p99 ratio and the server CPU over the no-op (µs a review)."""
    for kind, label in (("noop", "no-op aiohttp server"), ("ours", "cardquota webhooks")):
        values, cpu = results[kind].latencies, results[kind].cpu_per_review
        print(f"  round {number}  {label:22} p50 {percentile(values, 0.5) * 1e3:6.2f} ms   p99 "
              f"{percentile(values, 0.99) * 1e3:6.2f} ms   mean {statistics.fmean(values) * 1e3:6.2f} ms   "
              f"server CPU {cpu * 1e6:4.0f} µs/review")
    ours, noop = results["ours"].latencies, results["noop"].latencies
    p99_ratio = percentile(ours, 0.99) / percentile(noop, 0.99)
    p50_ratio = percentile(ours, 0.5) / percentile(noop, 0.5)
    extra = (results["ours"].cpu_per_review - results["noop"].cpu_per_review) * 1e6
    print(f"  round {number}  p99 ratio {p99_ratio:.2f} (target <= 1.3)   p50 ratio {p50_ratio:.2f} (target <= 1.3)   "
          f"server CPU {extra:+.0f} µs/review over the no-op")
    return p50_ratio, p99_ratio, extra


def measure(kind: str, pair: KeyPair, ca: KeyPair, args: argparse.Namespace, bodies: Bodies) -> Run:
    """One server (``noop`` or ``ours``) in a process of its own, driven with ``bodies``."""
    with tempfile.TemporaryDirectory() as directory:
        context = multiprocessing.get_context("spawn")
        ports = context.Queue()
        process = context.Process(target=serve, args=(kind, pair, directory, ports), daemon=True)
        process.start()
        try:
            port = ports.get(timeout=60)
            return asyncio.run(drive(port, ca, args.clients, args.requests, bodies))
        finally:
            process.terminate()
            process.join()


def core_build() -> str:
    """``compiled (mypyc)`` when the core's modules are the compiled build's extension modules."""
    from cardquota.core.policies import pod
    return "compiled (mypyc)" if not (pod.__file__ or "").endswith(".py") else "interpreted"


if __name__ == "__main__":
    main()
