"""The operator at scale: start-up at 10k / 50k / 100k realistic pods, and admission latency during a pod event
storm, each against a baseline measured in the same run.

    python bench/scale.py [--pods 10000,50000,100000] [--runs 2] [--rate 40] [--storm-rate 2000] [--smoke]
                          [--pause-collector] [--page-size 100]

Three kinds of process, so that each one's CPU and memory are its own:

* the API server stand-in (``bench/apiserver.py``): a synthetic cluster of ``--pods`` pods from
  ``synthetic.realistic_pod`` (6.4 to 8.4 KB of JSON each), nodes = pods/20, 20 queues, a PodGroup per 8 pods,
  served as JSON bytes with paginated lists, watches with bookmarks and an event storm on request;
* the subject: the real operator, ``cardquota.processes.run`` (the admission server, leader election, publisher,
  CRD drift check, and ``operator/watch.follow``: the start-up list, the paginated pod reflector, then Kopf's
  watches) with dev certificates, given the stand-in's address as a ``Connection`` (see :func:`operate` for why not
  a kubeconfig), in a process of its own (``--role operator``) that reports its CPU time, RSS, event-loop lag (a
  coroutine sleeping 10 ms and measuring its oversleep), the collector's passes and where the loop stalls when
  asked;
* the baseline, in a fresh process with the same imports (``--role baseline``, the stand-in named by a kubeconfig in
  $KUBECONFIG): our own plain paginated list of the same objects from the same stand-in (``kube.list_all`` and
  ``kube.list_pages``) and ``ClusterCache.load`` of each page, then ``mark_complete``; the collector on in both, as
  in production (``--pause-collector`` and ``--page-size`` are experiments that change both alike).

The driver (this process) fires Pod AdmissionReviews over HTTPS at the operator's webhook at ``--rate`` a second
(open loop, the same 64 bodies as ``bench/webhook.py``) from the moment it listens until it has settled after start-up
(its CPU idle, at least ``--settle`` seconds after the cache synced), then again with nothing else happening (idle),
then during a storm of ``--storm-rate`` pod watch events a second (status updates, binds, deletions, re-additions)
plus ``--storm-node-rate`` node heartbeats, for ``--storm-seconds``. Printed per run and as ranges per size:

* start-up CPU: the operator process's CPU time (every thread) from ``run()`` until the cache reports synced, against
  the baseline's list + load (target: at most 2x); also before listening (dev certificates, the server) and until
  settled (Kopf's own lists of the low-cardinality kinds, the publisher's first reconcile);
* memory: peak RSS (VmHWM) of the operator until settled, its steady RSS after a collection once settled, their
  ratio (target <= 2x), and steady RSS against the baseline process's after its load (the ledger and the same imports:
  target <= 1.2x);
* admission p99 during the start-up burst (listening until synced) against idle (target <= 1.5x), and after synced
  until settled; worst event-loop lag during start-up (target <= 50 ms);
* the storm: admission p99 against idle (target <= 1.5x), worst lag, the operator's CPU, and how long after the storm
  the cache had applied every event.

Before the cache has synced the webhook answers a Pod review without running the policy (``Admission.review``:
"still loading", fail-open), so the start-up figure is the event loop's availability, not the policy's cost.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import json
import os
import shutil
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import percentile

BENCH = Path(__file__).resolve().parent
SIZES = (10_000, 50_000, 100_000)
EXTRA: list[str] = []
PINNED: dict[str, set[int]] = {}
"""With ``--pin``: the CPUs of the admission side ("admissions": this driver, which times the requests, and the
webhook process) and of the rest ("rest": the stand-in, the controller, the baseline)."""
LAST_LOG = Path(tempfile.gettempdir()) / "cardquota-scale-operator.log"


def pinned(side: str, command: Sequence[str]) -> list[str]:
    """``command``, started on the CPUs of ``side`` with --pin: through ``taskset``, a small program, so that nothing
    of the child runs on the driver's CPU first (a ``preexec_fn`` would run Python in the forked child there)."""
    cpus = PINNED.get(side)
    if cpus is None:
        return list(command)
    return ["taskset", "--cpu-list", ",".join(map(str, sorted(cpus))), *command]


# ------------------------------------------------------------------------------------------ in the measured processes

