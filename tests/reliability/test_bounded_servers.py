"""What a caller that is not the API server (or not the scheduler, or not Prometheus) can hold on cardquota's ports:
connections, handshakes, idle time, encoded and oversized bodies, memory. The real servers on 127.0.0.1; the ones
whose memory is measured run in a process of their own (tests/served_process.py). Bounds on memory only: the
timings are in bench/bounded.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from admission_reviews import A100, CLUSTER, client_context, review
from aiohttp import web
from builders import pod
from served_process import ServedProcess, maximal_update, raise_open_files, served

from cardquota.core.policies.config import PolicyConfig
from cardquota.core.scheduling.extender import Extender
from cardquota.core.scheduling.session import SchedulerConfig
from cardquota.operator import extender as extender_module
from cardquota.runtime import serving as serving_module
from cardquota.runtime.cache import ClusterCache
from cardquota.runtime.limits import ServerLimits
from cardquota.runtime.metrics import serve_http
from cardquota.runtime.tls import KeyPair, ReloadableContext, new_ca, new_serving_cert
from cardquota.webhooks import server as server_module
from cardquota.webhooks.admission import Admission

DEPLOYMENT_MEMORY_LIMIT_MIB = 1024
"""manifests/base/deployment.yaml: the operator container's memory limit (tests/unit/test_manifests.py holds it)."""
IDLE_CONNECTIONS = 2000
GUARD_SECONDS = 30.0
"""How long a test waits for the server to do something before failing (a guard, not a measure)."""


def _card_pod(name: str = "p") -> dict[str, Any]:
    return pod(name, namespace="ml", card=A100, gpus=1, queue="team-a")


