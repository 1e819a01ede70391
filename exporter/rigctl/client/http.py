"""What rigctl accepts from a server: JSON (or an exporter's /metrics text) fetched
within one deadline, and the shapes it reads checked before anything prints them.

An exporter that is half-broken, a proxy in front of it, or a stranger on its
port can answer anything: a body dribbled a byte at a time, bytes that are not
HTTP, `null`, NaN, a list nested a million deep. Each becomes `BadAnswer`, one
line naming the URL and what was wrong, which the commands turn into exit 3
(unknown), never a traceback.

Every request is aiohttp's, under `ClientTimeout(total=...)`: one deadline for the
whole answer, connecting and a body sent a byte a second included.
`get_json` runs it on an event loop of its own through exporter/process/ctrl_c.py,
so Ctrl-C cancels it between callbacks; the async ones (`read_json`, `read_text`)
serve a command already on a loop (the doctor's watch, the demo).
"""

from __future__ import annotations

import json
import os
import socket
import ssl
from dataclasses import dataclass
from typing import Any

import aiohttp

from exporter.process.ctrl_c import run_interruptible

#: The most of an answer rigctl reads; a health report of a large rig is ~20 KiB.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class Access:
    """How to reach an exporter behind `--web.config.file`: basic auth and a CA to trust."""

    user: str | None = None
    password: str = ""
    ca_file: str | None = None

    def headers(self) -> dict[str, str]:
        """The request's credentials (never logged, never in an error)."""
        if self.user is None:
            return {}
        return {"Authorization": aiohttp.BasicAuth(self.user, self.password).encode()}

    def tls(self) -> ssl.SSLContext | None:
        if self.ca_file is None:
            return None
        context = ssl.create_default_context(cafile=self.ca_file)
        # Any certificate in the file is a trust anchor, a CA's or the exporter's own
        # (rigctl doctor --config.file trusts the exporter's cert_file), as Python 3.13's
        # default context has it (cpython gh-107361).
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        return context


NO_ACCESS = Access()


class Unreachable(Exception):
    """A server did not answer usefully; str() names the URL and the reason."""


class BadAnswer(Unreachable):
    """A server answered, with something rigctl cannot read."""


def url_of(listen_address: str, scheme: str = "http") -> str:
    """The URL that reaches, from this host, a server listening on `listen_address`
    (host:port): on loopback when it listens on every address."""
    host, _, port = listen_address.rpartition(":")
    host = host.strip("[]")
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def get_json(url: str, timeout: float, access: Access = NO_ACCESS) -> Any:
    """The JSON body at `url`, read whole within `timeout` seconds."""
    return run_interruptible(read_json(url, timeout, access))


async def read_json(url: str, timeout: float, access: Access = NO_ACCESS) -> Any:
    return parse_json(url, await read_body(url, timeout, access))


async def read_text(url: str, timeout: float, access: Access = NO_ACCESS) -> str:
    """The UTF-8 text body at `url` (an exporter's /metrics)."""
    body = await read_body(url, timeout, access)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadAnswer(f"{url}: not UTF-8 text (byte {exc.start})") from None


async def read_body(url: str, timeout: float, access: Access = NO_ACCESS) -> bytes:
    """The body of `GET url` (2xx), at most MAX_ANSWER_BYTES, within `timeout` seconds
    in all; Unreachable or BadAnswer otherwise."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s, \
                s.get(url, headers=access.headers(), ssl=access.tls() or True) as r:
            if not 200 <= r.status < 300:
                raise Unreachable(f"{url}: HTTP {r.status} {_short(r.reason or '')}")
            body = bytearray()
            async for chunk in r.content.iter_chunked(_CHUNK_BYTES):
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    raise BadAnswer(f"{url}: answer larger than "
                                    f"{MAX_ANSWER_BYTES // 1024 // 1024} MiB")
            return bytes(body)
    except TimeoutError:  # asyncio's, which ClientTimeout raises (3.11: the builtin)
        raise Unreachable(f"{url}: no whole answer within {timeout:g} s") from None
    except aiohttp.ClientConnectorCertificateError as exc:
        raise Unreachable(f"{url}: {_short(exc.certificate_error)}") from None
    except aiohttp.ClientConnectorError as exc:
        raise Unreachable(f"{url}: {_os_reason(exc.os_error)}") from None
    except (aiohttp.ClientPayloadError, aiohttp.ClientResponseError,
            aiohttp.ServerDisconnectedError) as exc:  # not HTTP, or cut short
        raise BadAnswer(f"{url}: not a valid HTTP answer ({type(exc).__name__})") from None
    except aiohttp.InvalidURL:
        raise Unreachable(f"{url}: not a URL rigctl can ask") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise Unreachable(f"{url}: {_short(exc)}") from None


def _os_reason(error: OSError) -> str:
    """`[Errno 111] Connection refused`, as the OS names it; asyncio's own text for
    the error names the address again."""
    if isinstance(error, socket.gaierror) or not error.errno:
        return _short(error)
    return f"[Errno {error.errno}] {os.strerror(error.errno)}"


def parse_json(url: str, body: bytes) -> Any:
    """Strict JSON: NaN and Infinity, which Python's json accepts, are refused."""
    try:
        return json.loads(body, parse_constant=_no_constant)
    except RecursionError:
        raise BadAnswer(f"{url}: JSON nested too deep") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadAnswer(f"{url}: not JSON ({_short(exc)})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _short(reason: object, limit: int = 120) -> str:
    text = " ".join(str(reason).split())
    return text if len(text) <= limit else text[:limit] + "…"


# --- shapes -------------------------------------------------------------------


def items(url: str, body: Any, *path: str) -> list[dict[str, Any]]:
    """The list of objects at `path` in a Prometheus or Alertmanager answer."""
    value = field(url, body, *path, kind=object)
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise BadAnswer(f"{url}: {'.'.join(path) or 'the answer'} is not a list of objects")
    return value


def field(url: str, body: Any, *path: str, kind: type | tuple[type, ...]) -> Any:
    """The value at `path` (keys of nested objects), which must be of `kind`."""
    value = body
    for depth, key in enumerate(path):  # name the level that is not an object
        value = _object(url, value, ".".join(path[:depth]) or "the answer").get(key)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise BadAnswer(f"{url}: {'.'.join(path) or 'the answer'} is {_kind(value)}, not "
                        f"{' or '.join(k.__name__ for k in kinds)}")
    return value


def _object(url: str, value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadAnswer(f"{url}: {where} is {_kind(value)}, not an object")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return f"the string {_short(repr(value), 40)}"
    return f"a {type(value).__name__}"