def proc_status(field_name: str) -> float:
    """A VmRSS/VmHWM-like field of this process's /proc status, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def emit(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


REPOSITORY = str(Path(__file__).resolve().parents[1])


def site(frame: Any) -> str:
    """Where a stalled event loop thread is: its innermost frame, and the innermost one in cardquota's code (the
    repository's, bench/ excluded) or Kopf's."""
    inner = f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}:{frame.f_lineno}"
    while frame is not None:
        name = frame.f_code.co_filename
        if (name.startswith(REPOSITORY) and "/bench/" not in name) or "/kopf/" in name:
            ours = f"{name.removeprefix(REPOSITORY + '/')}:{frame.f_code.co_name}:{frame.f_lineno}"
            return inner if ours.endswith(inner) else f"{inner} in {ours}"
        frame = frame.f_back
    return inner


class StallSampler:
    """A thread that, while the event loop has not woken the lag monitor for 30 ms, samples the loop thread's stack
    every 5 ms (it gets the GIL between the loop's bytecodes, not inside one long C call): where the loop stalls."""

    def __init__(self) -> None:
        self.beat = time.perf_counter()
        self.thread = threading.get_ident()
        self.sites: collections.Counter[str] = collections.Counter()
        threading.Thread(target=self.run, name="stall-sampler", daemon=True).start()

    def run(self) -> None:
        while True:
            time.sleep(0.005)
            if time.perf_counter() - self.beat > 0.03:
                frame = sys._current_frames().get(self.thread)
                if frame is not None:
                    self.sites[site(frame)] += 1

    def take(self) -> list[tuple[str, int]]:
        sites, self.sites = self.sites, collections.Counter()
        return sites.most_common(3)


@dataclass
class LagMonitor:
    """A coroutine sleeping 10 ms at a time; each oversleep is a sample of what an admission would wait. Also the
    cyclic collector's passes (``gc.callbacks``), which stop every thread: the longest, its generation, the total."""

    samples: list[float] = field(default_factory=list)
    collections: list[tuple[float, int]] = field(default_factory=list)
    _collecting: float = 0.0
    sampler: StallSampler = field(default_factory=StallSampler)

    def __post_init__(self) -> None:
        gc.callbacks.append(self._collection)

    def _collection(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._collecting = time.perf_counter()
        else:
            self.collections.append((time.perf_counter() - self._collecting, info["generation"]))

    async def run(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(0.01)
            self.sampler.beat = now = time.perf_counter()
            self.samples.append(now - started - 0.01)

    def take(self) -> dict[str, Any]:
        samples, self.samples = self.samples, []
        collections, self.collections = self.collections, []
        longest = max(collections, default=(0.0, 0))
        return {"lag_max": max(samples, default=0.0), "lag_p99": percentile(samples, 0.99) if samples else 0.0,
                "gc_max": longest[0], "gc_generation": longest[1],
                "gc_total": sum(seconds for seconds, _ in collections),
                "stalls": self.sampler.take()}


def set_page_size(size: int) -> None:
    """The experiment of ``--page-size``: kube.list_pages' default ``limit`` (LIST_PAGE_SIZE) changed in place, for
    every caller (the pod reflector, the baseline)."""
    if size:
        from cardquota import kube

        kube.list_pages.__kwdefaults__ = {"limit": size}


def pod_events() -> float:
    from cardquota.runtime.metrics import REGISTRY

    return REGISTRY.get_sample_value("cardquota_watch_events_total", {"kind": "Pod"}) or 0.0


async def operate(cert_dir: str, api_url: str, pause_collector: bool, role: str) -> None:
    """The operator as ``cardquota operator --dev --role ROLE`` runs it, reporting on stdout; given the API server's
    address as a ``Connection``, as tests/operator_runs.py does."""
    from cardquota.kube import Connection
    from cardquota.operator.settings import Role, Settings
    from cardquota.processes import run

    loop = asyncio.get_running_loop()
    commands: asyncio.Queue[str] = asyncio.Queue()

    def read_commands() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(commands.put_nowait, line.strip())
        loop.call_soon_threadsafe(commands.put_nowait, "stop")

    threading.Thread(target=read_commands, daemon=True).start()
    lag = LagMonitor()
    lag_task = asyncio.create_task(lag.run())
    stop, started = asyncio.Event(), asyncio.Event()
    cpu0, wall0 = time.process_time(), time.perf_counter()

    def state(event: str) -> dict[str, Any]:
        return {"event": event, "cpu": time.process_time() - cpu0, "wall": time.perf_counter() - wall0,
                "rss": proc_status("VmRSS"), "hwm": proc_status("VmHWM"), "pod_events": pod_events()}

    def listening(port: int) -> None:  # the lag so far (dev certificates made on the loop) delays no admission
        emit({**state("listening"), "port": port, **lag.take()})

    settings = Settings(host="127.0.0.1", port=0, metrics_port=0, dev=True, cert_dir=cert_dir, role=Role(role))
    if pause_collector:  # the experiment: no collection until the cache is synced (mark_complete collects, freezes)
        gc.disable()
    connection = Connection(host=api_url, token="bench")
    task = asyncio.create_task(run(settings, connection=connection, stop=stop, started=started,
                                   on_listening=listening))
    waiting = asyncio.create_task(started.wait())
    await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    if not started.is_set():
        task.result()
    gc.enable()
    emit({**state("synced"), **lag.take()})
    while (command := await commands.get()) != "stop":
        if task.done():
            emit({**state("failed"), "error": repr(task.exception())})
            break
        if command == "gc":
            gc.collect()
        emit({**state(command), **lag.take()})
    stop.set()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(task, 60)
    lag_task.cancel()


def operator_role(cert_dir: str, api_url: str, pause_collector: bool, page_size: int, role: str) -> None:
    from cardquota.operator.settings import LogFormat
    from cardquota.processes import configure_logging

    configure_logging(LogFormat.TEXT)
    set_page_size(page_size)
    asyncio.run(operate(cert_dir, api_url, pause_collector, role))


def baseline_role(pause_collector: bool, page_size: int) -> None:
    """Our own paginated list of the same objects and ``ClusterCache.load``, in a process with the same imports."""
    import cardquota.processes  # noqa: F401  (the operator's imports, so the RSS compares like with like)
    from cardquota.kube import CACHED_RESOURCES, api_client, list_all, list_pages
    from cardquota.runtime.cache import ClusterCache

    set_page_size(page_size)
    gc.collect()
    before = proc_status("VmRSS")
    collections_seconds: list[float] = []
    collecting = [0.0]

    def collection(phase: str, _: dict[str, int]) -> None:
        if phase == "start":
            collecting[0] = time.perf_counter()
        else:
            collections_seconds.append(time.perf_counter() - collecting[0])

    gc.callbacks.append(collection)
    if pause_collector:
        gc.disable()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    api = api_client()
    cache = ClusterCache()
    cache.load(list_all(api, [resource for resource in CACHED_RESOURCES if resource[2] != "Pod"]), complete=False)
    for page in list_pages(api, "/api/v1/pods", "v1", "Pod"):
        cache.load(page.items, complete=False)
    cache.mark_complete()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    gc.enable()
    gc.callbacks.remove(collection)
    gc.collect()
    emit({"event": "loaded", "cpu": cpu, "wall": wall, "gc_total": sum(collections_seconds),
          "rss_before": before, "rss": proc_status("VmRSS"),
          "hwm": proc_status("VmHWM"), "pods": len(cache.ledger.snapshot.pods)})


# ------------------------------------------------------------------------------------------ the driver

@dataclass(frozen=True)
class Options:
    runs: int
    rate: float
    idle_seconds: float
    settle_seconds: float
    storm_rate: float
    storm_node_rate: float
    storm_seconds: float
    smoke: bool
    split: bool = False


@dataclass
class Sample:
    sent: float
    seconds: float
    ok: bool


def p99(samples: Sequence[Sample]) -> float:
    return percentile([sample.seconds for sample in samples], 0.99) if samples else float("nan")


class Load:
    """Pod AdmissionReviews at a steady rate (open loop: one is sent on time whatever the previous ones wait)."""

    def __init__(self, port: int, ca_file: Path, rate: float) -> None:
        from webhook import pod_review

        self.url = f"https://127.0.0.1:{port}"
        self.context = ssl.create_default_context(cafile=str(ca_file))
        self.rate = rate
        self.bodies = [pod_review(index) for index in range(64)]

    async def fire(self, until: asyncio.Event | float) -> list[Sample]:
        """Until the event is set, or for that many seconds; a fresh connection pool each time, opened by one request
        before the window (a handshake is not an admission's cost: the API server reuses its connections)."""
        samples: list[Sample] = []
        connector = aiohttp.TCPConnector(ssl=self.context, limit=32)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
            async def one(index: int) -> None:
                path = "/mutate" if index % 2 else "/validate"
                sent = time.perf_counter()
                ok = False
                try:
                    async with session.post(self.url + path, data=self.bodies[index % len(self.bodies)],
                                            headers={"Content-Type": "application/json"}) as response:
                        await response.read()
                        ok = response.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    pass
                samples.append(Sample(sent, time.perf_counter() - sent, ok))

            await one(0)  # the connection's TLS handshake, before the window (the API server keeps its connections)
            samples.clear()
            tasks = []
            start = time.perf_counter()
            index = 0
            while not (until.is_set() if isinstance(until, asyncio.Event)
                       else time.perf_counter() - start >= until):
                await asyncio.sleep(max(0.0, start + index / self.rate - time.perf_counter()))
                tasks.append(asyncio.create_task(one(index)))
                index += 1
            await asyncio.gather(*tasks)
        return samples


class Operator:
    """The operator subprocess: its reports (JSON lines on its stdout) and commands (lines on its stdin)."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        self.process = process
        self.log = log

    @classmethod
    async def start(cls, env: dict[str, str], folder: Path, api_url: str, role: str = "all") -> Operator:
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / "operator.log"
        with log.open("wb") as stderr:
            process = await asyncio.create_subprocess_exec(
                *pinned("admissions" if role == "webhook" else "rest", [
                    sys.executable, str(Path(__file__).resolve()), "--role", "operator", "--cert-dir", str(folder),
                    "--api-url", api_url, "--operator-role", role, *EXTRA]),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr, env=env)
        return cls(process, log)

    async def next(self, timeout: float = 3600) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        if not line:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the operator process ended (exit {await self.process.wait()}):\n{tail}")
        message: dict[str, Any] = json.loads(line)
        if message["event"] == "failed":
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the operator stopped: {message['error']}\n{tail}")
        return message

    async def ask(self, command: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(command.encode() + b"\n")
        await self.process.stdin.drain()
        return await self.next(120)

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            assert self.process.stdin is not None
            self.process.stdin.write(b"stop\n")
            await self.process.stdin.drain()
            await asyncio.wait_for(self.process.wait(), 60)
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


async def baseline(env: dict[str, str]) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        *pinned("rest", [sys.executable, str(Path(__file__).resolve()), "--role", "baseline", *EXTRA]),
        stdout=asyncio.subprocess.PIPE, env=env)
    output, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"the baseline process failed (exit {process.returncode})")
    result: dict[str, Any] = json.loads(output.splitlines()[-1])
    return result


async def stand_in(path: str, query: str = "", *, port: int, method: str = "GET") -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, \
            session.request(method, f"http://127.0.0.1:{port}{path}{query}") as response:
        result: dict[str, Any] = await response.json()
        return result


@dataclass
class RunResult:
    figures: dict[str, float]
    notes: list[str] = field(default_factory=list)


async def settle(operator: Operator, synced: dict[str, Any], minimum: float) -> dict[str, Any]:
    """Until the operator's CPU stays under 5% of a core for two seconds, at least ``minimum`` s after synced (at
    most 15 minutes); the last report, with the worst event-loop lag meanwhile."""
    last = synced
    quiet = 0
    worst = 0.0
    stalls: collections.Counter[str] = collections.Counter()
    deadline = time.perf_counter() + 900
    while time.perf_counter() < deadline:
        await asyncio.sleep(1.0)
        report = await operator.ask("report")
        worst = max(worst, report["lag_max"])
        stalls.update(dict(report["stalls"]))
        busy = (report["cpu"] - last["cpu"]) / max(1e-9, report["wall"] - last["wall"])
        quiet = quiet + 1 if busy < 0.05 else 0
        last = report
        if quiet >= 2 and report["wall"] - synced["wall"] >= minimum:
            break
    return {**last, "lag_max": worst, "stalls": stalls.most_common(3)}


async def one_run(env: dict[str, str], port: int, options: Options) -> RunResult:
    """With ``options.split``, the admissions go to a ``--role webhook`` process started (and synced) first, and
    the start-up, memory and lag figures are the ``--role controller`` process's; else both are one ``--role all``
    process's."""
    base = await baseline(env)
    with tempfile.TemporaryDirectory(prefix="cardquota-scale-") as directory:
        folder = Path(directory)
        api_url = f"http://127.0.0.1:{port}"
        webhook: Operator | None = None
        webhook_before_idle = webhook_idle = webhook_storm = None
        if options.split:
            webhook = await Operator.start(env, folder / "webhook", api_url, "webhook")
            listening = await webhook.next(600)
            webhook_synced = await webhook.next()
            await webhook.ask("gc")
            load = Load(listening["port"], folder / "webhook" / "ca.crt", options.rate)
        started_at = time.perf_counter()
        operator = await Operator.start(env, folder, api_url, "controller" if options.split else "all")
        try:
            if webhook is None:
                listening = await operator.next(600)
                load = Load(listening["port"], folder / "ca.crt", options.rate)
            settled_event = asyncio.Event()
            burst = asyncio.create_task(load.fire(settled_event))
            synced = await operator.next()
            synced_at = time.perf_counter()
            lags = await operator.ask("mark")  # lag from synced until now: folded into the settle figure below
            settled = await settle(operator, synced, options.settle_seconds)
            settled_event.set()
            samples = await burst
            steady = await operator.ask("gc")
            await operator.ask("mark")
            webhook_before_idle = await webhook.ask("mark") if webhook is not None else None
            idle = await load.fire(options.idle_seconds)
            idle_report = await operator.ask("mark")
            webhook_idle = await webhook.ask("mark") if webhook is not None else None
            before = await stand_in("/_bench/stats", port=port)
            sent_before = before["sent"].get("Pod", 0)
            applied_before = idle_report["pod_events"]
            await stand_in("/_bench/storm", f"?rate={options.storm_rate}&seconds={options.storm_seconds}"
                           f"&node_rate={options.storm_node_rate}", port=port, method="POST")
            storm = await load.fire(options.storm_seconds)
            storm_report = await operator.ask("mark")
            webhook_storm = await webhook.ask("mark") if webhook is not None else None
            stats = await stand_in("/_bench/stats", port=port)
            while stats["storming"]:
                await asyncio.sleep(0.2)
                stats = await stand_in("/_bench/stats", port=port)
            sent = stats["sent"].get("Pod", 0) - sent_before
            writes = collections.Counter(stats["writes"])
            writes.subtract(before["writes"])
            caught_up = time.perf_counter()
            applied = storm_report["pod_events"] - applied_before
            while applied < sent and time.perf_counter() - caught_up < 120:
                await asyncio.sleep(0.1)
                applied = (await operator.ask("report"))["pod_events"] - applied_before
            catch_up = time.perf_counter() - caught_up
        finally:
            await operator.stop()
            LAST_LOG.write_bytes(operator.log.read_bytes())
            if webhook is not None:
                await webhook.stop()
    startup = [sample for sample in samples if sample.sent < synced_at]
    after = [sample for sample in samples if sample.sent >= synced_at]
    failed = sum(not sample.ok for sample in (*samples, *idle, *storm))
    figures = {
        "cpu": synced["cpu"], "cpu_listening": listening["cpu"], "cpu_settled": settled["cpu"],
        "wall": synced["wall"], "settled_wall": settled["wall"],
        "base_cpu": base["cpu"], "base_gc": base["gc_total"],
        "base_wall": base["wall"], "base_rss": base["rss"], "base_hwm": base["hwm"],
        "base_kept": base["rss"] - base["rss_before"], "base_pods": base["pods"],
        "hwm_synced": synced["hwm"], "hwm": steady["hwm"], "steady": steady["rss"],
        "p99_startup": p99(startup), "n_startup": len(startup), "p99_after": p99(after), "n_after": len(after),
        "p99_idle": p99(idle), "n_idle": len(idle), "p99_storm": p99(storm), "n_storm": len(storm),
        "p50_idle": percentile([s.seconds for s in idle], 0.5),
        "p50_storm": percentile([s.seconds for s in storm], 0.5),
        "lag_startup": synced["lag_max"], "lag_listening": listening["lag_max"],
        "gc_startup": synced["gc_max"], "gc_generation": synced["gc_generation"], "gc_total": synced["gc_total"],
        "gc_storm": storm_report["gc_max"], "gc_storm_total": storm_report["gc_total"],
        "lag_after": max(lags["lag_max"], settled["lag_max"]),
        "lag_idle": idle_report["lag_max"], "lag_storm": storm_report["lag_max"],
        "storm_cpu": storm_report["cpu"] - idle_report["cpu"], "storm_sent": sent, "storm_applied": applied,
        "catch_up": catch_up, "failed": failed}
    if webhook_before_idle is not None and webhook_idle is not None and webhook_storm is not None:
        figures |= {"webhook_cpu_synced": webhook_synced["cpu"], "webhook_wall_synced": webhook_synced["wall"],
                    "webhook_rss": webhook_storm["rss"], "webhook_hwm": webhook_storm["hwm"],
                    "webhook_lag_idle": webhook_idle["lag_max"], "webhook_lag_storm": webhook_storm["lag_max"],
                    "webhook_storm_cpu": webhook_storm["cpu"] - webhook_idle["cpu"],
                    "webhook_idle_cpu": webhook_idle["cpu"] - webhook_before_idle["cpu"],
                    "webhook_pod_events": webhook_storm["pod_events"]}
    def sites(stalls: list[tuple[str, int]]) -> str:
        return "; ".join(f"{where} ({count * 5} ms)" for where, count in stalls) or "none"

    slowest = sorted(startup, key=lambda sample: -sample.seconds)[:3]
    notes = ["    slowest admissions until synced: " + ", ".join(
                 f"{ms(sample.seconds)} sent {sample.sent - started_at:.2f} s after start" for sample in slowest)
             + f" (synced {synced_at - started_at:.2f} s after)",
             f"    where the loop stalled (sampled every 5 ms while 30 ms late): until synced: "
             f"{sites(synced['stalls'])}",
             f"      synced until settled: {sites(settled['stalls'])}",
             f"      storm: {sites(storm_report['stalls'])}",
             "    API writes during the storm: " + (", ".join(f"{count} {what}" for what, count in
                                                          sorted(writes.items()) if count) or "none")]
    return RunResult(figures, notes)


def product_version() -> str:
    """The commit measured, and whether the product's files differ from it (others may be editing them)."""
    import subprocess

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=BENCH.parent, capture_output=True,
                                text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "cardquota", "operator", "webhooks"],
                                 cwd=BENCH.parent).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + (" with uncommitted changes" if changed else "")


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def describe(number: int, f: dict[str, float], options: Options) -> list[str]:
    return [
        f"  run {number}: synced in {f['wall']:.1f} s, settled {f['settled_wall']:.1f} s; {f['failed']:.0f} "
        "admission requests failed",
        f"    start-up CPU {f['cpu']:.2f} s (of which {f['cpu_listening']:.2f} s before listening; "
        f"{f['cpu_settled']:.2f} s until settled) vs list+load {f['base_cpu']:.2f} s ({f['base_wall']:.2f} s wall, "
        f"{f['base_gc']:.2f} s of it in the collector): "
        f"{f['cpu'] / f['base_cpu']:.2f}x (target <= 2), from listening "
        f"{(f['cpu'] - f['cpu_listening']) / f['base_cpu']:.2f}x",
        f"    memory: peak RSS {f['hwm']:.0f} MiB ({f['hwm_synced']:.0f} at synced), steady {f['steady']:.0f} MiB: "
        f"peak/steady {f['hwm'] / f['steady']:.2f}x (target <= 2); list+load process steady {f['base_rss']:.0f} MiB "
        f"(peak {f['base_hwm']:.0f}; its RSS grew {f['base_kept'] * 2**20 / max(1, f['base_pods']):.0f} B a pod): "
        f"steady {f['steady'] / f['base_rss']:.2f}x (target <= 1.2)",
        f"    admission p99 at {options.rate:g}/s: start-up burst {ms(f['p99_startup'])} (n={f['n_startup']:.0f}) vs "
        f"idle {ms(f['p99_idle'])} (n={f['n_idle']:.0f}): {f['p99_startup'] / f['p99_idle']:.2f}x (target <= 1.5); "
        f"synced until settled {ms(f['p99_after'])} (n={f['n_after']:.0f})",
        f"    event-loop lag: worst {ms(f['lag_startup'])} listening until synced (target <= 50 ms), "
        f"{ms(f['lag_after'])} synced until settled, {ms(f['lag_idle'])} idle ({ms(f['lag_listening'])} before "
        f"listening); longest collection until synced {ms(f['gc_startup'])} (generation {f['gc_generation']:.0f}; "
        f"{ms(f['gc_total'])} in all)",
        f"    storm: {f['storm_sent']:.0f} pod events in {options.storm_seconds:g} s (+ node heartbeats at "
        f"{options.storm_node_rate:g}/s): admission p99 {ms(f['p99_storm'])} vs idle {ms(f['p99_idle'])}: "
        f"{f['p99_storm'] / f['p99_idle']:.2f}x (target <= 1.5), p50 {ms(f['p50_storm'])} vs {ms(f['p50_idle'])}; "
        f"worst lag {ms(f['lag_storm'])} (longest collection {ms(f['gc_storm'])}, {ms(f['gc_storm_total'])} in all); "
        f"operator CPU {f['storm_cpu']:.2f} s; all applied "
        f"{f['catch_up']:.1f} s after the storm ({f['storm_applied']:.0f} of {f['storm_sent']:.0f})",
        *([f"    webhook process (--role webhook): synced in {f['webhook_wall_synced']:.1f} s with "
           f"{f['webhook_cpu_synced']:.2f} s CPU, RSS {f['webhook_rss']:.0f} MiB (peak {f['webhook_hwm']:.0f}); "
           f"{f['webhook_pod_events']:.0f} pod events applied; CPU {f['webhook_storm_cpu']:.2f} s in the storm vs "
           f"{f['webhook_idle_cpu']:.2f} s idle (the same admissions); worst lag {ms(f['webhook_lag_storm'])} in the "
           f"storm, {ms(f['webhook_lag_idle'])} idle"] if "webhook_rss" in f else [])]