def _post(path: str, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: localhost", "Content-Type: application/json",
            f"Content-Length: {len(body)}", *(f"{name}: {value}" for name, value in (headers or {}).items())]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def _status_and_body(reader: asyncio.StreamReader) -> tuple[int, dict[str, Any]]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD_SECONDS)
    lines = head.decode().split("\r\n")
    length = next(int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length:"))
    body = await asyncio.wait_for(reader.readexactly(length), GUARD_SECONDS)
    return int(lines[0].split()[1]), json.loads(body)


async def _closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server ends the connection (EOF or reset) before the guard runs out."""
    try:
        return await asyncio.wait_for(reader.read(), GUARD_SECONDS) == b""
    except (ConnectionError, ssl.SSLError):
        return True


class Webhook:
    def __init__(self, port: int, ca: KeyPair) -> None:
        self.port, self.ca = port, ca

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port, ssl=client_context(self.ca),
                                             server_hostname="localhost")

    async def review(self, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        reader, writer = await self.open()
        try:
            writer.write(_post("/validate", body, headers))
            return await _status_and_body(reader)
        finally:
            writer.close()


def _webhook_starter(tmp_path: Path) -> Any:
    async def start(limits: ServerLimits | None = None) -> tuple[Webhook, web.AppRunner]:
        ca = new_ca()
        cache = ClusterCache()
        cache.load(CLUSTER)
        tls = ReloadableContext(tmp_path / f"tls-{id(limits)}")
        tls.install(new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"]))
        runner = await server_module.serve(server_module.build_app(Admission(cache, PolicyConfig())), "127.0.0.1", 0,
                                           tls.context, limits)
        return Webhook(runner.addresses[0][1], ca), runner

    return start


@pytest.fixture
async def webhook(tmp_path: Path) -> AsyncIterator[Webhook]:
    served_webhook, runner = await _webhook_starter(tmp_path)()
    yield served_webhook
    await runner.cleanup()


# ------------------------------------------------------------------------------------------------ connections


async def test_a_connection_that_never_sends_its_client_hello_is_dropped(tmp_path: Path) -> None:
    """Before: asyncio's default handshake timeout, 60 s, and no way to set it."""
    served_webhook, runner = await _webhook_starter(tmp_path)(ServerLimits(handshake_timeout=0.2))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", served_webhook.port)  # plain TCP: no hello
        assert await _closed_by_server(reader)
        writer.close()
        status, answer = await served_webhook.review(json.dumps(review(_card_pod())).encode())
        assert status == 200
        assert answer["response"]["allowed"] is True
    finally:
        await runner.cleanup()


async def test_at_the_cap_the_connection_waiting_longest_makes_room(tmp_path: Path) -> None:
    """The cap counts connections still shaking hands as well as established ones. At the cap, a new connection is
    let in and the one that has waited longest without a request closed: here a handshake never finished. Before:
    the new connection was closed, so a caller holding the cap with half-open or idle connections kept the API
    server out."""
    served_webhook, runner = await _webhook_starter(tmp_path)(ServerLimits(max_connections=3))
    try:
        raw = await asyncio.open_connection("127.0.0.1", served_webhook.port)  # shaking hands, never done
        await asyncio.sleep(0.05)  # (accepted first)
        held = [await served_webhook.open() for _ in range(2)]  # idle, after their handshakes
        status, answer = await served_webhook.review(json.dumps(review(_card_pod())).encode())
        assert (status, answer["response"]["allowed"]) == (200, True)
        assert await _closed_by_server(raw[0])
        reader, writer = held[0]
        writer.write(_post("/validate", json.dumps(review(_card_pod())).encode()))
        status, answer = await _status_and_body(reader)  # the idle ones are still served
        assert (status, answer["response"]["allowed"]) == (200, True)
        for _, writer in held:
            writer.close()
        raw[1].close()
    finally:
        await runner.cleanup()


async def _trickle_from(webhook: Webhook, source: str, declared: int, sent: int = 1024
                        ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection from ``source`` (an address of the loopback network) declaring a body of ``declared`` bytes and
    sending its first ``sent``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", webhook.port, ssl=client_context(webhook.ca),
                                                   server_hostname="localhost", local_addr=(source, 0))
    writer.write(_post("/validate", b"").replace(b"Content-Length: 0", f"Content-Length: {declared}".encode())
                 + b"{" + b" " * (sent - 1))
    await writer.drain()
    return reader, writer


async def test_at_the_cap_a_new_connection_replaces_the_least_advanced_of_the_source_holding_the_most(
        tmp_path: Path) -> None:
    """Every connection is in a body. A connection from a source holding fewer replaces the body with the fewest
    bytes in of the source holding the most; the other source's connections stay. Before: only connections without
    a request could make room, so a caller keeping bodies arriving slowly on every connection kept the API server
    out (2,053 such connections: the next 8 reviews got a reset)."""
    served_webhook, runner = await _webhook_starter(tmp_path)(ServerLimits(max_connections=3))
    try:
        crowd = [await _trickle_from(served_webhook, "127.0.0.2", 2 * 2**10, sent) for sent in (1500, 1024)]
        other = await _trickle_from(served_webhook, "127.0.0.3", 2 * 2**10, 1024)
        await asyncio.sleep(0.1)  # (the server has their headers: each is in a request)
        reader, writer = await asyncio.open_connection("127.0.0.1", served_webhook.port,
                                                       ssl=client_context(served_webhook.ca),
                                                       server_hostname="localhost", local_addr=("127.0.0.4", 0))
        writer.write(_post("/validate", json.dumps(review(_card_pod())).encode()))
        status, _ = await _status_and_body(reader)
        assert status == 200
        assert await _closed_by_server(crowd[1][0])  # the fewest bytes in, of the source holding two
        crowd[0][1].write(b" " * (2 * 2**10 - 1500))
        other[1].write(b" " * (2 * 2**10 - 1024))
        status, _ = await _status_and_body(other[0])  # completes its body: answered (not JSON: 400)
        assert status == 400
        for _, open_writer in (*crowd, other, (reader, writer)):
            open_writer.close()
    finally:
        await runner.cleanup()


async def test_at_the_cap_no_connection_of_a_trusted_source_makes_room_for_another_source(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The trusted source (``--trusted-cidrs``, the API server's addresses) holds the cap with bodies arriving: a
    connection from another source is closed as soon as it is accepted, and reaching the cap is logged; a new one of
    the trusted source's own replaces its least advanced."""
    served_webhook, runner = await _webhook_starter(tmp_path)(ServerLimits(max_connections=2,
                                                                           trusted_networks=("127.0.0.5/32",)))
    try:
        busy = [await _trickle_from(served_webhook, "127.0.0.5", 2 * 2**10) for _ in range(2)]
        await asyncio.sleep(0.1)
        async def from_another_source() -> None:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", served_webhook.port, ssl=client_context(served_webhook.ca),
                server_hostname="localhost", local_addr=("127.0.0.6", 0))
            writer.write(_post("/validate", b"{}"))
            await _status_and_body(reader)

        with pytest.raises((ConnectionError, ssl.SSLError, asyncio.IncompleteReadError)):
            await from_another_source()
        assert "2 connections open, the cap (--max-connections)" in caplog.text
        reader, writer = await asyncio.open_connection("127.0.0.1", served_webhook.port,
                                                       ssl=client_context(served_webhook.ca),
                                                       server_hostname="localhost", local_addr=("127.0.0.5", 0))
        writer.write(_post("/validate", json.dumps(review(_card_pod())).encode()))
        assert (await _status_and_body(reader))[0] == 200
        for _, open_writer in (*busy, (reader, writer)):
            open_writer.close()
    finally:
        await runner.cleanup()


async def test_the_plain_http_ports_cap_connections_and_close_idle_ones() -> None:
    """The metrics port and the extender's: an idle connection is closed after the idle timeout (before: aiohttp's
    3,630 s keep-alive); at the cap, a new connection makes room by closing the one idle longest."""
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    for limits in (ServerLimits(max_connections=2, idle_timeout=GUARD_SECONDS), ServerLimits(idle_timeout=0.2)):
        runner = await serve_http(app, "127.0.0.1", 0, limits)
        port = runner.addresses[0][1]
        try:
            first = await asyncio.open_connection("127.0.0.1", port)
            await asyncio.sleep(0.05)
            second = await asyncio.open_connection("127.0.0.1", port)
            await asyncio.sleep(0.05)
            if limits.max_connections == 2:
                async with aiohttp.ClientSession() as session, \
                        session.get(f"http://127.0.0.1:{port}/healthz") as response:
                    assert response.status == 200  # a third, let in
                assert await _closed_by_server(first[0])  # idle longest: closed to make room
                second[1].write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                assert (await _status_and_body(second[0]))[0] == 200
            else:
                assert await _closed_by_server(first[0])  # idle
                assert await _closed_by_server(second[0])
            for connection in (first, second):
                connection[1].close()
        finally:
            await runner.cleanup()


async def test_a_reloaded_certificate_is_served_through_the_bounded_tls_protocol_from_the_next_connection() -> None:
    """The bounded server's own TLS protocol (a smaller receive buffer) still runs the listening context's
    servername callback, so a pair loaded by ReloadableContext.reload is what the next connection gets."""
    authorities = [new_ca(), new_ca()]
    tls = ReloadableContext()
    tls.install(new_serving_cert(authorities[0], ["localhost"], ip_addresses=["127.0.0.1"]))
    cache = ClusterCache()
    cache.load(CLUSTER)
    runner = await server_module.serve(server_module.build_app(Admission(cache, PolicyConfig())), "127.0.0.1", 0,
                                       tls.context)
    port = runner.addresses[0][1]
    try:
        for index, authority in enumerate(authorities):
            if index:
                assert tls.reload(new_serving_cert(authority, ["localhost"], ip_addresses=["127.0.0.1"]), "test")
            status, answer = await Webhook(port, authority).review(json.dumps(review(_card_pod())).encode())
            assert (status, answer["response"]["allowed"]) == (200, True)
    finally:
        await runner.cleanup()


async def _hold_idle(process: ServedProcess, count: int) -> list[asyncio.StreamWriter]:
    context = ssl.create_default_context(cadata=process.ca_pem.decode())
    writers: list[asyncio.StreamWriter] = []
    for start in range(0, count, 100):
        opened = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", process.port, ssl=context,
                                                                server_hostname="localhost")
                                        for _ in range(min(100, count - start))))
        writers += [writer for _, writer in opened]
    return writers


