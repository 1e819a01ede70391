"""GET a text body from an engine, refusing what would hurt the exporter.

A 50 MB body, a body cut short, a non-UTF-8 body and an HTTP error all become one
SourceError whose message says which it was; nothing here can raise anything else.
"""

from __future__ import annotations

import aiohttp

from exporter.daemon.snapshot import SourceError

# A 3,000-line exposition is about 400 kB (the 1,121-line fixture is 149 kB); 8 MiB
# leaves room for any real engine and stops a runaway body early.
MAX_BODY_BYTES = 8 * 1024 * 1024
_CHUNK_BYTES = 256 * 1024


async def get_text(session: aiohttp.ClientSession, url: str,
                   max_bytes: int = MAX_BODY_BYTES) -> str:
    """The body of `GET url`, decoded strictly as UTF-8."""
    body = bytearray()
    try:
        async with session.get(url) as response:
            if response.status != 200:
                head = await response.content.read(200)
                raise SourceError(f"GET {url}: HTTP {response.status} "
                                  f"{head.decode('utf-8', 'replace')!r}")
            length = response.content_length
            if length is not None and length > max_bytes:
                raise SourceError(f"GET {url}: body of {length} bytes is over the "
                                  f"{max_bytes}-byte limit")
            async for chunk in response.content.iter_chunked(_CHUNK_BYTES):
                body += chunk
                if len(body) > max_bytes:
                    raise SourceError(f"GET {url}: body is over the {max_bytes}-byte limit")
    except aiohttp.ClientPayloadError as exc:
        raise SourceError(f"GET {url}: body cut short ({exc})") from exc
    except aiohttp.ClientError as exc:
        raise SourceError(f"GET {url}: {type(exc).__name__}: {exc}") from exc
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"GET {url}: body is not UTF-8 (byte {exc.start}: "
                          f"{bytes(body[exc.start:exc.start + 8])!r})") from exc