def span(values: Sequence[float], scale: float = 1.0, digits: int = 2) -> str:
    low, high = min(values) * scale, max(values) * scale
    return f"{low:.{digits}f}" if f"{low:.{digits}f}" == f"{high:.{digits}f}" else \
        f"{low:.{digits}f}-{high:.{digits}f}"


def summary(pods: int, results: list[RunResult]) -> list[str]:
    runs = [result.figures for result in results]

    def ratio(top: str, bottom: str) -> str:
        return span([run[top] / run[bottom] for run in runs])

    def values(key: str, scale: float = 1.0, digits: int = 2) -> str:
        return span([run[key] for run in runs], scale, digits)

    return [
        f"summary {pods} pods over {len(runs)} runs (min-max):",
        f"  start-up CPU / list+load      {ratio('cpu', 'base_cpu')}x (target <= 2): {values('cpu')} s vs "
        f"{values('base_cpu')} s",
        f"  peak RSS / steady             {ratio('hwm', 'steady')}x (target <= 2): {values('hwm', digits=0)} vs "
        f"{values('steady', digits=0)} MiB",
        f"  steady RSS / list+load's      {ratio('steady', 'base_rss')}x (target <= 1.2): list+load "
        f"{values('base_rss', digits=0)} MiB",
        f"  admission p99 burst / idle    {ratio('p99_startup', 'p99_idle')}x (target <= 1.5): "
        f"{values('p99_startup', 1e3, 1)} vs {values('p99_idle', 1e3, 1)} ms",
        f"  worst loop lag until synced   {values('lag_startup', 1e3, 1)} ms (target <= 50)",
        f"  storm admission p99 / idle    {ratio('p99_storm', 'p99_idle')}x (target <= 1.5): "
        f"{values('p99_storm', 1e3, 1)} ms; worst lag {values('lag_storm', 1e3, 1)} ms"]