def test_two_thousand_idle_tls_connections_keep_the_server_small_and_reviews_answered() -> None:
    """Before: ~290 KiB each (asyncio's 256 KiB TLS receive buffer; tracemalloc), 2,000 of them over 500 MiB, and
    still held by the C heap after they closed. The connections stay for the whole test (a long idle timeout)."""
    raise_open_files(2 * IDLE_CONNECTIONS + 256)
    with served(ServerLimits(idle_timeout=600)) as process:
        baseline, _ = process.memory()

        async def scenario() -> tuple[float, int, float]:
            writers = await _hold_idle(process, IDLE_CONNECTIONS)
            held, _ = process.memory()
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", process.port, ssl=ssl.create_default_context(cadata=process.ca_pem.decode()),
                server_hostname="localhost")
            writer.write(_post("/validate", json.dumps(review(_card_pod())).encode()))
            status, _ = await _status_and_body(reader)
            for open_writer in [*writers, writer]:
                open_writer.close()
            after = held
            for _ in range(100):  # the closes, then the heap trimmed a second later
                await asyncio.sleep(0.1)
                after, _ = process.memory()
                if after < baseline + 32:
                    break
            return held, status, after

        held, status, after = asyncio.run(scenario())
    assert held < 256, f"{IDLE_CONNECTIONS} idle TLS connections: {held:.0f} MiB resident (from {baseline:.0f})"
    assert status == 200
    assert after < baseline + 32, f"{after:.0f} MiB resident after the connections closed (from {baseline:.0f})"


