"""Every port cardquota listens on (the admission server's HTTPS, the metrics and health HTTP, the extender's HTTP)
is started here, with the same bounds on what a caller can hold: :class:`ServerLimits`. A caller is its source
address (a *peer*); peers in :attr:`ServerLimits.trusted_networks` (the API server's, the scheduler's) are exempt
from the per-peer shares and have a reserved part of what is shared.

* **Connections**: at most ``max_connections`` at once, TLS handshakes in progress included, so memory held by
  connections is bounded by the cap, whoever opens them. At the cap a new connection takes the place of one held by
  its own peer or by a peer holding more connections than it would (never a trusted peer's, unless it is trusted
  itself): of that peer's, the one that has made the least progress — a connection closing (waiting for its peer
  to take its close), a TLS handshake, then the connection idle longest, then the body with the fewest bytes in;
  it is aborted, so it frees its place at once. So one source opening connections as fast as it can only
  replaces its own, and the API server's idle keep-alive connections stay; only when no such connection can go is
  the new one closed as soon as it is accepted (the caller sees a reset, and retries).
* **Handshake**: a TLS handshake not done within ``handshake_timeout`` seconds is dropped (asyncio's default is
  60 s); so is a close whose peer does not take it in that time (asyncio's default for TLS: 30 s; for plain TCP
  with an answer unsent: no limit), by :meth:`LimitedSite.sweep`.
* **Idle**: a connection without a request for ``idle_timeout`` seconds is closed (aiohttp's default keep-alive is
  3,630 s). The API server's and the scheduler's HTTP clients open a new one when they need it.
* **Headers** of the size the callers send (:data:`MAX_HEADERS` fields of up to :data:`MAX_HEADER_BYTES`); more is
  refused with 400 as it arrives.
* **Bodies** arrive at :data:`MIN_BODY_RATE` at least, after a first :data:`RATE_GRACE_SECONDS`, whole at
  :data:`ROOM_RATE` for the room they hold, and whole within :data:`BODY_SECONDS` (:func:`received_body`: 408
  after, the connection closed). Nothing shared is held until a body's first bytes arrive; then its length is taken
  from a byte budget (:class:`FairShares`) of which each untrusted peer may hold a share, so a caller holding bodies
  it sends slowly holds at most its share, about as long as it takes to send as much. Slots for decoding large
  bodies are taken once a body is in, again with a share per peer.
* **Bodies are never inflated**: the parser does not decode ``Content-Encoding``; the apps refuse such requests
  with 400 (:func:`body_guard`).
* **Answers** must be taken by the caller within :data:`ANSWER_SECONDS` (else the connection is aborted and what
  was unsent freed), and each connection's kernel send buffer is :data:`SEND_BUFFER_BYTES`, so unsent answers hold
  at most that per connection; answers themselves are bounded by what each app echoes (the webhooks refuse a review
  whose ``uid`` is not what the API server sends).

Every refusal and eviction is counted by port and reason (:data:`STATS`, exported as
``cardquota_http_refused_total`` and ``cardquota_http_evicted_total``) so an attack can be told from load.

**What an idle TLS connection costs, and why it was ~290 KiB.** asyncio's ``SSLProtocol`` gives every
connection a 256 KiB receive buffer (``max_size``, allocated and zeroed when the connection is accepted, before the
handshake), besides OpenSSL's own state (~30 KiB) and aiohttp's handler (~4 KiB): measured with tracemalloc, 256 of
~290 KiB per idle connection were that buffer. Here each connection's TLS protocol reads in
:data:`TLS_READ_BYTES` (two TLS records of 16 KiB): the socket is read in smaller steps, with no other change
(``_SmallBufferTLS``: the protocol ``loop.create_server(ssl=…)`` builds itself, whose constructor is the same from
Python 3.11 on, with a smaller ``max_size``): ~60 KiB per idle connection.

**Why memory was not given back after the connections closed.** The freed buffers go back to glibc's heap, not to
the system: the first 256 KiB buffer freed raises glibc's mmap threshold above its size (its dynamic threshold), so
every later one comes from the heap, interleaved with objects that outlive them, and glibc returns heap memory only
from its top or on ``malloc_trim``. 500 idle connections took the resident size from 50 to 188 MiB, still 188 MiB
after they had all closed, 55 MiB after ``malloc_trim(0)``. So once :data:`TRIM_AFTER_CLOSED` connections have
closed, ``malloc_trim(0)`` runs (once, a second later, on the event loop: a few milliseconds) where the C library
has it (glibc), and after a large body was decoded or a large answer sent (:func:`trim_soon`); and the policy
threads share the main thread's arenas (:data:`MALLOC_ARENAS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import ipaddress
import logging
import socket
import ssl
import weakref
from asyncio import sslproto
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from cardquota.runtime.limits import ServerLimits, trusted_networks

__all__ = ["BODY_SECONDS", "FairShares", "ServerLimits", "body_guard", "peer_of", "received_body", "start_server",
           "trim_soon"]
log = logging.getLogger("cardquota.serving")
TLS_READ_BYTES = 32 * 2**10
"""Receive buffer of each TLS connection (asyncio's default: 256 KiB). A TLS record is at most 16 KiB of payload."""
READ_BUFFER_BYTES = 32 * 2**10
"""What aiohttp buffers of a body before the app reads it, per connection (twice this, then it stops reading the
socket; aiohttp's default: 64 KiB, so 128 KiB): 2,048 connections that each sent that much of a body and stopped
held 256 MiB until their deadline."""
BODY_SECONDS = 10.0
"""Seconds a request's body may take to arrive once its headers are in (answered 408 after, by
:func:`received_body`): the API server and Volcano's extender client send a body in one write."""
MIN_BODY_RATE = 64 * 2**10
"""Bytes per second a body must arrive at, on average, once :data:`RATE_GRACE_SECONDS` have passed (408 below it):
a caller trickling bodies holds each connection about a second, not :data:`BODY_SECONDS`. The API server sends a
3 MiB object in milliseconds within the cluster's network."""
ROOM_RATE = 2**20
"""Bytes per second at which a body must arrive whole, once :data:`RATE_GRACE_SECONDS` have passed, for the room it
holds: a body of ``n`` bytes (``Content-Length``; the most a body may have when it has none) holds ``n`` bytes of its
source's share from its first byte, so it has ``RATE_GRACE_SECONDS + n / ROOM_RATE`` seconds (at most
:data:`BODY_SECONDS`) to be all in. Holding room costs sending about as much: at :data:`MIN_BODY_RATE` alone, a
caller declaring 6 MiB held it 10 s for 640 KiB sent. The API server and the scheduler send tens of MiB/s or more."""
RATE_GRACE_SECONDS = 1.0
"""Seconds a body may take before the rate floor applies (a handshake's worth of round trips, and a scheduler
pausing for its garbage collector)."""
ANSWER_SECONDS = 5.0
"""Seconds a caller has to take an answer once it is written (the API server gives the whole webhook call 5 s by
default): past that, the connection is aborted and what it had not read is freed."""
SEND_BUFFER_BYTES = 64 * 2**10
"""Each connection's kernel send buffer (``SO_SNDBUF``, which Linux doubles for its bookkeeping: 128 KiB; left alone,
it autotunes up to ``tcp_wmem``'s 4 MiB, charged to the pod's memory). With asyncio's 64 KiB of write buffer above
it (past which an answer waits, up to :data:`ANSWER_SECONDS`), a caller that reads nothing holds at most ~192 KiB of
unsent answers per connection, for at most 5 s at a time: ~384 MiB if every connection of the cap did, which takes
thousands of pipelined requests on each (the answers cardquota sends are ~1 KiB)."""
LINGER_SECONDS = 2.0
"""Seconds the rest of an unread body is read and dropped after an answer that did not read it (a refusal, or a
verb that needs no body), before the connection closes (aiohttp's default: 10 s). Closing at once would reset a
connection whose sender is still writing, which can lose the answer; the API server and the scheduler send their
body in one write, so what is left arrives within milliseconds."""
LISTEN_BACKLOG = 1024
"""Connections the kernel queues before the server accepts them (asyncio's default: 100; capped by
``net.core.somaxconn``): a caller opening connections as fast as it can fills a short queue, and a connection
arriving then has its SYN dropped and retried a second later (TCP's initial retransmission timeout)."""
SWEEP_SECONDS = 1.0
"""How often each site looks for connections closing for too long (:meth:`LimitedSite.sweep`)."""
CAP_LOG_SECONDS = 60.0
"""At most one warning a minute that a port's connection cap is reached."""
TRIM_AFTER_CLOSED = 256
"""Connections closed between two ``malloc_trim`` calls."""
TRIM_BODY_BYTES = 256 * 2**10
"""A body above this size, once answered, is followed by a ``malloc_trim`` (:func:`trim_soon`): 150 connections
sending 1,000 KiB bodies left the server 108 MiB above idle, in the C heap, half a minute after they closed."""
LARGE_ANSWER_BYTES = 2**20
"""An answer above this size is followed by a ``malloc_trim`` (:func:`trim_soon`)."""
M_ARENA_MAX = -8
"""glibc's ``mallopt`` parameter for the number of arenas (malloc.h)."""
MALLOC_ARENAS = 2
"""At most this many glibc arenas: by default glibc gives threads arenas of their own (up to 8 per core), and a
large review decoded on a policy thread left its memory in that thread's arena — four maximal reviews left the
server 35 MiB above where it started, 10 MiB with two arenas (the same as ``MALLOC_ARENA_MAX=2``)."""


class ServingStats(Counter[tuple[str, str, str]]):
    """Refusals and evictions by (what, port, reason): ``what`` is ``refused`` or ``evicted``; read by the metrics
    collector (:mod:`cardquota.runtime.metrics`), which exports them."""

    def count(self, what: str, port: str, reason: str) -> None:
        self[what, port, reason] += 1


STATS = ServingStats()
SITES: weakref.WeakSet[LimitedSite] = weakref.WeakSet()
"""Every bounded site serving, for the metrics collector."""


class _SmallBufferTLS(sslproto.SSLProtocol):
    """asyncio's TLS protocol with a smaller receive buffer (see the module's docstring)."""

    max_size = TLS_READ_BYTES


class _Refused(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.abort()  # type: ignore[attr-defined]


class _Allocator:
    """The C library's allocator, where it is glibc: ``malloc_trim(0)`` once :data:`TRIM_AFTER_CLOSED` connections
    have closed since the last one, or soon after a large body was decoded (:func:`trim_soon`); and at most
    :data:`MALLOC_ARENAS` arenas."""

    def __init__(self) -> None:
        path = ctypes.util.find_library("c")
        library = ctypes.CDLL(path) if path else None
        self.trim: Callable[[int], int] | None = getattr(library, "malloc_trim", None)
        self.mallopt: Callable[[int, int], int] | None = getattr(library, "mallopt", None)
        self.closed = 0
        self.scheduled = False

    def limit_arenas(self) -> None:
        if self.mallopt is not None:
            self.mallopt(M_ARENA_MAX, MALLOC_ARENAS)

    def closed_one(self, loop: asyncio.AbstractEventLoop) -> None:
        self.closed += 1
        if self.closed >= TRIM_AFTER_CLOSED:
            self.soon(loop)

    def soon(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.trim is not None and not self.scheduled:
            self.scheduled = True
            loop.call_later(1.0, self._run)

    def _run(self) -> None:
        self.closed, self.scheduled = 0, False
        if self.trim is not None:
            self.trim(0)


TRIMMER = _Allocator()


def trim_soon() -> None:
    """Give the C heap's free memory back to the system a second from now (once, however often called before):
    after something large was freed, such as a decoded review of megabytes."""
    TRIMMER.soon(asyncio.get_running_loop())


def _address(peername: Any) -> str:
    """The source address of a connection (an IPv4 address mapped into IPv6 as the IPv4 one), or ``"?"``."""
    host = peername[0] if isinstance(peername, tuple) and peername else None
    if not isinstance(host, str):
        return "?"
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


IPV6_SOURCE_PREFIX = 64
"""An IPv6 source is its /64: one host, or one pod's network, holds a whole /64 (Kubernetes gives each node a /64 or
wider of the pod range), so counting each of its 2^64 addresses apart would give a single caller unbounded shares."""


def _source(address: str) -> str:
    """Whose share a connection from ``address`` counts against: the address, an IPv6 one's /64."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if parsed.version == 6:
        return str(ipaddress.ip_network(f"{parsed}/{IPV6_SOURCE_PREFIX}", strict=False))
    return address


@dataclass(eq=False)
class _Connection:
    """What the site knows of one connection: its peer, and how far it has got (for choosing whom to close)."""

    peer: str
    trusted: bool
    began: float
    close: Callable[[], None]
    """Aborts the accepted socket: what is unsent is dropped and the connection ends at once (a graceful close waits
    for the peer: TLS for its close_notify, up to ``handshake_timeout``; plain TCP until its unsent answer is read,
    with no limit at all)."""
    handshaking: bool = True
    handler: Any = None
    """aiohttp's request handler, once the connection is handed to it."""
    body_began: float | None = None
    """When its current body began to arrive (None: not receiving a body)."""
    received: int = 0
    answered_at: float | None = None
    """When its last answer was written (None: a request since, or none yet): what is left of an unread body is
    drained for up to ``LINGER_SECONDS`` after it, a state that can be closed like an idle one."""
    closing_since: float | None = None
    """When the site first saw it closing (:meth:`LimitedSite.sweep`)."""

    def closing(self) -> bool:
        """Whether aiohttp is closing it: its last answer is written, or given up on, and it waits only for the peer
        (TLS close_notify, or an unsent answer read)."""
        if self.handshaking or self.handler is None:
            return False
        transport = self.handler.transport  # None once aiohttp's force_close ran
        return transport is None or transport.is_closing()

    def progress(self) -> tuple[int, float] | None:
        """Lower for less progress (closed first at the cap); None when it must not be closed (its request is being
        judged or answered)."""
        if self.closing():
            return (0, self.began)
        if self.handshaking:
            return (1, self.began)
        if self.body_began is not None:
            return (3, float(self.received))
        if self.answered_at is not None:
            return (2, self.answered_at)
        waiting = getattr(self.handler, "_waiter", None)  # aiohttp's handler, awaiting the next request's headers
        if waiting is not None and not waiting.done():
            return (2, self.handler._next_keepalive_close_time - self.handler.keepalive_timeout)
        return None


_CONNECTIONS: dict[Any, _Connection] = {}
"""aiohttp's handler of each connection a bounded site accepted, to its record (read by :func:`received_body`)."""


def peer_of(request: web.Request) -> tuple[str, bool]:
    """(source address, whether trusted) of the connection ``request`` came on."""
    connection = _CONNECTIONS.get(request.protocol)
    if connection is not None:
        return connection.peer, connection.trusted
    return request.remote or "?", False


class LimitedSite(web.TCPSite):
    """A TCP site whose connections are bounded by :class:`ServerLimits`; TLS when given a context (a certificate
    reloaded by :class:`cardquota.runtime.tls.ReloadableContext` reaches new handshakes through that context's
    servername callback)."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, limits: ServerLimits,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        super().__init__(runner, host, port)
        self.limits = limits
        self.trusted = trusted_networks(limits.trusted_networks)
        self.tls = ssl_context
        self.connections: dict[object, _Connection] = {}
        """Every connection open (handshakes included), by aiohttp's handler of it."""
        self.per_peer: Counter[str] = Counter()
        self.refused = 0
        self.last_warning = float("-inf")
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return f"{'https' if self.tls is not None else 'http'}://{self._host}:{self._port}"

    @property
    def port_label(self) -> str:
        sockets = getattr(self._server, "sockets", None)
        return str(sockets[0].getsockname()[1]) if sockets else "?"

    def open_connections(self) -> int:
        return len(self.connections)

    def is_trusted(self, peer: str) -> bool:
        if not self.trusted:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in network for network in self.trusted)

    async def start(self) -> None:
        SITES.add(self)
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._protocol, self._host, self._port, backlog=LISTEN_BACKLOG,
                                                reuse_address=self._reuse_address, reuse_port=self._reuse_port)
        self._sweeper = loop.create_task(self._sweep_forever())

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for connection in list(self.connections.values()):
            if connection.handshaking:
                connection.close()
        SITES.discard(self)
        await super().stop()

    async def _sweep_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            self.sweep(loop.time())

    def sweep(self, now: float) -> None:
        """Abort each connection that has been closing for ``handshake_timeout`` (seen every :data:`SWEEP_SECONDS`):
        aiohttp closes a connection gracefully (after its idle timeout, a refusal, ``Connection: close``), and a
        plain TCP close waits, with no limit, for the peer to read what is unsent (asyncio's selector transport
        ``close``): a caller that filled its send buffer and read nothing held the connection, its buffers and a
        place under the cap for good (asyncio's TLS protocol bounds its own close by ``ssl_shutdown_timeout``)."""
        for connection in list(self.connections.values()):
            if not connection.closing():
                connection.closing_since = None
            elif connection.closing_since is None:
                connection.closing_since = now
            elif now - connection.closing_since >= self.limits.handshake_timeout:
                connection.close()

    def add(self, handler: object, connection: _Connection) -> None:
        self.connections[handler] = connection
        self.per_peer[connection.peer] += 1
        _CONNECTIONS[handler] = connection

    def forget(self, handler: object) -> None:
        connection = self.connections.pop(handler, None)
        if connection is not None:
            self.per_peer[connection.peer] -= 1
            if not self.per_peer[connection.peer]:
                del self.per_peer[connection.peer]
            _CONNECTIONS.pop(handler, None)

    def _make_room(self, peer: str, trusted: bool) -> bool:
        """Close, to let a connection from ``peer`` in, one of the connections of the peer holding the most among
        ``peer`` itself and the untrusted peers holding more than ``peer`` would (any untrusted peer when ``peer``
        is trusted): of those, the one that has made the least progress. False when none can be closed."""
        mine = self.per_peer[peer] + 1
        chosen: tuple[tuple[int, int, float], object, _Connection] | None = None
        for key, connection in self.connections.items():
            if connection.peer != peer and (connection.trusted or (
                    not trusted and self.per_peer[connection.peer] <= mine)):
                continue
            progress = connection.progress()
            if progress is None:
                continue
            rank = (-self.per_peer[connection.peer], *progress)
            if chosen is None or rank < chosen[0]:
                chosen = (rank, key, connection)
        if chosen is None:
            return False
        (_, state, _), key, connection = chosen
        self.forget(key)  # (counted no more: its end is reported a turn later)
        STATS.count("evicted", self.port_label, ("closing", "handshake", "idle", "slow-body")[state])
        connection.close()
        return True

    def _protocol(self) -> asyncio.Protocol:
        return _Admitted(self)

    def admit(self, peer: str, trusted: bool) -> bool:
        """Whether a new connection from ``peer`` may stay (room made at the cap); logged and counted when not."""
        if self.open_connections() < self.limits.max_connections or self._make_room(peer, trusted):
            return True
        self.refused += 1
        STATS.count("refused", self.port_label, "connection-cap")
        now = asyncio.get_running_loop().time()
        if now - self.last_warning >= CAP_LOG_SECONDS:
            self.last_warning = now
            log.warning("%s: %d connections open, the cap (--max-connections), none of them closable for a new one "
                        "from %s; new ones are closed (%d so far)", self.name, self.limits.max_connections, peer,
                        self.refused)
        return False


class _Admitted(asyncio.Protocol):
    """The first protocol of an accepted connection: closes it at once when the cap leaves no room, else hands it to
    aiohttp's handler, through TLS when the site has a context, recording it with its peer."""

    def __init__(self, site: LimitedSite) -> None:
        self.site = site

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        site = self.site
        address = _address(transport.get_extra_info("peername"))
        trusted = site.is_trusted(address)
        peer = _source(address)
        if not site.admit(peer, trusted):
            transport.abort()  # type: ignore[attr-defined]
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        handler = site._runner.server
        assert handler is not None
        loop = asyncio.get_running_loop()
        app: Any = handler()
        if site.tls is None:
            site.add(app, _Connection(peer, trusted, loop.time(), transport.abort,  # type: ignore[attr-defined]
                                      handshaking=False, handler=app))
            transport.set_protocol(app)
            app.connection_made(transport)
            return
        waiter: asyncio.Future[None] = loop.create_future()
        tls = _SmallBufferTLS(loop, app, site.tls, waiter, server_side=True,
                              ssl_handshake_timeout=site.limits.handshake_timeout,  # type: ignore[arg-type]
                              ssl_shutdown_timeout=site.limits.handshake_timeout)
        connection = _Connection(peer, trusted, loop.time(), transport.abort,  # type: ignore[attr-defined]
                                 handler=app)
        site.add(app, connection)

        def shaken(done: asyncio.Future[None]) -> None:
            # (aborted while shaking hands, asyncio's TLS protocol ends the handshake with no exception, and never
            # hands the connection to aiohttp, which so never reports its end)
            if done.cancelled() or done.exception() is not None or app.transport is None:
                site.forget(app)
                TRIMMER.closed_one(loop)
            else:  # aiohttp's from now on: forgotten when it reports its end
                connection.handshaking = False

        waiter.add_done_callback(shaken)
        transport.set_protocol(tls)
        tls.connection_made(transport)


MAX_HEADERS = 32
"""Header fields a request may carry (aiohttp's default: 128). The API server's webhook client, Volcano's extender
client and Prometheus send about ten."""
MAX_HEADER_BYTES = 4096
"""The longest request line, and header name or value (aiohttp's default: 8,190). A service account token in an
``Authorization`` header is ~1 KiB."""


def handler_options(limits: ServerLimits) -> dict[str, Any]:
    """aiohttp handler options every cardquota server uses: the idle timeout, headers of the size its callers send
    (a request whose headers are still arriving is held until the idle timeout; with aiohttp's defaults, 300
    connections each sending 120 headers of 8,000 bytes took a server from 38 to 602 MiB resident, where these
    bounds refuse such headers with 400 as they arrive), :data:`READ_BUFFER_BYTES`, :data:`LINGER_SECONDS` for an
    unread body, no decoding of compressed bodies, no access log (each server logs what matters itself)."""
    return {"keepalive_timeout": limits.idle_timeout, "lingering_time": LINGER_SECONDS, "auto_decompress": False,
            "access_log": None, "read_bufsize": READ_BUFFER_BYTES,
            "max_headers": MAX_HEADERS, "max_field_size": MAX_HEADER_BYTES, "max_line_size": MAX_HEADER_BYTES}


async def start_server(app: web.Application, host: str, port: int, limits: ServerLimits,
                       ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    """Serve ``app`` on ``host:port`` within ``limits`` (TLS with ``ssl_context``); the caller stops it with
    ``await runner.cleanup()``."""
    TRIMMER.limit_arenas()
    runner = web.AppRunner(app, **handler_options(limits))
    await runner.setup()
    site = LimitedSite(runner, host, port, limits, ssl_context)
    server = runner.server
    if isinstance(server, web.Server):
        _count_closes(server, site)
    await site.start()
    return runner


def _count_closes(server: web.Server, site: LimitedSite) -> None:
    """Forget each connection when it ends, and count it towards the next ``malloc_trim``: every aiohttp handler
    reports its end to its server (the handlers have slots; their server's bookkeeping is the one place to hook)."""
    forget = server.connection_lost

    def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
        forget(handler, exc)
        site.forget(handler)
        TRIMMER.closed_one(asyncio.get_running_loop())

    server.connection_lost = connection_lost  # type: ignore[method-assign]


def body_guard(limit_for: Callable[[web.Request], int]) -> Middleware:
    """A middleware answering, before any of the body is read (the connection closed after the answer, so the rest
    is never read either):

    * 400 to a request whose body is encoded (``Content-Encoding`` other than ``identity``): neither the API server
      nor Volcano's extender client compresses what it sends, and inflating is work a caller could make unbounded
      (aiohttp decoded it on the event loop: 4.5 s of CPU for a 1 MiB deflate body);
    * 413 to one whose ``Content-Length`` is above ``limit_for(request)`` (a body of unknown length is held to it as
      it is read, by :func:`received_body`);

    and sending every answer within :data:`ANSWER_SECONDS` (the connection aborted after), a large one followed by a
    ``malloc_trim``.
    """

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        connection = _CONNECTIONS.get(request.protocol)
        if connection is not None:
            connection.answered_at = None
        response = _refused_unread(request, limit_for(request)) or await handler(request)
        try:
            async with asyncio.timeout(ANSWER_SECONDS):
                await response.prepare(request)
                await response.write_eof()
        except TimeoutError:
            STATS.count("refused", _port(request), "answer-not-read")
            if request.transport is not None:
                request.transport.abort()
        except ConnectionError:
            pass
        if connection is not None:  # what follows (the rest of an unread body drained) can be closed at the cap
            connection.answered_at = asyncio.get_running_loop().time()
        if isinstance(response, web.Response) and response.content_length is not None \
                and response.content_length > LARGE_ANSWER_BYTES:
            trim_soon()
        return response

    return guard


def _refused_unread(request: web.Request, limit: int) -> web.Response | None:
    """The answer refusing ``request`` from its headers alone (see :func:`body_guard`), or None."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        return refusal(request, 400, "encoded",
                       f"Content-Encoding {encoding[:32]!r} is not accepted: send the body uncompressed")
    if request.content_length is not None and request.content_length > limit:
        return refusal(request, 413, "too-large", f"the body ({request.content_length} bytes) is larger than "
                                                  f"{limit} bytes")
    return None


def _port(request: web.Request) -> str:
    sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
    return str(sockname[1]) if isinstance(sockname, tuple) and len(sockname) > 1 else "?"


class FairShares:
    """``general`` units (bytes, or slots) shared by the peers, at most ``peer_share`` of them held by any one
    untrusted peer (a peer holding none may always take what is free), and ``reserved`` more that only trusted
    peers take (trusted peers take any free unit). Taking waits up to a deadline. The asyncio
    primitives are made on first use (in the serving loop)."""

    def __init__(self, general: int, peer_share: int, reserved: int = 0) -> None:
        self.general, self.peer_share, self.reserved = general, peer_share, reserved
        self.untrusted = 0
        self.trusted = 0
        self.by_peer: Counter[str] = Counter()
        self._freed: asyncio.Event | None = None

    def fits(self, peer: str, trusted: bool, units: int) -> bool:
        if trusted:
            return self.untrusted + self.trusted + units <= self.general + self.reserved
        held = self.by_peer[peer]
        beyond_reserve = max(0, self.trusted - self.reserved)  # what trusted peers hold of the general part
        within_share = held == 0 or held + units <= self.peer_share
        return self.untrusted + beyond_reserve + units <= self.general and within_share

    def try_take(self, peer: str, trusted: bool, units: int) -> bool:
        if not self.fits(peer, trusted, units):
            return False
        if trusted:
            self.trusted += units
        else:
            self.untrusted += units
            self.by_peer[peer] += units
        return True

    async def take(self, peer: str, trusted: bool, units: int, seconds: float) -> bool:
        """Take ``units`` for ``peer``, waiting up to ``seconds`` for them to be free; False when they were not."""
        if self.try_take(peer, trusted, units):
            return True
        try:
            async with asyncio.timeout(seconds):
                while True:
                    if self._freed is None:
                        self._freed = asyncio.Event()
                    freed = self._freed
                    await freed.wait()
                    if self.try_take(peer, trusted, units):
                        return True
        except TimeoutError:
            return False

    def give(self, peer: str, trusted: bool, units: int) -> None:
        if not units:
            return
        if trusted:
            self.trusted -= units
        else:
            self.untrusted -= units
            self.by_peer[peer] -= units
            if self.by_peer[peer] <= 0:
                del self.by_peer[peer]
        if self._freed is not None:  # wake every waiter; those that still do not fit wait on a new event
            self._freed.set()
            self._freed = None

    @contextlib.asynccontextmanager
    async def held(self, request: web.Request, units: int = 1,
                   seconds: float | None = None) -> AsyncIterator[web.Response | None]:
        """``units`` for the ``with`` block, for ``request``'s peer: None once held, or a 503 answer (the connection
        closed after it) when they did not free within ``seconds`` (default :data:`BODY_SECONDS`)."""
        peer, trusted = peer_of(request)
        deadline = BODY_SECONDS if seconds is None else seconds
        if not await self.take(peer, trusted, units, deadline):
            yield refusal(request, 503, "busy", f"busy: no room for this request within {deadline:g} s; retry")
            return
        try:
            yield None
        finally:
            self.give(peer, trusted, units)


@dataclass
class BodyBudget:
    """The bytes of bodies a server holds at once (received, being read, or being judged), as :class:`FairShares`,
    and the most one body may have."""

    max_body: int
    shares: FairShares


@contextlib.asynccontextmanager
async def received_body(request: web.Request, budget: BodyBudget,
                        seconds: float | None = None) -> AsyncIterator[bytes | web.Response]:
    """``request``'s whole body for the ``with`` block, or the answer refusing it (the connection closed after it).
    Once its first bytes have arrived, its ``Content-Length`` (the most a body may have, when it has none) is taken
    from ``budget`` for the peer, until the block ends: a body never waits for room half-way, so bodies that would
    together pass a share cannot each hold part of it and wait for the rest. The refusals:

    * 408 when it does not arrive at :data:`MIN_BODY_RATE` after :data:`RATE_GRACE_SECONDS`, or not whole within
      ``RATE_GRACE_SECONDS + length / ROOM_RATE`` (:data:`ROOM_RATE`) or ``seconds`` (default
      :data:`BODY_SECONDS`), time spent waiting for the budget aside;
    * 413 when it passes ``budget.max_body`` (a body of unknown length);
    * 503 when the budget has no room for it within ``seconds``.

    A caller that sends headers and no body holds nothing shared; one that sends a little of a large body holds its
    room for about :data:`RATE_GRACE_SECONDS`, and one that keeps it must send it at :data:`ROOM_RATE`, within its
    peer's share.
    """
    connection = _CONNECTIONS.get(request.protocol)
    peer, trusted = peer_of(request)
    loop = asyncio.get_running_loop()
    began = loop.time()
    limit = BODY_SECONDS if seconds is None else seconds
    waited = 0.0
    chunks: list[bytes] = []
    received = reserved = 0
    refused: web.Response | None = None
    if connection is not None:
        connection.body_began, connection.received = began, 0
    try:
        while not request.content.at_eof():
            whole_due = RATE_GRACE_SECONDS + reserved / ROOM_RATE if reserved else limit
            elapsed_due = min(limit, whole_due, max(RATE_GRACE_SECONDS, received / MIN_BODY_RATE))
            try:
                async with asyncio.timeout_at(began + waited + elapsed_due):
                    chunk = await request.content.readany()
            except (ConnectionError, RuntimeError):  # closed by its caller, or to make room (aiohttp's StreamReader
                # raises RuntimeError when read after its connection is gone): no one to answer
                refused = _closing(400, "the connection was lost")
                break
            except TimeoutError:
                if elapsed_due >= limit:
                    why = f"the body did not arrive within {limit:g} s"
                elif elapsed_due >= whole_due:
                    why = (f"the body ({reserved} bytes) did not arrive whole within {whole_due:.3g} s "
                           f"({ROOM_RATE // 2**20} MiB/s after the first {RATE_GRACE_SECONDS:g} s)")
                else:
                    why = f"the body did not arrive at {MIN_BODY_RATE // 1024} KiB/s"
                refused = refusal(request, 408, "slow-body", why)
                break
            if not chunk:
                break
            if received + len(chunk) > budget.max_body:
                refused = refusal(request, 413, "too-large", f"the body is larger than {budget.max_body} bytes")
                break
            if not reserved:  # its first bytes: the whole body's room is taken now, or waited for
                units = request.content_length if request.content_length is not None else budget.max_body
                if not budget.shares.try_take(peer, trusted, units):
                    paused = loop.time()
                    room = await budget.shares.take(peer, trusted, units, limit)
                    waited += loop.time() - paused
                    if not room:
                        refused = refusal(request, 503, "busy",
                                          f"busy: no room for the body within {limit:g} s; retry")
                        break
                reserved = units
            chunks.append(chunk)
            received += len(chunk)
            if connection is not None:
                connection.received = received
        if connection is not None:
            connection.body_began = None
        if refused is not None:
            chunks.clear()
            yield refused
        else:
            body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            chunks.clear()
            yield body
            del body
    finally:
        if connection is not None:
            connection.body_began = None
        budget.shares.give(peer, trusted, reserved)
        if reserved > TRIM_BODY_BYTES:
            trim_soon()


def refusal(request: web.Request, status: int, reason: str, message: str) -> web.Response:
    """An answer refusing ``request`` (the connection closed after it), counted by ``reason``."""
    STATS.count("refused", _port(request), reason)
    return _closing(status, message)


def _closing(status: int, message: str) -> web.Response:
    response = web.json_response({"error": message}, status=status)
    response.force_close()
    return response
