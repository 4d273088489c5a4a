"""The attacks on the admission port that issue 41's review measured, as one loopback client runs them at full speed
(in a process of its own, from an address of its own on the loopback network), and the API server's reviews sent
meanwhile from another address: used by tests/reliability/test_fair_serving.py (what must hold) and
bench/fair_serving.py (how long the API server's reviews take).

The attacks:

* ``slow-bodies``: 2,100 connections, each with complete headers declaring a 2 KiB body and one byte of it; each
  one closed by the server is opened again at once (the review: 2,053 connections in 11.5 s held the cap, and
  re-opening after each 408 kept it full);
* ``slow-large-bodies``: 16 connections declaring 1 MiB bodies, sending a byte every half second (the review: 8
  held every large-body slot, a 98 KiB Pod UPDATE took 9.7 s, 16 got it 503);
* ``unread-answers``: 150 connections each sending 1,000 KiB reviews whose ``uid`` is 1,000 KiB of non-ASCII text,
  again and again, reading nothing (the review: 1,157 MiB resident).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from admission_reviews import A100, review
from builders import pod

ATTACKER = "127.0.0.2"
API_SERVER = "127.0.0.5"
"""The API server's address in these scenarios, given to the server as ``--trusted-cidrs``."""
ATTACKS = ("slow-bodies", "slow-large-bodies", "unread-answers")
DISCONNECTED = (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError)


def _head(declared: int) -> bytes:
    return (f"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {declared}\r\n\r\n").encode()


def unread_answer_review() -> bytes:
    """A POST of a review whose uid is 1,000 KiB of non-ASCII text."""
    body = review(pod("p", namespace="ml", card=A100, gpus=1, queue="team-a"))
    body["request"]["uid"] = "\u00e9" * (500 * 2**10)  # 1,000 KiB of UTF-8
    encoded = json.dumps(body, ensure_ascii=False).encode()
    return _head(len(encoded)) + encoded


async def _open(port: int, context: ssl.SSLContext) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost",
                                                          local_addr=(ATTACKER, 0)), 10)


async def _slow_body(port: int, context: ssl.SSLContext, declared: int, every: float, stop: float) -> None:
    """One connection declaring ``declared`` bytes of body and sending one byte every ``every`` seconds (never, when
    0); opened again whenever the server closes it, until ``stop``."""
    while time.monotonic() < stop:
        try:
            reader, writer = await _open(port, context)
            writer.write(_head(declared) + b"{")
            await writer.drain()
            while time.monotonic() < stop:
                if every:
                    await asyncio.sleep(every)
                    writer.write(b" ")
                    await writer.drain()
                else:
                    if not await asyncio.wait_for(reader.read(2**16), max(0.01, stop - time.monotonic())):
                        break
        except (*DISCONNECTED, TimeoutError):
            await asyncio.sleep(0.01)
            continue
        with suppress(*DISCONNECTED):
            writer.close()


async def _unread_answers(port: int, context: ssl.SSLContext, body: bytes, stop: float) -> None:
    """One connection sending ``body`` again and again and reading nothing, until ``stop``."""
    while time.monotonic() < stop:
        try:
            _, writer = await _open(port, context)
            while time.monotonic() < stop:
                writer.write(body)
                await asyncio.wait_for(writer.drain(), max(0.01, stop - time.monotonic()))
        except (*DISCONNECTED, TimeoutError):
            await asyncio.sleep(0.01)


async def _attack(name: str, port: int, ca_pem: bytes, seconds: float) -> None:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    stop = time.monotonic() + seconds
    if name == "slow-bodies":
        workers = [_slow_body(port, context, 2 * 2**10, 0, stop) for _ in range(2100)]
    elif name == "slow-large-bodies":
        workers = [_slow_body(port, context, 2**20, 0.5, stop) for _ in range(16)]
    else:
        body = unread_answer_review()
        workers = [_unread_answers(port, context, body, stop) for _ in range(150)]
    await asyncio.gather(*workers)


def _run_attack(name: str, port: int, ca_pem: bytes, seconds: float) -> None:
    import resource
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192) if hard != resource.RLIM_INFINITY else 8192, hard))
    asyncio.run(_attack(name, port, ca_pem, seconds))


@contextmanager
def attacking(name: str, port: int, ca_pem: bytes, seconds: float) -> Iterator[None]:
    """``name`` run against ``port`` from :data:`ATTACKER` in a process of its own for ``seconds``."""
    process = multiprocessing.get_context("spawn").Process(target=_run_attack, args=(name, port, ca_pem, seconds),
                                                           daemon=True)
    process.start()
    try:
        yield
    finally:
        process.join(seconds + 30)
        if process.is_alive():
            process.kill()


@dataclass
class Reviews:
    """What the API server's reviews got: each one's HTTP status (0: no answer) and seconds."""

    statuses: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


def api_server_reviews() -> list[bytes]:
    """A realistic card Pod CREATE (~6 KB with its review) and a 98 KiB Pod UPDATE, as the API server sends them."""
    small = pod("p", namespace="ml", card=A100, gpus=1, queue="team-a")
    large = pod("large", namespace="ml", card=A100, gpus=1, queue="team-a")
    large["metadata"]["annotations"]["example.com/notes"] = "x" * (48 * 2**10)
    return [json.dumps(review(small)).encode(), json.dumps(review(large, operation="UPDATE", old=large)).encode()]


async def send_reviews(port: int, ca_pem: bytes, seconds: float, *, workers: int = 4,
                       source: str = API_SERVER, on_each: Callable[[], Any] | None = None) -> Reviews:
    """Reviews sent from ``source`` for ``seconds`` by ``workers`` keep-alive connections, as the API server sends
    them (a new connection when one is closed), each waiting at most 5 s (the API server's webhook timeout)."""
    import aiohttp

    context = ssl.create_default_context(cadata=ca_pem.decode())
    bodies = api_server_reviews()
    outcome = Reviews()
    stop = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(ssl=context, local_addr=(source, 0), limit=workers)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=5)) as session:
        async def worker(index: int) -> None:
            count = index
            while time.monotonic() < stop:
                body = bodies[count % len(bodies)]
                count += 1
                began = time.monotonic()
                try:
                    async with session.post(f"https://127.0.0.1:{port}/validate", data=body,
                                            headers={"Content-Type": "application/json"}) as response:
                        await response.read()
                        status = response.status
                except (aiohttp.ClientError, TimeoutError, *DISCONNECTED):
                    status = 0
                outcome.statuses.append(status)
                outcome.seconds.append(time.monotonic() - began)
                if on_each is not None:
                    on_each()
                await asyncio.sleep(0.02)

        await asyncio.gather(*(worker(index) for index in range(workers)))
    return outcome