# ----------------------------------------------------------------------------------------------------- bodies


@pytest.mark.parametrize("encoding", ["deflate", "gzip", "br", "GZIP"])
async def test_an_encoded_review_is_refused_before_its_body_is_read(webhook: Webhook, encoding: str) -> None:
    """The API server never compresses a review (k8s.io/apiserver pkg/admission/plugin/webhook: the review is
    posted by client-go's rest client, whose request body is plain ``application/json``, no Content-Encoding).
    Before: aiohttp inflated the body on the event loop (4.5 s of CPU for 1 MiB of deflate) and answered 200."""
    plain = json.dumps(review(_card_pod())).encode()
    body = zlib.compress(plain) if encoding == "deflate" else plain  # the header is refused, whatever the bytes
    status, answer = await webhook.review(body, {"Content-Encoding": encoding})
    assert status == 400
    assert "Content-Encoding" in answer["error"]
    status, answer = await webhook.review(plain, {"Content-Encoding": "identity"})
    assert status == 200


async def test_a_review_declared_larger_than_the_limit_is_refused_unread(webhook: Webhook) -> None:
    """Answered from the headers: the body is never sent (before: the server waited for 16 MiB)."""
    reader, writer = await webhook.open()
    head = (f"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {server_module.MAX_BODY + 1}\r\n\r\n")
    writer.write(head.encode())
    status, answer = await _status_and_body(reader)
    assert status == 413
    assert str(server_module.MAX_BODY) in answer["error"]
    assert await _closed_by_server(reader)
    writer.close()