async def measure(pods: int, options: Options) -> None:
    process = await asyncio.create_subprocess_exec(
        *pinned("rest", [sys.executable, str(BENCH / "apiserver.py"), "--pods", str(pods)]),
        stdout=asyncio.subprocess.PIPE)
    try:
        assert process.stdout is not None
        ready = (await asyncio.wait_for(process.stdout.readline(), 1800)).split()
        if not ready or ready[0] != b"ready":
            raise RuntimeError("the API server stand-in did not start")
        port, size = int(ready[1]), int(ready[2])
        with tempfile.TemporaryDirectory(prefix="cardquota-kubeconfig-") as directory:
            kubeconfig = Path(directory) / "kubeconfig"
            kubeconfig.write_text(json.dumps({  # (JSON is YAML)
                "apiVersion": "v1", "kind": "Config", "current-context": "bench",
                "clusters": [{"name": "bench", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
                "users": [{"name": "bench", "user": {"token": "bench"}}]}))
            env = {key: value for key, value in os.environ.items() if not key.startswith("KUBERNETES_")}
            env["KUBECONFIG"] = str(kubeconfig)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH.parent), env.get("PYTHONPATH", "")]))
            subjects = "webhook, controller" if options.split else "operator"
            print(f"scale: {pods} pods ({size / 2**20:.0f} MiB of JSON), {max(1, pods // 20)} nodes, "
                  f"{max(1, pods // 8)} podgroups; API server stand-in, {subjects} and baseline each in a process "
                  f"of its own; product at {product_version()}", flush=True)
            results = []
            for number in range(1, options.runs + 1):
                result = await one_run(env, port, options)
                results.append(result)
                print("\n".join(describe(number, result.figures, options)), flush=True)
                print("\n".join(result.notes), flush=True)
            print("\n".join(summary(pods, results)), flush=True)
    finally:
        process.terminate()
        await process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", choices=("driver", "operator", "baseline"), default="driver",
                        help=argparse.SUPPRESS)
    parser.add_argument("--cert-dir", help=argparse.SUPPRESS)
    parser.add_argument("--api-url", help=argparse.SUPPRESS)
    parser.add_argument("--pods", default=",".join(str(size) for size in SIZES),
                        help="comma-separated cluster sizes (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--rate", type=float, default=40.0, help="admission requests a second")
    parser.add_argument("--idle-seconds", type=float, default=15.0)
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after synced before steady state")
    parser.add_argument("--storm-rate", type=float, default=2000.0, help="pod events a second")
    parser.add_argument("--storm-node-rate", type=float, default=20.0, help="node heartbeats a second")
    parser.add_argument("--storm-seconds", type=float, default=15.0)
    parser.add_argument("--pause-collector", action="store_true",
                        help="an experiment, not the product: the operator's and the baseline's cyclic collector off "
                             "until their cache is loaded")
    parser.add_argument("--page-size", type=int, default=0,
                        help="an experiment, not the product: list pages of this many objects instead of "
                             "kube.LIST_PAGE_SIZE, in the operator and the baseline")
    parser.add_argument("--split", action="store_true",
                        help="the deployment at scale: admissions to a --role webhook process (no pods), the "
                             "start-up and storm figures of a --role controller process beside it")
    parser.add_argument("--pin", action="store_true",
                        help="with --split: the webhook process and this driver on the first CPU, the stand-in, the "
                             "controller and the baseline on the others (as the webhook's pod would have CPU of its "
                             "own on a node), so that the storm's figure is the webhook's, not the machine's")
    parser.add_argument("--operator-role", default="all", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="one quick run at 200 pods (checks the harness only)")
    args = parser.parse_args()
    if args.role == "operator":
        operator_role(args.cert_dir, args.api_url, args.pause_collector, args.page_size, args.operator_role)
        return
    if args.role == "baseline":
        baseline_role(args.pause_collector, args.page_size)
        return
    if args.smoke:
        args.pods, args.runs, args.rate, args.idle_seconds, args.settle = "200", 1, 20.0, 1.0, 0.5
        args.storm_rate, args.storm_node_rate, args.storm_seconds = 200.0, 5.0, 1.0
    if args.pause_collector:
        EXTRA.append("--pause-collector")
        print("experiment: the cyclic collector paused in the operator and the baseline until their cache is loaded")
    if args.page_size:
        EXTRA.extend(("--page-size", str(args.page_size)))
        print(f"experiment: lists paginated {args.page_size} objects a page in the operator and the baseline")
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if not args.split or len(cpus) < 2 or shutil.which("taskset") is None:
            parser.error("--pin needs --split, at least two CPUs and taskset (util-linux)")
        PINNED.update(admissions={cpus[0]}, rest=set(cpus[1:]))
        os.sched_setaffinity(0, PINNED["admissions"])
        print(f"pinned: the driver and the webhook on CPU {cpus[0]}, the stand-in, the controller and the baseline "
              f"on {', '.join(map(str, cpus[1:]))}")
    options = Options(args.runs, args.rate, args.idle_seconds, args.settle, args.storm_rate, args.storm_node_rate,
                      args.storm_seconds, args.smoke, args.split)
    for pods in (int(size) for size in args.pods.split(",")):
        asyncio.run(measure(pods, options))


if __name__ == "__main__":
    main()
