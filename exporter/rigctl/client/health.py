"""The exporter's /api/health answer, decoded with the structs the exporter writes it
from (exporter/daemon/health/document.py). One that does not fit is `BadAnswer`: one
line naming the URL and the part that is wrong, which `rigctl health` turns into
exit 3 (unknown)."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from exporter.daemon.health.document import HealthReport
from exporter.rigctl.client.http import BadAnswer

_MISSING = re.compile(r"Object missing required field `(.*)`", re.DOTALL)
_EXPECTED = re.compile(r"Expected `(.*?)`, got `(.*?)`", re.DOTALL)


def health_report(url: str, body: Any) -> dict[str, Any]:
    """`body` (parsed JSON) if it is a health report, as plain JSON values."""
    try:
        report = msgspec.convert(body, HealthReport, strict=True)
    except msgspec.ValidationError as exc:
        raise BadAnswer(f"{url}: {worded(str(exc))}") from None
    return msgspec.to_builtins(report)


def worded(message: str) -> str:
    """msgspec's "Expected `object`, got `array` - at `$.checks[0]`" as "checks[0] is
    an array, not an object"."""
    what, _, path = message.partition(" - at `$")
    where = path.removesuffix("`").lstrip(".") or "the report"
    if missing := _MISSING.fullmatch(what):
        return f"{where} has no {missing[1]!r}"
    if expected := _EXPECTED.fullmatch(what):
        return f"{where} is {_a(expected[2])}, not {_a(expected[1])}"
    return f"{where}: {what}"


def _a(kind: str) -> str:
    return kind if kind == "null" else f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"