async def _trickle(webhook: Webhook, declared: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that declares a body of ``declared`` bytes and sends only its first KiB."""
    reader, writer = await webhook.open()
    writer.write(_post("/validate", b"", {}).replace(b"Content-Length: 0", f"Content-Length: {declared}".encode())
                 + b"{" + b" " * 1023)
    await writer.drain()
    return reader, writer


async def _answer_while_sending(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, size: int,
                                every: float) -> tuple[int, dict[str, Any]]:
    """The answer to a request whose body goes on arriving, ``size`` bytes every ``every`` seconds, until then."""
    async def send() -> None:
        with contextlib.suppress(ConnectionError, ssl.SSLError, RuntimeError):
            while True:
                await asyncio.sleep(every)
                writer.write(b" " * size)
                await writer.drain()

    sending = asyncio.create_task(send())
    try:
        return await _status_and_body(reader)
    finally:
        sending.cancel()


async def _answered_408_and_closed(reader: asyncio.StreamReader) -> None:
    status, answer = await _status_and_body(reader)
    assert status == 408
    assert "did not arrive" in answer["error"]
    assert await _closed_by_server(reader)


@pytest.mark.parametrize("declared", [2 * 2**20, 2 * 2**10], ids=["large", "small"])
async def test_a_body_that_does_not_arrive_in_time_is_answered_408(webhook: Webhook, declared: int,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Large or small (at most 64 KiB, once read at once), a body has BODY_SECONDS to arrive. Before: a small
    one was read without a deadline, so connections declaring 2 KiB and sending less held their slots of the
    connection cap for as long as they stayed open (a large one already had its 10 s)."""
    monkeypatch.setattr(serving_module, "BODY_SECONDS", 0.2)
    reader, writer = await _trickle(webhook, declared)
    await _answered_408_and_closed(reader)
    writer.close()


async def test_a_body_arriving_below_the_rate_floor_is_answered_408_after_the_first_second(webhook: Webhook) -> None:
    """1 KiB every 50 ms (20 KiB/s, under the 64 KiB/s floor) of a 1 MiB body: refused once the first second has
    passed, not after BODY_SECONDS (10 s). Before: it held its connection, and a large-body slot, for 10 s."""
    reader, writer = await _trickle(webhook, 2**20)
    began = time.monotonic()
    status, answer = await _answer_while_sending(reader, writer, 1024, 0.05)
    assert status == 408
    assert "did not arrive at 64 KiB/s" in answer["error"]
    assert time.monotonic() - began < serving_module.BODY_SECONDS  # (the guard, not a measure)
    writer.close()


async def test_callers_trickling_large_bodies_hold_no_decoding_slot(webhook: Webhook) -> None:
    """More slow senders than decoding slots: a large review that arrives whole is still decoded and answered
    (a slot is taken only once a body is in)."""
    slow = [await _trickle(webhook, 2 * 2**20) for _ in range(server_module.LARGE_BODY_SLOTS + 1)]
    large = _card_pod("large")
    large["metadata"]["annotations"]["example.com/notes"] = "x" * (server_module.LARGE_BODY_BYTES + 1024)
    status, answer = await webhook.review(json.dumps(review(large)).encode())
    assert (status, answer["response"]["allowed"]) == (200, True)
    for _, writer in slow:
        writer.close()


def test_the_body_limit_is_an_update_of_two_maximal_objects_and_its_wrapper() -> None:
    """k8s.io/apiserver pkg/server/config.go: ``MaxRequestBodyBytes: int64(3 * 1024 * 1024)``; an UPDATE review
    carries object and oldObject (before: 16 MiB, more than five such objects)."""
    assert server_module.OBJECT_BYTES == 3 * 2**20
    assert 2 * server_module.OBJECT_BYTES < server_module.MAX_BODY <= 2 * server_module.OBJECT_BYTES + 2**20


def test_four_concurrent_maximal_reviews_stay_well_within_the_memory_limit() -> None:
    """Four UPDATE reviews as large as the server reads, sent at once: answered, the server's peak resident size
    stays under half the Deployment's limit (before: 16 MiB bodies, decoded four at a time: 599 MiB here, ~1.4 GiB
    with other bodies), and what they took is given back to the system (before: ~35 MiB kept by glibc's arenas)."""
    body = maximal_update(server_module.MAX_BODY)
    with served() as process:
        baseline, _ = process.memory()
        context = ssl.create_default_context(cadata=process.ca_pem.decode())

        async def one() -> int:
            reader, writer = await asyncio.open_connection("127.0.0.1", process.port, ssl=context,
                                                           server_hostname="localhost")
            writer.write(_post("/validate", body))
            status, _ = await _status_and_body(reader)
            writer.close()
            return status

        async def four() -> list[int]:
            return list(await asyncio.gather(*(one() for _ in range(4))))

        statuses = asyncio.run(four())
        _, peak = process.memory()
        after = peak
        for _ in range(100):  # the C heap trimmed a second after the last large review
            time.sleep(0.1)
            after, _ = process.memory()
            if after < baseline + 32:
                break
    assert statuses == [200] * 4
    assert peak < DEPLOYMENT_MEMORY_LIMIT_MIB / 2, f"peak resident {peak:.0f} MiB"
    assert after < baseline + 32, f"{after:.0f} MiB resident after the reviews (from {baseline:.0f})"


# --------------------------------------------------------------------------------------------------- extender


@pytest.fixture
async def extender_port() -> AsyncIterator[int]:
    app = extender_module.build_extender_app(Extender(SchedulerConfig()))
    runner = await serve_http(app, "127.0.0.1", 0)
    yield runner.addresses[0][1]
    await runner.cleanup()


async def test_the_extender_refuses_encoded_and_oversized_bodies_before_reading_them(extender_port: int) -> None:
    """Volcano's extender client posts plain JSON (pkg/scheduler/plugins/extender/extender.go ``send``:
    ``http.Post`` of ``json.Marshal``, no Content-Encoding). Before: inflated on the loop and answered 200."""
    for headers, body, expected in (({"Content-Encoding": "deflate"}, zlib.compress(b"{}"), 400),
                                    ({"Content-Length": str(extender_module.MAX_BODY + 1)}, b"", 413)):
        reader, writer = await asyncio.open_connection("127.0.0.1", extender_port)
        request = _post("/predicate", body, {k: v for k, v in headers.items() if k != "Content-Length"})
        if "Content-Length" in headers:
            request = request.replace(b"Content-Length: 0", f"Content-Length: {headers['Content-Length']}".encode())
        writer.write(request)
        status, answer = await _status_and_body(reader)
        writer.close()
        assert status == expected, answer
    async with aiohttp.ClientSession() as session, \
            session.post(f"http://127.0.0.1:{extender_port}/predicate", data=b"{}") as response:
        assert response.status == 200


async def test_the_extender_answers_408_to_a_body_that_does_not_arrive_in_time(
        extender_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a connection declaring a body and sending none was held for as long as it stayed open, past the
    idle timeout (which covers only the wait for a request's headers)."""
    monkeypatch.setattr(serving_module, "BODY_SECONDS", 0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", extender_port)
    writer.write(_post("/predicate", b"").replace(b"Content-Length: 0", b"Content-Length: 100") + b"{")
    await _answered_408_and_closed(reader)
    writer.close()


async def test_the_extender_decodes_large_bodies_a_few_at_a_time_and_a_slow_sender_holds_no_slot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With one slot for decoding large bodies: a caller trickling a large body holds none, so another large body
    arriving whole is answered meanwhile, and so is a small one. Before: the slot was taken before the body was
    read, so callers declaring large bodies and sending one byte kept every large body waiting up to 10 s."""
    monkeypatch.setattr(extender_module, "LARGE_BODY", 1024)
    monkeypatch.setattr(extender_module, "LARGE_BODIES_AT_ONCE", 1)
    runner = await serve_http(extender_module.build_extender_app(Extender(SchedulerConfig())), "127.0.0.1", 0)
    port = runner.addresses[0][1]

    async def exchange(body: bytes) -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_post("/predicate", body))
        status, _ = await _status_and_body(reader)
        writer.close()
        return status

    try:
        held = json.dumps({"pad": "x" * 4096}).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_post("/predicate", held)[:-len(held) + 1])  # the headers and one byte
        await writer.drain()
        await asyncio.sleep(0.1)  # (the server reads the headers and the byte)
        assert await exchange(json.dumps({"pad": "y" * 2048}).encode()) == 200
        assert await exchange(b"{}") == 200
        writer.write(held[1:])
        status, _ = await _status_and_body(reader)
        assert status == 200
        writer.close()
    finally:
        await runner.cleanup()


async def test_headers_beyond_what_the_callers_send_are_refused() -> None:
    """Headers as the API server, the scheduler or Prometheus send them (a service account token included) are
    served; more fields, or a longer one, get 400. Before: aiohttp's 128 fields of 8,190 bytes, and a connection
    whose headers were still arriving was held to the idle timeout (300 such took the server from 38 to 602 MiB)."""
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = await serve_http(app, "127.0.0.1", 0)
    port = runner.addresses[0][1]

    async def status(headers: dict[str, str]) -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write("".join(["GET /healthz HTTP/1.1\r\nHost: localhost\r\n",
                              *(f"{name}: {value}\r\n" for name, value in headers.items()), "\r\n"]).encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n"), GUARD_SECONDS)
        writer.close()
        return int(head.split()[1])

    realistic = {"User-Agent": "kube-apiserver-admission", "Accept": "application/json, */*",
                 "Accept-Encoding": "gzip", "Authorization": "Bearer " + "t" * 1400,
                 "Traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"}
    try:
        assert await status(realistic) == 200
        assert await status({f"X-Field-{index}": "v" for index in range(serving_module.MAX_HEADERS + 1)}) == 400
        assert await status({"X-Long": "v" * (serving_module.MAX_HEADER_BYTES + 1)}) == 400
    finally:
        await runner.cleanup()


async def test_shares_hold_each_untrusted_source_to_its_share_and_keep_a_reserve_for_the_trusted() -> None:
    """FairShares, as the body budget and the decoding slots use it: an untrusted source takes up to its share
    (more only while it holds nothing), untrusted sources together up to the general part, trusted ones the reserve
    too; a take waits for a give, up to its deadline."""
    shares = serving_module.FairShares(general=10, peer_share=4, reserved=5)
    assert shares.try_take("attacker", False, 4)
    assert not shares.try_take("attacker", False, 1)  # its share
    assert shares.try_take("other", False, 4)
    assert not shares.try_take("third", False, 3)  # the general part: 8 of 10 held
    assert shares.try_take("third", False, 2)
    assert shares.try_take("api-server", True, 5)  # the reserve
    assert not shares.try_take("api-server", True, 1)
    assert serving_module.FairShares(10, 4).try_take("lone", False, 6)  # holding nothing: may take more
    assert not await shares.take("attacker", False, 1, 0.05)  # waited, nothing freed: refused

    async def give_soon() -> None:
        await asyncio.sleep(0.05)
        shares.give("other", False, 4)

    giving = asyncio.create_task(give_soon())
    assert await shares.take("third", False, 2, GUARD_SECONDS)  # freed by the give: taken
    await giving
    assert not shares.try_take("third", False, 1)  # its share (4) held


async def test_one_source_sending_large_bodies_fast_leaves_room_to_another(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A source with bodies arriving that fill its share of the body budget: its next body waits (503 after the
    deadline), while another source's review is answered at once. Before: 8 large-body slots for everyone, taken
    before the bodies were read: 8 slow senders made every review over 64 KiB wait up to 10 s (a 98 KiB Pod UPDATE
    took 9.7 s, past the API server's 5 s timeout), 16 got it 503."""
    monkeypatch.setattr(server_module, "PEER_BODY_BYTES", 256 * 2**10)
    monkeypatch.setattr(serving_module, "BODY_SECONDS", 1.0)
    served_webhook, runner = await _webhook_starter(tmp_path)()
    try:
        filling = [await _trickle_from(served_webhook, "127.0.0.2", 100 * 2**10) for _ in range(3)]
        await asyncio.sleep(0.1)
        over = await _trickle_from(served_webhook, "127.0.0.2", 100 * 2**10)
        large = _card_pod("large")
        large["metadata"]["annotations"]["example.com/notes"] = "x" * 98 * 2**10
        reader, writer = await asyncio.open_connection("127.0.0.1", served_webhook.port,
                                                       ssl=client_context(served_webhook.ca),
                                                       server_hostname="localhost", local_addr=("127.0.0.3", 0))
        writer.write(_post("/validate", json.dumps(review(large, operation="UPDATE", old=large)).encode()))
        status, answer = await _status_and_body(reader)
        assert (status, answer["response"]["allowed"]) == (200, True)
        status, answer = await _status_and_body(over[0])  # its share full for the whole deadline
        assert status in (503, 408)
        for _, open_writer in (*filling, over, (reader, writer)):
            open_writer.close()
    finally:
        await runner.cleanup()


async def test_an_answer_the_caller_does_not_read_is_dropped_after_the_answer_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller that asks and reads nothing: the answer it leaves unread (here 8 MiB, past what the socket buffers)
    is dropped with its connection once ANSWER_SECONDS have passed, and counted. Before: held for as long as the
    connection stayed open (150 such connections with 3 MiB answers each: 1,157 MiB resident)."""
    monkeypatch.setattr(serving_module, "ANSWER_SECONDS", 0.3)

    async def large(_: web.Request) -> web.Response:
        return web.Response(body=b"x" * 8 * 2**20)

    app = web.Application(middlewares=[serving_module.body_guard(lambda _: 1024)])
    app.router.add_get("/large", large)
    runner = await serve_http(app, "127.0.0.1", 0)
    port = runner.addresses[0][1]
    before = sum(count for (what, _, reason), count in serving_module.STATS.items()
                 if (what, reason) == ("refused", "answer-not-read"))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /large HTTP/1.1\r\nHost: localhost\r\n\r\n")
        await asyncio.sleep(1.0)  # reading nothing, well past the deadline
        try:
            left = len(await asyncio.wait_for(reader.read(), GUARD_SECONDS))  # to the end: cut short
        except (ConnectionError, ssl.SSLError):
            left = 0
        assert left < 8 * 2**20
        after = sum(count for (what, _, reason), count in serving_module.STATS.items()
                    if (what, reason) == ("refused", "answer-not-read"))
        assert after == before + 1
        writer.close()
    finally:
        await runner.cleanup()


async def _fill_the_send_buffer(port: int, runner: web.AppRunner, path: str) -> socket.socket:
    """A connection that asks for answers, pipelined, and reads none, until the server has some left unsent: the
    kernel's buffers on both sides full, the rest in asyncio's transport below the point where aiohttp waits."""
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    before = set(runner.server.connections) if runner.server is not None else set()
    for _ in range(2000):
        await loop.sock_sendall(sock, f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        await asyncio.sleep(0.01)
        assert runner.server is not None
        handler = next(iter(set(runner.server.connections) - before), None)
        if handler is not None and handler.transport is not None and handler.transport.get_write_buffer_size():
            return sock
    raise AssertionError("the server's send buffer never filled")


async def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + GUARD_SECONDS
    while not condition():
        assert time.monotonic() < deadline, "not within the guard"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("limits", [ServerLimits(max_connections=1, idle_timeout=0.2, handshake_timeout=600),
                                    ServerLimits(idle_timeout=0.2, handshake_timeout=0.5)], ids=["cap", "aborted"])
async def test_a_connection_closed_with_an_unread_answer_neither_stays_open_nor_holds_the_cap(
        limits: ServerLimits) -> None:
    """A plain-HTTP caller that fills its send buffer and reads nothing: when aiohttp closes the connection (here
    at the idle timeout), asyncio's close waits for the unsent bytes to be read, with no limit. Before: the
    connection stayed open, its buffers held and its place under the cap taken for good, never closable to make
    room (2,048 such connections shut the metrics port or the extender's to everyone, the scheduler included). Now it
    is the first to make room at the cap, and aborted once it has been closing for ``handshake_timeout``."""
    async def answer(_: web.Request) -> web.Response:
        return web.Response(body=b"x" * 10_000)

    app = web.Application(middlewares=[serving_module.body_guard(lambda _: 1024)])
    app.router.add_get("/answer", answer)
    runner = await serve_http(app, "127.0.0.1", 0, limits)
    port = runner.addresses[0][1]
    site = next(site for site in serving_module.SITES if site.port_label == str(port))
    try:
        stuck = await _fill_the_send_buffer(port, runner, "/answer")
        await _until(lambda: runner.server is not None and all(  # aiohttp closing it (its idle timeout)
            handler.transport is None or handler.transport.is_closing() for handler in runner.server.connections))
        if limits.max_connections == 1:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)  # its own source: room made
            writer.write(b"GET /answer HTTP/1.1\r\nHost: localhost\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD_SECONDS)
            assert head.startswith(b"HTTP/1.1 200")
            writer.close()
        else:
            await _until(lambda: not site.connections and runner.server is not None
                         and not runner.server.connections)
        stuck.close()
    finally:
        await runner.cleanup()


async def test_a_body_must_arrive_whole_at_the_rate_of_the_room_it_holds(webhook: Webhook,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A body holds its whole length of its source's share from its first byte, so it must arrive whole within
    RATE_GRACE_SECONDS + length / ROOM_RATE: here 512 KiB sent at ~100 KiB/s (above the 64 KiB/s floor), with a room
    rate of 256 KiB/s, is refused at ~3 s. Before: it held its 512 KiB for the 5 s it took (a 6 MiB one held its
    room 10 s for 640 KiB sent)."""
    monkeypatch.setattr(serving_module, "ROOM_RATE", 256 * 2**10)
    reader, writer = await _trickle(webhook, 512 * 2**10)
    status, answer = await _answer_while_sending(reader, writer, 10 * 2**10, 0.1)
    assert status == 408
    assert "did not arrive whole within 3 s" in answer["error"]
    writer.close()


def test_an_ipv6_source_is_its_slash_64() -> None:
    """One host or pod network holds a whole /64: each of its addresses counted apart would give one caller as many
    shares as it has addresses. IPv4 addresses (mapped ones included) stay themselves."""
    source = serving_module._source
    assert source("2001:db8:1:2::1") == source("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert source("2001:db8:1:3::1") != source("2001:db8:1:2::1")
    assert source("10.0.0.7") == "10.0.0.7"
    assert serving_module._address(("::ffff:10.0.0.7", 443, 0, 0)) == "10.0.0.7"


async def test_a_connection_draining_an_unread_body_after_its_answer_can_make_room() -> None:
    """After an answer that did not read the body, aiohttp drains the rest for LINGER_SECONDS: such a connection is
    closed at the cap like an idle one. Before: it could not be closed, so callers repeating it kept the cap full."""
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application(middlewares=[serving_module.body_guard(lambda _: 2**20)])
    app.router.add_get("/healthz", healthz)
    runner = await serve_http(app, "127.0.0.1", 0, ServerLimits(max_connections=1))
    port = runner.addresses[0][1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\n" + b"x" * 10)
        status, _ = await _status_and_body(reader)  # answered; the rest of its body is still awaited
        assert status == 200
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/healthz") as response:
            assert response.status == 200  # the draining one made room
        assert await _closed_by_server(reader)
        writer.close()
    finally:
        await runner.cleanup()
