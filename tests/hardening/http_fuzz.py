"""Hostile HTTP requests, generated from a seed: what anyone who reaches the port can send.

Each request is written on a fresh connection as raw bytes (a client library would
refuse most of them), its answer read for a moment, and the connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random

PATHS = (b"/metrics", b"/", b"/api/health", b"/-/healthy", b"/nothing", b"/metrics?x=%zz",
         b"/%2e%2e/%2e%2e/etc/passwd", b"//metrics", b"/metrics#frag", b"*")
METHODS = (b"GET", b"POST", b"HEAD", b"PUT", b"DELETE", b"OPTIONS", b"PATCH", b"CONNECT",
           b"TRACE", b"BREW", b"get", b"G\x00T", b"GET GET")
VERSIONS = (b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/9.9", b"HTTP/1.1 extra", b"HTTP/",
            b"", b"http/1.1", b"HTTP/1.1\x7f")
HEADERS = (
    b"Host: 127.0.0.1", b"Host:", b"Content-Length: 5", b"Content-Length: -1",
    b"Content-Length: abc", b"Content-Length: 99999999999999999999", b"Content-Length: 1, 2",
    b"Transfer-Encoding: chunked", b"Transfer-Encoding: gzip, chunked",
    b"Transfer-Encoding: bogus", b"no colon here", b": empty name", b"X-\x01: control",
    b"X-Folded: a\r\n folded", b"Authorization: Basic !!!", b"Authorization: Basic dTpw",
    b"Accept-Encoding: gzip", b"Connection: keep-alive", b"Connection: close",
    b"Upgrade: websocket", b"Expect: 100-continue", b"X-\xff\xfe: latin-1",
)


def request(rng: random.Random) -> bytes:
    """One request: garbage, or HTTP with one or more parts broken."""
    if rng.random() < 0.1:
        return rng.randbytes(rng.randint(1, 300))
    path = rng.choice(PATHS)
    if rng.random() < 0.2:
        path = b"/" + rng.randbytes(rng.randint(1, 60)).replace(b"\r\n", b"")
    if rng.random() < 0.05:
        path = b"/" + b"a" * rng.choice((9000, 20000))
    line = b" ".join(part for part in (rng.choice(METHODS), path, rng.choice(VERSIONS)) if part)
    headers = rng.sample(HEADERS, rng.randint(0, 5))
    if rng.random() < 0.05:
        headers.append(b"X-Long: " + b"b" * rng.choice((9000, 20000)))
    body = rng.randbytes(rng.randint(0, 40)) if rng.random() < 0.3 else b""
    eol = b"\n" if rng.random() < 0.1 else b"\r\n"
    return eol.join([line, *headers, b"", body])


async def send(host: str, port: int, payload: bytes, wait_seconds: float) -> None:
    with contextlib.suppress(OSError, TimeoutError):
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
        try:
            writer.write(payload)
            await writer.drain()
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(reader.read(65536), wait_seconds)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def fuzz(host: str, port: int, count: int, seed: int = 22, concurrency: int = 20,
               wait_seconds: float = 0.5) -> None:
    """`count` hostile requests, `concurrency` at a time."""
    rng = random.Random(seed)
    payloads = [request(rng) for _ in range(count)]
    queue = iter(payloads)

    async def worker() -> None:
        for payload in queue:
            await send(host, port, payload, wait_seconds)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
