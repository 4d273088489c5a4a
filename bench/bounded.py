"""What a caller can make the admission server hold or spend, against aiohttp's defaults (the settings cardquota's
servers had before they were bounded: asyncio's TLS buffers and 60 s handshake, aiohttp's keep-alive and
``auto_decompress``), each server in a process of its own on 127.0.0.1:

    python bench/bounded.py [--connections 2000] [--runs 3]

1. idle TLS connections: the server's resident size with ``--connections`` idle TLS connections open, per
   connection, and two seconds after they closed;
2. a 1 MiB ``Content-Encoding: deflate`` body (1 GiB of zeros, deflated): the server's CPU and its event loop's
   longest stall while it is sent;
3. four concurrent UPDATE reviews as large as the server reads (cardquota only: the baseline has no such limit):
   the server's peak resident size.

Figures are min-max over ``--runs``; the machine and its load change them, the ratios less so.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import resource
import ssl
import sys
import tempfile
import time
import zlib
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from admission_reviews import CLUSTER
from served_process import maximal_update, memory_mib

KINDS = ("aiohttp defaults", "cardquota")


def _serve(kind: str, pipe: Connection) -> None:
    from aiohttp import web

    from cardquota.core.policies.config import PolicyConfig
    from cardquota.runtime.cache import ClusterCache
    from cardquota.runtime.tls import ReloadableContext, new_ca, new_serving_cert
    from cardquota.webhooks.admission import Admission
    from cardquota.webhooks.server import build_app, serve

    async def main() -> None:
        ca = new_ca()
        tls = ReloadableContext(Path(tempfile.mkdtemp(prefix="cardquota-bench-")) / "tls")
        tls.install(new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"]))
        if kind == "cardquota":
            cache = ClusterCache()
            cache.load(CLUSTER)
            runner = await serve(build_app(Admission(cache, PolicyConfig())), "127.0.0.1", 0, tls.context)
        else:  # what the server ran with before: aiohttp's and asyncio's defaults, a 16 MiB body limit
            async def read(request: web.Request) -> web.Response:
                return web.json_response({"read": len(await request.read())})

            app = web.Application(client_max_size=16 * 2**20)
            app.router.add_post("/validate", read)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.context).start()
        loop = asyncio.get_running_loop()
        stall = [0.0]

        async def heartbeat() -> None:
            while True:
                before = loop.time()
                await asyncio.sleep(0.001)
                stall[0] = max(stall[0], loop.time() - before - 0.001)

        beat = asyncio.create_task(heartbeat())
        pipe.send((runner.addresses[0][1], ca.cert_pem))
        while (command := await loop.run_in_executor(None, pipe.recv)) != "stop":
            if command == "memory":
                pipe.send(memory_mib())
            elif command == "reset":
                stall[0] = 0.0
                pipe.send(time.process_time())
            elif command == "cpu":
                pipe.send((time.process_time(), stall[0]))
        beat.cancel()
        await runner.cleanup()

    asyncio.run(main())


def _ask(pipe: Connection, command: str) -> Any:
    pipe.send(command)
    return pipe.recv()


async def _idle(port: int, context: ssl.SSLContext, count: int) -> list[asyncio.StreamWriter]:
    writers: list[asyncio.StreamWriter] = []
    for start in range(0, count, 100):
        opened = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                                server_hostname="localhost")
                                        for _ in range(min(100, count - start))))
        writers += [writer for _, writer in opened]
    return writers


async def _post(port: int, context: ssl.SSLContext, body: bytes, headers: dict[str, str] | None = None) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    head = ["POST /validate HTTP/1.1", "Host: localhost", "Content-Type: application/json",
            f"Content-Length: {len(body)}", *(f"{name}: {value}" for name, value in (headers or {}).items())]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
    try:
        writer.write(body)
        await writer.drain()
    except ConnectionError:
        pass  # refused before the body was read: the server closed the connection
    status = int((await reader.readline()).split()[1])
    writer.close()
    return status


def deflated_zeros(size: int = 2**30) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS)
    chunk = bytes(2**20)
    return b"".join(compressor.compress(chunk) for _ in range(size // len(chunk))) + compressor.flush()


def one_run(kind: str, connections: int, bomb: bytes, maximal: bytes) -> dict[str, float]:
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=_serve, args=(kind, theirs), daemon=True)
    process.start()
    port, ca_pem = ours.recv()
    client = ssl.create_default_context(cadata=ca_pem.decode())
    figures: dict[str, float] = {}
    try:
        figures["base"], _ = _ask(ours, "memory")

        async def idle() -> None:
            writers = await _idle(port, client, connections)
            figures["idle"], _ = _ask(ours, "memory")
            for writer in writers:
                writer.close()
            await asyncio.sleep(2)
            figures["closed"], _ = _ask(ours, "memory")

        asyncio.run(idle())
        started = _ask(ours, "reset")
        figures["bomb_status"] = asyncio.run(_post(port, client, bomb, {"Content-Encoding": "deflate"}))
        cpu, stall = _ask(ours, "cpu")
        figures["bomb_cpu"], figures["bomb_stall"] = cpu - started, stall
        if kind == "cardquota":
            async def four() -> list[int]:
                return list(await asyncio.gather(*(_post(port, client, maximal) for _ in range(4))))

            statuses = asyncio.run(four())
            assert statuses == [200] * 4, statuses
            _, figures["maximal_peak"] = _ask(ours, "memory")
    finally:
        ours.send("stop")
        process.join(10)
        if process.is_alive():
            process.kill()
    return figures


def _span(values: list[float], unit: str, digits: int = 0) -> str:
    low, high = min(values), max(values)
    return f"{low:.{digits}f}{unit}" if f"{low:.{digits}f}" == f"{high:.{digits}f}" else \
        f"{low:.{digits}f}-{high:.{digits}f}{unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * args.connections + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    from cardquota.webhooks.server import MAX_BODY

    bomb, maximal = deflated_zeros(), maximal_update(MAX_BODY)
    runs = {kind: [one_run(kind, args.connections, bomb, maximal) for _ in range(args.runs)] for kind in KINDS}
    print(f"{args.runs} runs per server, {args.connections} idle TLS connections, a {len(bomb) / 2**20:.1f} MiB "
          f"deflate body (1 GiB inflated), four {len(maximal) / 2**20:.2f} MiB UPDATE reviews")
    for kind in KINDS:
        figures = runs[kind]
        per = [(run["idle"] - run["base"]) * 1024 / args.connections for run in figures]
        print(f"{kind}:")
        print(f"  1. idle: {_span([run['base'] for run in figures], ' MiB')} at rest, "
              f"{_span([run['idle'] for run in figures], ' MiB')} with the connections open "
              f"({_span(per, ' KiB')} each), {_span([run['closed'] for run in figures], ' MiB')} after they closed")
        print(f"  2. deflate body: answered {_span([run['bomb_status'] for run in figures], '')}, "
              f"{_span([run['bomb_cpu'] * 1000 for run in figures], ' ms')} of server CPU, longest loop stall "
              f"{_span([run['bomb_stall'] * 1000 for run in figures], ' ms', 1)}")
        if kind == "cardquota":
            print(f"  3. four maximal reviews at once: peak {_span([run['maximal_peak'] for run in figures], ' MiB')}"
                  " resident")


if __name__ == "__main__":
    main()
