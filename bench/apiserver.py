"""A Kubernetes API server stand-in for the scale benchmark (``bench/scale.py``), run in a process of its own so that
its CPU is not counted as the operator's.

    python bench/apiserver.py --pods 10000 [--port 0]

It serves a synthetic cluster (nodes = pods/20, 20 queues, a PodGroup per 8 pods, pods from
``synthetic.realistic_pod``, a fifth of them pending) the way the API server does what the operator asks of it:

* discovery (``/api``, ``/apis``, ``/api/v1``, ``/apis/<group>/<version>``, ``/version``), which Kopf reads;
* lists of every kind ``operator/watch.follow`` and Kopf read, paginated with ``limit``/``continue`` when asked
  (one page of everything when not), with the list's ``resourceVersion``;
* watches (``watch=true``) from a resourceVersion: the events after it replayed from a bounded log (older than the
  log: an ERROR 410, as the API server answers), then kept open with a BOOKMARK every few seconds, closed after
  ``timeoutSeconds`` when given;
* Leases (GET/POST/PATCH, for the leader election), and any other POST/PATCH (Events, annotation patches) answered
  at once; any other GET is a 404.

Objects are generated once at start and held as JSON bytes, so a page costs a join; the process prints
``ready <port>`` when it serves. ``POST /_bench/storm?rate=2000&seconds=20&node_rate=20`` starts an event storm (pod
MODIFIED events — status updates and binds — deletions and re-additions, at ``rate`` a second, plus node heartbeats
at ``node_rate``), its changes kept in the lists too; ``GET /_bench/stats`` tells the events sent and the watches
open.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import PRODUCTS, realistic_pod

QUEUES = 20
BOOKMARK_SECONDS = 5.0
LOG_EVENTS = 20_000
"""Watch events kept for replay (a watch from an older resourceVersion gets a 410)."""
STORM_POOL = 4_000
"""Pods the storm's events are about (spread over the cluster)."""
FIRST_VERSION = 3_000_000
"""The resourceVersion of the cluster at start (every generated object is older)."""
RV_MARK = b"__RESOURCE_VERSION__"
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Kind:
    """One listed resource: its collection path, kind and apiVersion, and whether it is namespaced."""

    path: str
    kind: str
    api_version: str
    namespaced: bool

    @property
    def plural(self) -> str:
        return self.path.rsplit("/", 1)[1]


KINDS = [Kind("/api/v1/pods", "Pod", "v1", True), Kind("/api/v1/nodes", "Node", "v1", False),
         Kind("/apis/scheduling.volcano.sh/v1beta1/queues", "Queue", "scheduling.volcano.sh/v1beta1", False),
         Kind("/apis/scheduling.volcano.sh/v1beta1/podgroups", "PodGroup", "scheduling.volcano.sh/v1beta1", True),
         Kind("/apis/apps/v1/deployments", "Deployment", "apps/v1", True),
         Kind("/apis/apps/v1/statefulsets", "StatefulSet", "apps/v1", True),
         Kind("/apis/apps/v1/replicasets", "ReplicaSet", "apps/v1", True),
         Kind("/apis/scheduling.k8s.io/v1/priorityclasses", "PriorityClass", "scheduling.k8s.io/v1", False)]
EXTRA_RESOURCES = {"v1": [("events", "Event", True), ("secrets", "Secret", True), ("configmaps", "ConfigMap", True),
                          ("namespaces", "Namespace", False)],
                   "coordination.k8s.io/v1": [("leases", "Lease", True)]}


def node_manifest(index: int) -> dict[str, Any]:
    product = PRODUCTS[index % len(PRODUCTS)]
    labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81920",
              "kubernetes.io/hostname": f"node-{index}"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"node-{index}", "uid": f"node-{index:08d}", "resourceVersion": "1000",
                         "labels": labels},
            "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"},
                       "capacity": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "lastHeartbeatTime": "2026-11-20T08:14:31Z"}]}}


def queue_manifest(index: int) -> dict[str, Any]:
    quota = {product: 8 + (index * 7 + n * 13) % 57 for n, product in enumerate(PRODUCTS)}
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": f"q{index}", "resourceVersion": "1000",
                         "annotations": {"volcano.sh/card.quota": json.dumps(quota)}},
            "spec": {"weight": 1}, "status": {"state": "Open"}}


