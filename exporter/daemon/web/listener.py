"""The HTTP listener: it accepts connections and bounds what each one may cost.

aiohttp serves every request; this module decides which connections it gets, and for
how long (docs/configuration.md#connections):

- at most `limit` connections at once: --web.max-connections, lowered to fit the
  open-file limit with descriptors kept for the sources (exporter/process/open_files.py);
- a connection must deliver its first request head within HEAD_DEADLINE_SECONDS of
  being accepted, a TLS handshake included;
- a kept-alive connection with no request in flight closes after IDLE_SECONDS (also
  aiohttp's keepalive_timeout; the listener's own timer covers a response that a
  client never reads);
- at the limit, a new connection closes the oldest one that has not sent a request
  yet, else the oldest idle one (idle for a second at least); when none of them can
  go, new ones wait in the kernel's backlog, which costs no descriptor.

It runs its own accept loop so that a connection counts from the moment it is
accepted: aiohttp's TCPSite (asyncio's create_server) shows a TLS connection to the
server only once its handshake is done, and one whose handshake never finishes would
hold a descriptor unseen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import cast

from aiohttp import web

log = logging.getLogger(__name__)

# Prometheus and rigctl send a request head in one packet, within milliseconds of
# connecting; five seconds leave room for a TLS handshake over a slow link.
HEAD_DEADLINE_SECONDS = 5.0
# Longer than any sensible scrape interval (Prometheus keeps its connection between
# scrapes; it reconnects, and retries the scrape, if the exporter closed it first).
IDLE_SECONDS = 90.0
BACKLOG = 128
# After an accept fails for lack of descriptors (another part of the process took
# them), wait this long rather than spin.
ACCEPT_RETRY_SECONDS = 0.1
# An idle connection is shed for a new one only after this long: a response that was
# just written is still on its way, a scraper between two scrapes is idle far longer.
SHED_IDLE_AFTER_SECONDS = 1.0
# The limit's and accept's warnings come at most this often, whatever the flood.
LIMIT_LOG_INTERVAL_SECONDS = 60.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Connection:
    """One accepted connection's state; it is `closed` once its slot is given back.
    `client` is the accepted socket until the event loop takes it over."""

    __slots__ = ("client", "transport", "handshake", "timer", "idle_since", "closed")

    def __init__(self, client: socket.socket) -> None:
        self.client: socket.socket | None = client
        self.transport: asyncio.Transport | None = None
        self.handshake: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.idle_since = 0.0
        self.closed = False


class Listener:
    """Accepts on HOST:PORT and hands each connection to aiohttp's protocol."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None, limit: int) -> None:
        self.host, self.port, self.tls, self.limit = host, port, tls, limit
        self._factory: Callable[[], asyncio.Protocol] | None = None
        self._sockets: list[socket.socket] = []
        self._accepting: list[asyncio.Task[None]] = []
        self.open = 0
        # Evictable connections, oldest first: no request yet, and idle kept-alive.
        self._waiting: OrderedDict[_Connection, None] = OrderedDict()
        self._idle: OrderedDict[_Connection, None] = OrderedDict()
        self._by_transport: dict[asyncio.BaseTransport, _Connection] = {}
        self._room = asyncio.Event()
        self._shed_count = 0
        self._shed_logged = self._accept_error_logged = -LIMIT_LOG_INTERVAL_SECONDS

    async def start(self, protocol_factory: Callable[[], asyncio.Protocol]) -> None:
        """Bind (OSError if the address cannot be had) and start accepting."""
        self._factory = protocol_factory
        self._sockets = _bind(self.host, self.port)
        self._accepting = [asyncio.create_task(self._accept(s), name="web accept")
                           for s in self._sockets]

    async def close(self) -> None:
        """Stop accepting and drop the handshakes in progress; aiohttp's runner
        closes the connections it serves."""
        for task in self._accepting:
            task.cancel()
        await asyncio.gather(*self._accepting, return_exceptions=True)
        for sock in self._sockets:
            sock.close()
        for conn in list(self._waiting):
            if conn.transport is None:
                self._close(conn)

    def middleware(self) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
        """Marks a connection busy while the app handles its request."""

        @web.middleware
        async def track(request: web.Request, handler: Handler) -> web.StreamResponse:
            conn = self._by_transport.get(request.transport) if request.transport else None
            if conn is None:
                return await handler(request)
            self._busy(conn)
            try:
                return await handler(request)
            finally:
                self._rest(conn)

        return track

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # Every connection busy: new ones wait in the backlog, at no descriptor.
            await self._room_for_one()
            try:
                client, _ = await loop.sock_accept(listening)
            except OSError as exc:  # EMFILE, ENFILE, ENOBUFS
                now = time.monotonic()
                if now - self._accept_error_logged >= LIMIT_LOG_INTERVAL_SECONDS:
                    log.warning("web: cannot accept a connection: %s", exc)
                    self._accept_error_logged = now
                await asyncio.sleep(ACCEPT_RETRY_SECONDS)
                continue
            # Every connection may have taken a request meanwhile: this one waits too,
            # accepted (one descriptor per listening socket at most) rather than reset.
            await self._room_for_one()
            if self.open >= self.limit:
                self._shed(self._victim())
            self._admit(client)
            # sock_accept returns without yielding while the backlog holds more.
            await asyncio.sleep(0)

    def _admit(self, client: socket.socket) -> None:
        client.setblocking(False)
        conn = _Connection(client)
        self.open += 1
        self._waiting[conn] = None
        loop = asyncio.get_running_loop()
        conn.timer = loop.call_later(HEAD_DEADLINE_SECONDS, self._close, conn)
        conn.handshake = asyncio.create_task(self._connect(conn))

    async def _connect(self, conn: _Connection) -> None:
        assert self._factory is not None and conn.client is not None
        factory = self._factory
        client, conn.client = conn.client, None  # the event loop's from here on
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(
                lambda: _Tracked(self, conn, factory()), client, ssl=self.tls,
                ssl_handshake_timeout=HEAD_DEADLINE_SECONDS if self.tls else None)
        except asyncio.CancelledError:
            pass  # closed by the listener during its handshake: its slot is free already
        except OSError as exc:  # a failed TLS handshake, a peer gone before it started
            log.debug("web: connection dropped before its first request: %s", exc)
        else:
            return
        finally:
            conn.handshake = None
        client.close()
        self._release(conn)

    def _started(self, conn: _Connection, transport: asyncio.BaseTransport) -> None:
        conn.transport = cast(asyncio.Transport, transport)  # a stream: TCP, or TLS over it
        if conn.closed:  # its deadline passed as the handshake completed
            transport.abort()
        else:
            self._by_transport[transport] = conn

    def _busy(self, conn: _Connection) -> None:
        self._waiting.pop(conn, None)
        self._idle.pop(conn, None)
        if conn.timer is not None:
            conn.timer.cancel()
            conn.timer = None

    def _rest(self, conn: _Connection) -> None:
        if conn.closed:
            return
        self._idle[conn] = None
        conn.idle_since = time.monotonic()
        conn.timer = asyncio.get_running_loop().call_later(IDLE_SECONDS, self._close, conn)

    async def _room_for_one(self) -> None:
        """Until a slot is free, or a connection can be shed for a new one."""
        while self.open >= self.limit and self._victim() is None:
            self._room.clear()
            # An idle connection may grow old enough to shed before any slot frees.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SHED_IDLE_AFTER_SECONDS):
                    await self._room.wait()

    def _victim(self) -> _Connection | None:
        """The oldest connection that has sent no request, else the oldest idle one."""
        if self._waiting:
            return next(iter(self._waiting))
        if self._idle:
            conn = next(iter(self._idle))
            if time.monotonic() - conn.idle_since >= SHED_IDLE_AFTER_SECONDS:
                return conn
        return None

    def _shed(self, conn: _Connection | None) -> None:
        assert conn is not None
        self._close(conn)
        self._shed_count += 1
        now = time.monotonic()
        if now - self._shed_logged >= LIMIT_LOG_INTERVAL_SECONDS:
            log.warning("web: at the limit of %d connections: %d closed for newer ones since "
                        "the last report (the oldest without a request in flight go first)",
                        self.limit, self._shed_count)
            self._shed_count, self._shed_logged = 0, now

    def _close(self, conn: _Connection) -> None:
        """Close a connection now, whatever it was doing, and free its slot."""
        if conn.closed:
            return
        transport = conn.transport
        if transport is not None:
            # close() sends what is queued, then FIN, but it would wait on a client that
            # never reads, and TLS's close_notify on one that never answers.
            if self.tls is None and not transport.get_write_buffer_size():
                transport.close()
            else:
                transport.abort()
        elif conn.handshake is not None:
            conn.handshake.cancel()
            if conn.client is not None:  # the handshake has not even started
                conn.client.close()
        self._release(conn)

    def _release(self, conn: _Connection) -> None:
        if conn.closed:
            return
        conn.closed = True
        self.open -= 1
        self._waiting.pop(conn, None)
        self._idle.pop(conn, None)
        if conn.transport is not None:
            self._by_transport.pop(conn.transport, None)
        if conn.timer is not None:
            conn.timer.cancel()
        self._room.set()


class _Tracked(asyncio.Protocol):
    """aiohttp's protocol for one connection; the listener hears when it starts and ends."""

    def __init__(self, listener: Listener, conn: _Connection, inner: asyncio.Protocol) -> None:
        self._listener, self._conn, self._inner = listener, conn, inner

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._listener._started(self._conn, transport)
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._inner.connection_lost(exc)
        self._listener._release(self._conn)


def _bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for HOST:PORT as asyncio's create_server makes them: one per
    address the host resolves to ("" : every interface), IPv6 ones IPv6-only, an
    address family the machine lacks skipped."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # no IPv6 in this kernel
                continue
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise OSError(f"no address to listen on for {host!r}")
    return sockets
