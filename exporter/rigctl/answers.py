"""Answers from the servers rigctl asks (the exporter, Prometheus, Alertmanager,
Grafana), checked for the shape a command relies on before it is used.

A server that answers with the wrong shape (a proxy's HTML page, another API
version, a field missing) becomes one `BadAnswer`, an `Unreachable` whose text
names the URL and the field, so the command ends in one line and never in a
KeyError or TypeError traceback. `get_json` (exporter/rigctl/common.py) fetches;
`field` and `items` walk what it returned.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any, TypeVar

from exporter.rigctl.common import NO_ACCESS, Access, Unreachable

T = TypeVar("T")

# Bodies rigctl reads are an exporter's /metrics (~100 kB) or an API's JSON.
MAX_TEXT_BYTES = 8 * 1024 * 1024

_KIND_NAMES = {dict: "an object", list: "a list", str: "a string", int: "a number",
               float: "a number", bool: "true or false"}


class BadAnswer(Unreachable):
    """The server answered, but not with the shape asked for."""


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(dict.fromkeys(_KIND_NAMES.get(k, k.__name__) for k in kinds))


def field(value: Any, url: str, *path: str | int, kind: type[T] | tuple[type, ...]) -> T:
    """`value[path[0]][path[1]]...`, which must be of `kind`; else BadAnswer naming the
    path (`data.activeTargets[0].labels`). A bool is never taken for a number."""
    where = ""
    for step in path:
        where += f"[{step}]" if isinstance(step, int) else (f".{step}" if where else step)
        container = dict if isinstance(step, str) else list
        if not isinstance(value, container):
            raise BadAnswer(f"{url}: {where}: its parent is not {_kind_name(container)}")
        try:
            value = value[step]
        except (KeyError, IndexError):
            raise BadAnswer(f"{url}: no {where} in the answer") from None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise BadAnswer(f"{url}: {where or 'the answer'}: expected {_kind_name(kind)}, "
                        f"got {type(value).__name__}")
    return value


def items(value: Any, url: str, *path: str | int, kind: type[T]) -> list[T]:
    """The list at `path`, every element of `kind` (objects, usually)."""
    found = field(value, url, *path, kind=list)
    for index in range(len(found)):
        field(value, url, *path, index, kind=kind)
    return found


def get_text(url: str, timeout: float, access: Access = NO_ACCESS) -> str:
    """The body of GET url as UTF-8 text (an exporter's /metrics)."""
    try:
        with urllib.request.urlopen(access.request(url), timeout=timeout,
                                    context=access.tls()) as response:
            body = response.read(MAX_TEXT_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise Unreachable(f"{url}: HTTP {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:
        raise Unreachable(f"{url}: {exc.reason}") from exc
    except (OSError, TimeoutError) as exc:
        raise Unreachable(f"{url}: {exc}") from exc
    if len(body) > MAX_TEXT_BYTES:
        raise BadAnswer(f"{url}: body over {MAX_TEXT_BYTES} bytes")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadAnswer(f"{url}: not UTF-8 text (byte {exc.start})") from exc
