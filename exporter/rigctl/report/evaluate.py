"""Evaluating: each alert rule's condition replayed over the range, with its `for`, at
the rules' evaluation step, as one range query per rule whatever the range's length.

The range is cut into at most MAX_BUCKETS buckets of `step` seconds (a whole number of
evaluation steps). For each rule one query_range at `step` returns, per bucket, how
many evaluation points the alert was firing at:

    count_over_time((count_over_time((COND)[FOR:EVAL]) >= N)[STEP:EVAL])

The inner subquery is Prometheus' own `for`: firing at an evaluation point when the
condition held at every one of the N = FOR/EVAL + 1 points ending there. The outer
counts those points in the bucket. Prometheus evaluates a subquery once over the whole
range, so the cost is the range's evaluation points, and the answer is MAX_BUCKETS
points per series, far below the 11,000 Prometheus accepts. Bucket ends are
evaluation points (multiples of the step, where Prometheus puts a subquery's points),
and each window is half a step wider than its points, so that it holds the same points
under Prometheus 2's closed ranges and 3's left-open ones.

A span's start and end are exact to the evaluation step when the bucket is one step,
and to the bucket otherwise (the firing points of its first bucket are taken as its
last ones, and those of its last bucket as its first ones); its seconds are exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from exporter.rigctl.report.query import Labels, Prometheus, Series
from exporter.rigctl.report.rules import Rule

#: The most buckets a range is cut into: the points per series of every range query.
MAX_BUCKETS = 720


@dataclass(frozen=True)
class Grid:
    """The report's range cut into `count` buckets of `step` seconds; bucket k covers
    (start + k*step, start + (k+1)*step]."""

    start: float
    end: float
    eval_seconds: float
    step: float
    count: int

    @classmethod
    def of(cls, start: float, end: float, eval_seconds: float) -> Grid:
        evals = max(1, math.ceil((end - start) / eval_seconds))
        per_bucket = max(1, math.ceil(evals / MAX_BUCKETS))
        step = per_bucket * eval_seconds
        return cls(start, end, eval_seconds, step, max(1, math.ceil((end - start) / step)))

    @property
    def points_per_bucket(self) -> int:
        return round(self.step / self.eval_seconds)

    def bucket_end(self, k: int) -> float:
        return self.start + (k + 1) * self.step

    def index(self, t: float) -> int:
        return round((t - self.start) / self.step) - 1

    def counted(self, expr: str) -> str:
        """Per bucket, the evaluation points `expr` has a value at."""
        return self.over("count_over_time", expr)

    def over(self, function: str, expr: str) -> str:
        """`function` (an *_over_time) of `expr` at each evaluation point of a bucket."""
        return f"{function}(({expr})[{_ms(self.step - self.eval_seconds / 2)}:" \
               f"{_ms(self.eval_seconds)}])"

    def firing(self, rule: Rule) -> str:
        """`rule`'s alert as Prometheus holds it firing, at each evaluation point."""
        if rule.for_seconds <= 0:
            return rule.expr
        held = math.ceil(rule.for_seconds / self.eval_seconds - 1e-9) + 1
        window = (held - 1) * self.eval_seconds + self.eval_seconds / 2
        return f"count_over_time(({rule.expr})[{_ms(window)}:{_ms(self.eval_seconds)}])" \
               f" >= {held}"

    def range(self, prometheus: Prometheus, expr: str) -> list[Series]:
        return prometheus.range(expr, self.bucket_end(0), self.bucket_end(self.count - 1),
                                self.step)


def _ms(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


@dataclass(frozen=True)
class Span:
    start: float
    # None: still so at the range's end.
    end: float | None
    seconds: float
    # The buckets it covers, first and last.
    first: int
    last: int


def counts(grid: Grid, series: Series) -> dict[int, int]:
    """Bucket index -> evaluation points, of one series of a `Grid.counted` query."""
    out: dict[int, int] = {}
    for t, v in series.points:
        k = grid.index(t)
        if 0 <= k < grid.count and v > 0:
            out[k] = min(grid.points_per_bucket, round(v))
    return out


def spans(grid: Grid, per_bucket: dict[int, int]) -> list[Span]:
    """Runs of buckets with points, as spans inside the range. A run goes on into the
    next bucket while its last bucket is full, or is its first (whose points are taken
    as its last ones)."""
    out: list[Span] = []
    run: list[int] = []
    for k in sorted(per_bucket):
        goes_on = run and k == run[-1] + 1 and (
            len(run) == 1 or per_bucket[run[-1]] == grid.points_per_bucket)
        if run and not goes_on:
            out.append(_span(grid, run, per_bucket))
            run = []
        run.append(k)
    if run:
        out.append(_span(grid, run, per_bucket))
    return out


def _span(grid: Grid, run: list[int], per_bucket: dict[int, int]) -> Span:
    e = grid.eval_seconds
    first, last = run[0], run[-1]
    seconds = sum(per_bucket[k] for k in run) * e
    # An evaluation point stands for the step from it to the next. The first bucket's
    # points are its last ones; the last bucket's its first ones.
    start = grid.bucket_end(first) - (per_bucket[first] - 1) * e
    end = start + seconds if len(run) == 1 else \
        grid.bucket_end(last) - grid.step + (per_bucket[last] + 1) * e
    start, end = max(start, grid.start), min(end, grid.end)
    still = last == grid.count - 1 and per_bucket[last] == grid.points_per_bucket \
        and end >= grid.end - e
    return Span(start, None if still else end, seconds, first, last)


def merged(a: dict[int, int], b: dict[int, int]) -> dict[int, int]:
    """The union of two accounts of one alert, bucket by bucket: the larger count."""
    return {k: max(a.get(k, 0), b.get(k, 0)) for k in {*a, *b}}


def key(labels: Labels, drop: Iterable[str] = ()) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in set(drop)))
