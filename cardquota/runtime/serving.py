"""Every port cardquota listens on (the admission server's HTTPS, the metrics and health HTTP, the extender's HTTP)
is started here, with the same bounds on what a caller can hold: :class:`ServerLimits`.

* **Connections**: at most ``max_connections`` at once, TLS handshakes in progress included, so memory held by
  connections is bounded by the cap, whoever opens them. At the cap, the connection that has waited longest
  without a request in progress (a TLS handshake, or a connection between requests) is closed to make room for the
  new one — so a caller holding idle or half-open connections cannot keep the API server out; only when every
  connection is in a request is the new one closed as soon as it is accepted (the caller sees a reset, and
  retries).
* **Handshake**: a TLS handshake not done within ``handshake_timeout`` seconds is dropped (asyncio's default is
  60 s: a connection that never sends its ClientHello held a slot and a buffer that long); so is a TLS close whose
  peer does not answer in that time (asyncio's default: 30 s).
* **Idle**: a connection without a request for ``idle_timeout`` seconds is closed (aiohttp's default keep-alive is
  3,630 s). The API server's and the scheduler's HTTP clients open a new one when they need it.
* **Headers** of the size the callers send (:data:`MAX_HEADERS` fields of up to :data:`MAX_HEADER_BYTES`); more is
  refused with 400 as it arrives.
* **Bodies** have :data:`BODY_SECONDS` to arrive once the headers are in (:func:`read_body`: 408 after; the idle
  timeout covers only the wait for headers), and large ones are read a few at a time (:class:`LargeBodies`).
* **Bodies are never inflated**: the parser does not decode ``Content-Encoding`` (aiohttp's ``auto_decompress``
  would inflate a 1 MiB deflate body on the event loop for seconds); the apps refuse such requests with 400
  (:func:`body_guard`).

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
has it (glibc), and after a large body was decoded (:func:`trim_soon`); and the policy threads share the main
thread's arenas (:data:`MALLOC_ARENAS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import ssl
from asyncio import sslproto
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from cardquota.runtime.limits import ServerLimits

__all__ = ["BODY_SECONDS", "LargeBodies", "ServerLimits", "body_guard", "read_body", "start_server", "trim_soon"]
log = logging.getLogger("cardquota.serving")
TLS_READ_BYTES = 32 * 2**10
"""Receive buffer of each TLS connection (asyncio's default: 256 KiB). A TLS record is at most 16 KiB of payload."""
BODY_SECONDS = 10.0
"""Seconds a request's body may take to arrive once its headers are in (answered 408 after, by :func:`read_body`):
the API server and Volcano's extender client send a body in one write, so only a caller trickling it, or declaring
a length and sending nothing, takes longer; without a deadline each such connection held a slot of the connection
cap for as long as it stayed open (the idle timeout covers only the wait for a request's headers)."""
LINGER_SECONDS = 2.0
"""Seconds the rest of an unread body is read and dropped after an answer that did not read it (a refusal, or a
verb that needs no body), before the connection closes (aiohttp's default: 10 s). Closing at once would reset a
connection whose sender is still writing, which can lose the answer; the API server and the scheduler send their
body in one write, so what is left arrives within milliseconds, and a caller trickling one holds its connection,
busy and so beyond the cap's reach, for this long instead of ten seconds."""
CAP_LOG_SECONDS = 60.0
"""At most one warning a minute that a port's connection cap is reached."""
TRIM_AFTER_CLOSED = 256
"""Connections closed between two ``malloc_trim`` calls."""
M_ARENA_MAX = -8
"""glibc's ``mallopt`` parameter for the number of arenas (malloc.h)."""
MALLOC_ARENAS = 2
"""At most this many glibc arenas: by default glibc gives threads arenas of their own (up to 8 per core), and a
large review decoded on a policy thread left its memory in that thread's arena — four maximal reviews left the
server 35 MiB above where it started, 10 MiB with two arenas (the same as ``MALLOC_ARENA_MAX=2``)."""


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


class LimitedSite(web.TCPSite):
    """A TCP site whose connections are bounded by :class:`ServerLimits`; TLS when given a context (a certificate
    reloaded by :class:`cardquota.runtime.tls.ReloadableContext` reaches new handshakes through that context's
    servername callback)."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, limits: ServerLimits,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        super().__init__(runner, host, port)
        self.limits = limits
        self.tls = ssl_context
        self.handshaking: dict[asyncio.Future[None], tuple[float, asyncio.BaseTransport]] = {}
        """Connections shaking hands: when each began, and its transport (oldest first)."""
        self.refused = 0
        self.last_warning = float("-inf")

    @property
    def name(self) -> str:
        return f"{'https' if self.tls is not None else 'http'}://{self._host}:{self._port}"

    def open_connections(self) -> int:
        server = self._runner.server
        return len(self.handshaking) + (len(server.connections) if isinstance(server, web.Server) else 0)

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._protocol, self._host, self._port,
                                                reuse_address=self._reuse_address, reuse_port=self._reuse_port)

    async def stop(self) -> None:
        for _, transport in list(self.handshaking.values()):
            transport.abort()  # type: ignore[attr-defined]
        await super().stop()

    def _make_room(self) -> bool:
        """Close the connection that has waited longest without a request in progress: a TLS handshake (since it
        began) or a connection waiting for its next request (since its last answer, or since it opened); False when
        every connection is in a request."""
        oldest: tuple[float, Callable[[], None]] | None = None
        for waiter, (began, transport) in self.handshaking.items():  # oldest first
            def abort(waiter: asyncio.Future[None] = waiter, transport: Any = transport) -> None:
                del self.handshaking[waiter]  # (counted no more: its end is reported a turn later)
                transport.abort()

            oldest = (began, abort)
            break
        server = self._runner.server
        for handler in server.connections if isinstance(server, web.Server) else ():
            waiting = getattr(handler, "_waiter", None)  # aiohttp's handler, awaiting the next request's headers
            if waiting is None or waiting.done():
                continue
            since = handler._next_keepalive_close_time - handler.keepalive_timeout
            if oldest is None or since < oldest[0]:
                oldest = (since, handler.force_close)
        if oldest is None:
            return False
        oldest[1]()
        return True

    def _protocol(self) -> asyncio.Protocol:
        if self.open_connections() >= self.limits.max_connections and not self._make_room():
            self.refused += 1
            now = asyncio.get_running_loop().time()
            if now - self.last_warning >= CAP_LOG_SECONDS:
                self.last_warning = now
                log.warning("%s: %d connections open, the cap (--max-connections); new ones are closed (%d so far)",
                            self.name, self.limits.max_connections, self.refused)
            return _Refused()
        return _Admitted(self)


class _Admitted(asyncio.Protocol):
    """The first protocol of an accepted connection: hands it to aiohttp's handler, through TLS when the site has
    a context, and counts it while it shakes hands."""

    def __init__(self, site: LimitedSite) -> None:
        self.site = site

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        site = self.site
        handler = site._runner.server
        assert handler is not None
        loop = asyncio.get_running_loop()
        app: Any = handler()
        if site.tls is None:
            transport.set_protocol(app)
            app.connection_made(transport)
            return
        waiter: asyncio.Future[None] = loop.create_future()
        tls = _SmallBufferTLS(loop, app, site.tls, waiter, server_side=True,
                              ssl_handshake_timeout=site.limits.handshake_timeout,  # type: ignore[arg-type]
                              ssl_shutdown_timeout=site.limits.handshake_timeout)
        site.handshaking[waiter] = (loop.time(), transport)

        def shaken(done: asyncio.Future[None]) -> None:
            site.handshaking.pop(done, None)
            if done.cancelled() or done.exception() is not None:
                TRIMMER.closed_one(loop)

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
    bounds refuse such headers with 400 as they arrive), :data:`LINGER_SECONDS` for an unread body, no decoding of
    compressed bodies, no access log (each server logs what matters itself)."""
    return {"keepalive_timeout": limits.idle_timeout, "lingering_time": LINGER_SECONDS, "auto_decompress": False,
            "access_log": None,
            "max_headers": MAX_HEADERS, "max_field_size": MAX_HEADER_BYTES, "max_line_size": MAX_HEADER_BYTES}


async def start_server(app: web.Application, host: str, port: int, limits: ServerLimits,
                       ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    """Serve ``app`` on ``host:port`` within ``limits`` (TLS with ``ssl_context``); the caller stops it with
    ``await runner.cleanup()``."""
    TRIMMER.limit_arenas()
    runner = web.AppRunner(app, **handler_options(limits))
    await runner.setup()
    server = runner.server
    if isinstance(server, web.Server):
        _count_closes(server)
    await LimitedSite(runner, host, port, limits, ssl_context).start()
    return runner


def _count_closes(server: web.Server) -> None:
    """Count each connection's end towards the next ``malloc_trim``: every aiohttp handler reports it to its
    server (the handlers have slots; their server's bookkeeping is the one place to hook)."""
    forget = server.connection_lost

    def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
        forget(handler, exc)
        TRIMMER.closed_one(asyncio.get_running_loop())

    server.connection_lost = connection_lost  # type: ignore[method-assign]


def body_guard(limit_for: Callable[[web.Request], int]) -> Middleware:
    """A middleware answering, before any of the body is read (the connection closed after the answer, so the rest
    is never read either):

    * 400 to a request whose body is encoded (``Content-Encoding`` other than ``identity``): neither the API server
      nor Volcano's extender client compresses what it sends, and inflating is work a caller could make unbounded
      (aiohttp decoded it on the event loop: 4.5 s of CPU for a 1 MiB deflate body);
    * 413 to one whose ``Content-Length`` is above ``limit_for(request)`` (a chunked body is held to the app's
      ``client_max_size`` as it is read).
    """

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            return _closing(400, f"Content-Encoding {encoding[:32]!r} is not accepted: send the body uncompressed")
        limit = limit_for(request)
        if request.content_length is not None and request.content_length > limit:
            return _closing(413, f"the body ({request.content_length} bytes) is larger than {limit} bytes")
        return await handler(request)

    return guard


async def read_body(request: web.Request, seconds: float | None = None) -> bytes | web.Response:
    """``request``'s whole body, or a 408 answer (the connection closed after it) when it has not all arrived
    within ``seconds`` (default :data:`BODY_SECONDS`). A body above the app's ``client_max_size`` raises aiohttp's
    ``HTTPRequestEntityTooLarge``."""
    if request.content.is_eof():  # all in already (a review arrives with its headers): nothing to wait for
        return await request.read()
    deadline = BODY_SECONDS if seconds is None else seconds
    try:
        async with asyncio.timeout(deadline):
            return await request.read()
    except TimeoutError:
        return _closing(408, f"the body did not arrive within {deadline:g} s")


class LargeBodies:
    """Bodies above ``small`` bytes (by their ``Content-Length``), or of unknown length, handled at most ``at_once``
    at a time; the others wait, unread (their bytes stay in the sockets' buffers). What small bodies hold is bounded
    by the connection cap; without this, callers sending bodies as large as the limit on many connections at once
    held that many of them in memory. The asyncio primitive is made on first use (in the serving loop)."""

    def __init__(self, small: int, at_once: int) -> None:
        self.small, self.at_once = small, at_once
        self._slots: asyncio.Semaphore | None = None

    def is_large(self, request: web.Request) -> bool:
        return request.content_length is None or request.content_length > self.small

    @contextlib.asynccontextmanager
    async def held(self, request: web.Request, seconds: float | None = None) -> AsyncIterator[web.Response | None]:
        """A slot for the ``with`` block when ``request``'s body is large (nothing to wait for when it is small):
        None once held, or a 503 answer (the connection closed after it) when none freed within ``seconds``
        (default :data:`BODY_SECONDS`) — a wait without end would let callers declaring large bodies and sending
        nothing queue up behind a few slow ones and hold every connection of the cap."""
        if not self.is_large(request):
            yield None
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.at_once)
        deadline = BODY_SECONDS if seconds is None else seconds
        try:
            async with asyncio.timeout(deadline):
                await self._slots.acquire()
        except TimeoutError:
            yield _closing(503, f"busy: no room for a large body within {deadline:g} s; retry")
            return
        try:
            yield None
        finally:
            self._slots.release()


def _closing(status: int, message: str) -> web.Response:
    response = web.json_response({"error": message}, status=status)
    response.force_close()
    return response
