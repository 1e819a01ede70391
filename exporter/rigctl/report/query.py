"""Querying: Prometheus' HTTP API (`/api/v1/query`, `/api/v1/query_range`), which
VictoriaMetrics speaks too, through rigctl's client (one deadline, auth, TLS, answers
checked). Every answer is checked for the shape read here; anything else is
`BadAnswer`, one line, never a traceback.
"""

from __future__ import annotations

import math
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from exporter.rigctl.client.http import NO_ACCESS, Access, BadAnswer, Unreachable, get_json

Labels = dict[str, str]


@dataclass(frozen=True)
class Series:
    labels: Labels
    # (Unix time, value) pairs, in time order; one pair for an instant query.
    points: list[tuple[float, float]]


@dataclass
class Prometheus:
    url: str
    timeout: float = 30.0
    access: Access = NO_ACCESS
    # How many queries were sent: the report says it, the cost test bounds it.
    queries: int = field(default=0, init=False)

    def instant(self, expr: str, at: float) -> list[Series]:
        return self._get("query", {"query": expr, "time": f"{at:.3f}"}, "vector")

    def range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        return self._get("query_range", {"query": expr, "start": f"{start:.3f}",
                                         "end": f"{end:.3f}", "step": f"{step:g}"}, "matrix")

    def _get(self, path: str, params: dict[str, str], kind: str) -> list[Series]:
        url = f"{self.url}/api/v1/{path}"
        self.queries += 1
        full = f"{url}?{urllib.parse.urlencode(params)}"
        try:
            body = get_json(full, self.timeout, self.access)
        except Unreachable as exc:  # named by its path: the query would fill the line
            raise type(exc)(str(exc).replace(full, url)) from None
        return parse_result(url, body, kind)


def parse_result(url: str, body: Any, kind: str) -> list[Series]:
    """The series of a query's answer, checked: a vector's `value` or a matrix's
    `values`, finite numbers only (a NaN point is dropped: it says nothing held)."""
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error") if isinstance(body, dict) else None
        raise BadAnswer(f"{url}: the query failed"
                        + (f": {str(error)[:200]}" if isinstance(error, str) else ""))
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != kind \
            or not isinstance(data.get("result"), list):
        raise BadAnswer(f"{url}: the answer holds no {kind} result")
    out = []
    for item in data["result"]:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            raise BadAnswer(f"{url}: a result has no labels")
        labels = {str(k): str(v) for k, v in item["metric"].items()}
        raw = [item.get("value")] if kind == "vector" else item.get("values")
        if not isinstance(raw, list):
            raise BadAnswer(f"{url}: a result has no points")
        points = []
        for point in raw:
            try:
                t, v = float(point[0]), float(point[1])
            except (TypeError, ValueError, IndexError, KeyError):
                raise BadAnswer(f"{url}: a point is not [time, \"value\"]") from None
            if math.isfinite(t) and math.isfinite(v):
                points.append((t, v))
        out.append(Series(labels, points))
    return out
