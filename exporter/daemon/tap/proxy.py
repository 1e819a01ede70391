"""The tap's reverse proxy: agents talk to it as they would to the engine.

Requests go upstream as they came (method, path, query, headers but the hop-by-hop
ones, body streamed); responses come back byte for byte as they arrive, each chunk
written before the next is read, so a slow client slows the engine's stream and
a slow engine is never waited on whole. Only generation requests are counted and
only their `text/event-stream` responses timed (TapState); the rest just pass.

A client that goes away cancels its handler at once (aiohttp's handler_cancellation),
which closes the upstream connection, and the engine aborts the generation (SGLang
registers an abort task on its StreamingResponse: http_server.py `serve_generate_request`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from exporter.daemon.tap.asks import StreamAsk
from exporter.daemon.tap.state import Flight, LiveStream, TapState
from exporter.process.log_limits import Conditions

log = logging.getLogger(__name__)

# RFC 9110 §7.6.1: meaningful for one connection only, never forwarded. Host is set
# by the client session to the upstream's own, as a reverse proxy does.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
                        "proxy-authorization", "te", "trailer", "transfer-encoding",
                        "upgrade", "host"})
# Reading the client's body and the engine's stream in pieces keeps memory per
# stream bounded however long either is.
READ_CHUNK_BYTES = 64 * 1024
SSE = "text/event-stream"


def forwarded_headers(headers: CIMultiDictProxy[str] | CIMultiDict[str]) -> CIMultiDict[str]:
    """The headers without the hop-by-hop ones, and without those `Connection` names."""
    named = {token.strip().lower() for value in headers.getall("Connection", ())
             for token in value.split(",")}
    return CIMultiDict((k, v) for k, v in headers.items()
                       if k.lower() not in HOP_BY_HOP and k.lower() not in named)


class TapProxy:
    def __init__(self, upstream_url: str, state: TapState,
                 connect_timeout_seconds: float = 10.0) -> None:
        self.upstream_url = upstream_url.rstrip("/")
        self.state = state
        self.connect_timeout_seconds = connect_timeout_seconds
        self.session: aiohttp.ClientSession | None = None
        # One line per change, not per agent request, while the engine is down.
        self._conditions = Conditions(log)
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def idle(self) -> None:
        """Until no request is in flight (a tap draining after a reload waits on it)."""
        await self._idle.wait()

    async def start(self) -> None:
        # No read or total timeout: a stream may legitimately stall 47 s (docs/facts/rig.md),
        # and the tap is there to time it, not to cut it. No decompression: bytes pass
        # unchanged. No cookie jar: cookies are the client's, forwarded as headers.
        self.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_seconds),
            auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
            read_bufsize=READ_CHUNK_BYTES)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=0)  # the body is streamed, never held
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None, "TapProxy.start() first"
        self._in_flight += 1
        self._idle.clear()
        try:
            return await self._forward(request, self.session)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def _forward(self, request: web.Request,
                       session: aiohttp.ClientSession) -> web.StreamResponse:
        # encoded=True: the path and query go on exactly as the client wrote them.
        url = URL(self.upstream_url + request.rel_url.raw_path_qs, encoded=True)
        ask = StreamAsk.of(request.method, request.path, self.state.book.wants_user)
        sent_at = self.state.clock()
        flight = (None if ask is None else
                  self.state.begin(sent_at, ask, request.headers, request.remote))
        try:
            return await self._request(request, session, url, ask, flight, sent_at)
        finally:
            if flight is not None:
                self.state.end(flight)

    async def _request(self, request: web.Request, session: aiohttp.ClientSession, url: URL,
                       ask: StreamAsk | None, flight: Flight | None,
                       sent_at: float) -> web.StreamResponse:
        if flight is not None and not request.body_exists:
            self.state.named(flight)
        body = _body(request, ask, flight, self.state) if request.body_exists else None
        try:
            upstream = await session.request(
                request.method, url, headers=forwarded_headers(request.headers), data=body,
                allow_redirects=False, skip_auto_headers=("Accept-Encoding", "User-Agent",
                                                          "Content-Type"))
        except asyncio.CancelledError:
            if ask is not None and ask.streaming:
                self.state.count("client_closed", flight)  # it left before the headers came
            raise
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())
            self._conditions.failed(f"tap upstream {self.upstream_url}",
                                    f"{request.method} {url.path}: {reason}",
                                    kind=type(exc).__name__)
            if ask is not None:
                if not ask.decided and request.body_exists:
                    # The engine never took the body: read it here for its flag.
                    async for chunk in request.content.iter_chunked(READ_CHUNK_BYTES):
                        ask.feed(chunk)
                if ask.streaming:
                    self.state.count("error", flight)
            return web.Response(status=502, text=f"tap: upstream {self.upstream_url} "
                                                 f"failed: {reason}\n")
        self._conditions.ok(f"tap upstream {self.upstream_url}")
        async with upstream:
            return await self._relay(request, upstream, sent_at, ask, flight)

    def _counted_as(self, upstream: aiohttp.ClientResponse,
                    ask: StreamAsk | None) -> str | None:
        """How a generation response counts if it ends cleanly: `ok` for a stream to
        time, `error` or `untimed`; None for what is no stream (a non-streamed answer)."""
        if ask is None:
            return None
        sse = upstream.content_type == SSE
        if upstream.status >= 400:
            return "error" if sse or ask.streaming else None
        encoding = upstream.headers.get("Content-Encoding", "identity").lower()
        if sse and encoding != "identity":
            self.state.untimed(f"encoding {encoding}", f"Content-Encoding: {encoding}")
            return "untimed"
        if sse:
            return "ok"
        if ask.streaming:
            self.state.untimed(f"type {upstream.content_type}",
                               f"Content-Type: {upstream.content_type}")
            return "untimed"
        return None

    async def _relay(self, request: web.Request, upstream: aiohttp.ClientResponse,
                     sent_at: float, ask: StreamAsk | None,
                     flight: Flight | None) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                      headers=forwarded_headers(upstream.headers))
        counted = self._counted_as(upstream, ask)
        stream: LiveStream | None = (self.state.open(sent_at, flight) if counted == "ok"
                                     else None)
        outcome = "error"
        try:
            await response.prepare(request)
            # All the bytes that have arrived, written in one go; aiohttp stops reading
            # the socket while twice READ_CHUNK_BYTES wait unread (backpressure).
            while chunk := await upstream.content.readany():
                if stream is not None:
                    self.state.chunk(stream, chunk)
                await response.write(chunk)
            await response.write_eof()
            self._conditions.ok(f"tap upstream {self.upstream_url} mid-response")
            outcome = counted or "ok"
        except (asyncio.CancelledError, ConnectionResetError):
            outcome = "client_closed"  # the client went away: leaving closes the upstream
            raise
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            self._conditions.failed(f"tap upstream {self.upstream_url} mid-response",
                                    f"{request.method} {request.rel_url.path}: broke "
                                    f"mid-response: {type(exc).__name__}: {exc}",
                                    kind=type(exc).__name__)
            # Headers are out: the one honest signal left is to cut the client's
            # connection too, so it sees a truncated response, not a clean end.
            if request.transport is not None:
                request.transport.abort()
        finally:
            if stream is not None:
                self.state.close(stream, outcome)
            elif counted is not None:
                self.state.count(outcome, flight)
        return response


async def _body(request: web.Request, ask: StreamAsk | None, flight: Flight | None,
                state: TapState) -> AsyncIterator[bytes]:
    async for chunk in request.content.iter_chunked(READ_CHUNK_BYTES):
        if ask is not None:
            ask.feed(chunk)
        yield chunk
    if flight is not None:
        state.named(flight)  # the whole body is the engine's: its prefill can start
