"""Fixed-bucket histograms for TTFT and token gaps (bounded: a list of counts, however long
the exporter runs)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate

# 10 ms to 120 s (docs/metrics.md#stream-tap): a healthy gap is tens of ms, a
# mixed-chunk stutter ~4 s, a 64K-prefill starvation ~47 s and a cold 64K TTFT ~48 s
# (docs/facts/rig.md#decode-starvation).
GAP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass
class Histogram:
    bounds: Sequence[float] = GAP_BUCKETS
    #: Per bucket, not cumulative (one increment per observation, on the tap's hot path);
    #: the last one is above the top bound.
    counts: list[int] = field(default_factory=list)
    sum: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, seconds: float) -> None:
        self.sum += seconds
        self.counts[bisect_left(self.bounds, seconds)] += 1  # le: a value on a bound is in it

    @property
    def count(self) -> int:
        return sum(self.counts)

    def buckets(self) -> list[tuple[str, float]]:
        """(le, cumulative count) pairs, as HistogramMetricFamily takes them."""
        bounds = [repr(b) for b in self.bounds] + ["+Inf"]
        return list(zip(bounds, map(float, accumulate(self.counts)), strict=True))