def podgroup_manifest(index: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": f"pg-{index}", "namespace": "ml", "resourceVersion": "1000",
                         "annotations": {"volcano.sh/card.request": json.dumps({PRODUCTS[0]: 8})}},
            "spec": {"queue": f"q{index % QUEUES}", "minMember": 8},
            "status": {"phase": ("Inqueue", "Running", "Pending")[index % 3]}}


def pod_node(index: int, nodes: int) -> int | None:
    """A fifth of the pods pending, the others bound across the nodes."""
    return None if index % 5 == 0 else (index * 7) % nodes


@dataclass(eq=False)
class Watcher:
    kind: str
    lines: asyncio.Queue[bytes] = field(default_factory=asyncio.Queue)


class Cluster:
    """The objects as JSON bytes per kind (None where one was deleted), the watch log, the watches open."""

    def __init__(self, pods: int) -> None:
        self.pods = pods
        self.nodes = max(1, pods // 20)
        self.groups = max(1, pods // 8)
        self.items: dict[str, list[bytes | None]] = {kind.kind: [] for kind in KINDS}
        self.items["Node"] = [dumps(node_manifest(index)) for index in range(self.nodes)]
        self.items["Queue"] = [dumps(queue_manifest(index)) for index in range(QUEUES)]
        self.items["PodGroup"] = [dumps(podgroup_manifest(index)) for index in range(self.groups)]
        self.items["Pod"] = [dumps(realistic_pod(index, pod_node(index, self.nodes), self.groups))
                             for index in range(pods)]
        self.version = FIRST_VERSION
        self.log: collections.deque[tuple[int, str, bytes]] = collections.deque(maxlen=LOG_EVENTS)
        self.watchers: set[Watcher] = set()
        self.sent: collections.Counter[str] = collections.Counter()
        self.writes: collections.Counter[str] = collections.Counter()
        """POSTs and PATCHes answered, by verb and resource (the publisher's events and annotation patches)."""
        self.storming = False
        self.storm_task: asyncio.Task[None] | None = None
        self.forgotten = 0
        """The newest resourceVersion dropped from the log: a watch from before it is answered 410."""
        self.leases: dict[str, dict[str, Any]] = {}
        self.lease_version = 0
        self._pool: list[tuple[int, bytes, bytes]] = []
        self._steps: list[int] = []

    def json_bytes(self) -> int:
        return sum(len(item) for item in self.items["Pod"] if item is not None)

    # ------------------------------------------------------------------ lists and watches

    def page(self, kind: Kind, limit: int, offset: int) -> bytes:
        items = self.items[kind.kind]
        end = len(items) if limit <= 0 else min(len(items), offset + limit)
        chosen = [item for item in items[offset:end] if item is not None]
        metadata: dict[str, Any] = {"resourceVersion": str(self.version)}
        if end < len(items):
            metadata["continue"] = f"{self.version}:{end}"
            metadata["remainingItemCount"] = len(items) - end
        head = dumps({"apiVersion": kind.api_version, "kind": f"{kind.kind}List", "metadata": metadata})
        return head[:-1] + b',"items":[' + b",".join(chosen) + b"]}"

    def emit(self, kind: str, event_type: str, manifest: bytes) -> None:
        """One change: a new resourceVersion, into the log and to every watch of the kind."""
        self.version += 1
        line = b'{"type":"' + event_type.encode() + b'","object":' + \
            manifest.replace(RV_MARK, str(self.version).encode()) + b"}\n"
        if len(self.log) == self.log.maxlen:
            self.forgotten = self.log[0][0]
        self.log.append((self.version, kind, line))
        self.sent[kind] += 1
        for watcher in self.watchers:
            if watcher.kind == kind:
                watcher.lines.put_nowait(line)

    def bookmark(self, kind: Kind) -> bytes:
        return dumps({"type": "BOOKMARK", "object": {"apiVersion": kind.api_version, "kind": kind.kind,
                                                     "metadata": {"resourceVersion": str(self.version)}}}) + b"\n"

    # ------------------------------------------------------------------ the storm

    def prepare_storm(self) -> None:
        """Each pool pod pending (A) and bound (B), its resourceVersion a mark replaced per event."""
        if self._pool:
            return
        step = max(1, self.pods // STORM_POOL)
        for index in range(0, self.pods, step)[:STORM_POOL]:
            node = pod_node(index, self.nodes)
            bound_node = node if node is not None else (index * 11) % self.nodes
            pending, bound = (realistic_pod(index, None, self.groups),
                              realistic_pod(index, bound_node, self.groups))
            for manifest in (pending, bound):
                manifest["metadata"]["resourceVersion"] = RV_MARK.decode()
            bound["status"]["containerStatuses"][0]["restartCount"] = 1
            self._pool.append((index, dumps(pending), dumps(bound)))
            self._steps.append(0)

    def storm_event(self, slot: int) -> None:
        """The next change of pool pod ``slot``: a bound pod gets two status updates, is deleted, comes back
        pending and is bound again; a pending one is bound first."""
        index, pending, bound = self._pool[slot]
        cycle = (("MODIFIED", bound), ("MODIFIED", bound), ("DELETED", bound), ("ADDED", pending))
        step = self._steps[slot]
        self._steps[slot] = step + 1
        event_type, manifest = cycle[step % len(cycle)]
        self.emit("Pod", event_type, manifest)
        self.items["Pod"][index] = None if event_type == "DELETED" else \
            manifest.replace(RV_MARK, str(self.version).encode())

    async def storm(self, rate: float, seconds: float, node_rate: float) -> None:
        self.prepare_storm()
        self.storming = True
        node_templates = []
        for index in range(min(self.nodes, 500)):
            manifest = node_manifest(index)
            manifest["metadata"]["resourceVersion"] = RV_MARK.decode()
            node_templates.append(dumps(manifest))
        started = time.perf_counter()
        pods = nodes = 0
        try:
            while (elapsed := time.perf_counter() - started) < seconds:
                while pods < rate * elapsed:
                    self.storm_event(pods % len(self._pool))
                    pods += 1
                while nodes < node_rate * elapsed:
                    self.emit("Node", "MODIFIED", node_templates[nodes % len(node_templates)])
                    nodes += 1
                await asyncio.sleep(0.01)
        finally:
            self.storming = False


def kind_for(path: str) -> Kind | None:
    for kind in KINDS:
        if path == kind.path:
            return kind
    return None


def status(code: int, message: str) -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                              "reason": {404: "NotFound", 410: "Expired"}.get(code, ""), "code": code}, status=code)


def discovery() -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for kind in KINDS:
        groups[kind.api_version].append({"name": kind.plural, "singularName": kind.kind.lower(),
                                         "namespaced": kind.namespaced, "kind": kind.kind, "verbs": VERBS})
    for api_version, resources in EXTRA_RESOURCES.items():
        groups[api_version] += [{"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
                                 "verbs": VERBS} for plural, kind, namespaced in resources]
    return groups


def app(cluster: Cluster) -> web.Application:
    resources = discovery()
    named = sorted(api_version for api_version in resources if "/" in api_version)

    async def watch(request: web.Request, kind: Kind) -> web.StreamResponse:
        since = request.query.get("resourceVersion", "")
        timeout = float(request.query.get("timeoutSeconds") or 0) or None
        watcher = Watcher(kind.kind)
        if since.isdigit() and int(since) < cluster.version:
            if int(since) < cluster.forgotten:
                return await stream_once(request, dumps({"type": "ERROR", "object": {
                    "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410,
                    "message": f"too old resource version: {since} ({cluster.forgotten})"}}) + b"\n")
            for version, event_kind, line in cluster.log:
                if version > int(since) and event_kind == kind.kind:
                    watcher.lines.put_nowait(line)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        cluster.watchers.add(watcher)
        deadline = None if timeout is None else time.monotonic() + timeout
        next_bookmark = time.monotonic() + BOOKMARK_SECONDS
        try:
            while deadline is None or time.monotonic() < deadline:
                wait = next_bookmark - time.monotonic()
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                try:
                    first = await asyncio.wait_for(watcher.lines.get(), max(0.0, wait))
                except TimeoutError:
                    if time.monotonic() >= next_bookmark:
                        await response.write(cluster.bookmark(kind))
                        next_bookmark = time.monotonic() + BOOKMARK_SECONDS
                    continue
                batch = [first]
                while not watcher.lines.empty() and len(batch) < 256:
                    batch.append(watcher.lines.get_nowait())
                await response.write(b"".join(batch))
        except ConnectionResetError:
            pass
        finally:
            cluster.watchers.discard(watcher)
        return response

    async def stream_once(request: web.Request, body: bytes) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(body)
        await response.write_eof()
        return response

    async def lease(request: web.Request) -> web.Response:
        name = request.path.rsplit("/", 1)[1]
        if request.method == "POST":
            body = await request.json()
            name = body["metadata"]["name"]
        elif name not in cluster.leases:
            return status(404, f"leases {name} not found")
        else:
            body = cluster.leases[name]
            if request.method == "PATCH":
                patch = await request.json()
                body = {**body, "spec": {**body.get("spec", {}), **patch.get("spec", {})}}
        cluster.lease_version += 1
        body = {**body, "metadata": {**body.get("metadata", {}), "resourceVersion": str(cluster.lease_version)}}
        cluster.leases[name] = body
        return web.json_response(body, status=201 if request.method == "POST" else 200)

    async def handle(request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/")
        if path.startswith("/apis/coordination.k8s.io/v1/namespaces/") and "/leases" in path:
            return await lease(request)
        if request.method in ("POST", "PUT"):
            cluster.writes[f"{request.method} {path.rsplit('/', 1)[-1]}"] += 1
            return web.json_response(await request.json(), status=201)
        if request.method == "PATCH":
            cluster.writes[f"PATCH {path.rsplit('/', 2)[-2]}"] += 1
            return web.json_response({"metadata": {"resourceVersion": str(cluster.version)}})
        kind = kind_for(path)
        if kind is not None:
            if request.query.get("watch") in ("true", "1"):
                return await watch(request, kind)
            token = request.query.get("continue", "")
            offset = int(token.split(":")[1]) if token else 0
            return web.Response(body=cluster.page(kind, int(request.query.get("limit") or 0), offset),
                                content_type="application/json")
        if path == "/api":
            return web.json_response({"kind": "APIVersions", "versions": ["v1"]})
        if path == "/apis":
            return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": api_version.split("/")[0],
                 "versions": [{"groupVersion": api_version, "version": api_version.split("/")[1]}],
                 "preferredVersion": {"groupVersion": api_version, "version": api_version.split("/")[1]}}
                for api_version in named]})
        if path == "/version":
            return web.json_response({"major": "1", "minor": "31", "gitVersion": "v1.31.0-bench"})
        group_version = path.removeprefix("/apis/").removeprefix("/api/")
        if group_version in resources:
            return web.json_response({"kind": "APIResourceList", "groupVersion": group_version,
                                      "resources": resources[group_version]})
        return status(404, f"{path} not found")

    async def storm(request: web.Request) -> web.Response:
        if cluster.storming:
            return status(409, "a storm is under way")
        cluster.storm_task = asyncio.create_task(cluster.storm(
            float(request.query.get("rate", "2000")), float(request.query.get("seconds", "20")),
            float(request.query.get("node_rate", "20"))))
        return web.json_response({"started": True})

    async def stats(_: web.Request) -> web.Response:
        return web.json_response({"sent": dict(cluster.sent), "writes": dict(cluster.writes),
                                  "storming": cluster.storming,
                                  "version": cluster.version,
                                  "watches": collections.Counter(watcher.kind for watcher in cluster.watchers)})

    application = web.Application(client_max_size=2**26)
    application.router.add_post("/_bench/storm", storm)
    application.router.add_get("/_bench/stats", stats)
    application.router.add_route("*", "/{tail:.*}", handle)
    return application


async def serve(pods: int, port: int) -> None:
    cluster = Cluster(pods)
    cluster.prepare_storm()
    runner = web.AppRunner(app(cluster), access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    print(f"ready {runner.addresses[0][1]} {cluster.json_bytes()}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--port", type=int, default=0)
    options = parser.parse_args()
    asyncio.run(serve(options.pods, options.port))


if __name__ == "__main__":
    main()
