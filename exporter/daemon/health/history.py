"""The exporter's own short history: bounded ring buffers of the values that
windowed checks need (counters for rates and increases, the stall maximum).

Prometheus keeps hours; the exporter keeps the longest window a check needs
(the thresholds' largest `*_window_seconds`), thinned to one sample per
`min_spacing_seconds`, so memory stays bounded however often it is scraped.
A window counts as filled once the exporter has watched for its whole length;
until then a check that needs it says `unknown`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable


class History:
    def __init__(self, keep_seconds: float, min_spacing_seconds: float = 0.0,
                 max_samples: int = 1024) -> None:
        self.keep_seconds = keep_seconds
        self.min_spacing_seconds = min_spacing_seconds
        self.max_samples = max_samples
        self.started: float | None = None
        self._series: dict[Hashable, deque[tuple[float, float]]] = {}

    def watched(self, now: float) -> float:
        return 0.0 if self.started is None else now - self.started

    def filled(self, now: float, window_seconds: float) -> bool:
        return self.watched(now) >= window_seconds

    def record(self, now: float, values: Iterable[tuple[Hashable, float]]) -> None:
        if self.started is None:
            self.started = now
        for key, value in values:
            series = self._series.setdefault(key, deque(maxlen=self.max_samples))
            if series and now - series[-1][0] < self.min_spacing_seconds:
                continue
            series.append((now, value))
        horizon = now - self.keep_seconds
        for key in list(self._series):
            series = self._series[key]
            # Keep one sample older than the horizon: the base of the longest window.
            while len(series) > 1 and series[1][0] <= horizon:
                series.popleft()
            if series[-1][0] < horizon:
                del self._series[key]

    def samples(self, key: Hashable, now: float,
                window_seconds: float) -> list[tuple[float, float]]:
        """The samples within the window, and the last one before it as its base."""
        series = self._series.get(key, ())
        start = now - window_seconds
        inside = [s for s in series if s[0] > start]
        before = [s for s in series if s[0] <= start]
        return before[-1:] + inside

    def increase(self, key: Hashable, now: float, window_seconds: float,
                 created_from_zero: bool = False) -> float | None:
        """A counter's growth over the window, across resets; None without two samples.

        `created_from_zero`: a counter first seen inside the window, after the
        history began, was absent before, i.e. 0 (engines create counters on
        first use)."""
        points = self.samples(key, now, window_seconds)
        if (created_from_zero and points and self.started is not None
                and self.started < points[0][0] and points[0][0] > now - window_seconds
                and self._series[key][0] == points[0]):
            points = [(points[0][0], 0.0), *points]
        if len(points) < 2:
            return None
        grown = 0.0
        for (_, a), (_, b) in zip(points, points[1:], strict=False):
            grown += b - a if b >= a else b  # a reset starts again from 0
        return grown

    def rate(self, key: Hashable, now: float, window_seconds: float) -> float | None:
        points = self.samples(key, now, window_seconds)
        grown = self.increase(key, now, window_seconds)
        if grown is None or points[-1][0] <= points[0][0]:
            return None
        return grown / (points[-1][0] - points[0][0])

    def deriv(self, key: Hashable, now: float, window_seconds: float) -> float | None:
        """A gauge's least-squares slope per second over the window (PromQL deriv)."""
        points = [s for s in self.samples(key, now, window_seconds) if s[0] >= now - window_seconds]
        if len(points) < 2:
            return None
        n = len(points)
        mean_t = sum(t for t, _ in points) / n
        mean_v = sum(v for _, v in points) / n
        spread = sum((t - mean_t) ** 2 for t, _ in points)
        if spread == 0:
            return None
        return sum((t - mean_t) * (v - mean_v) for t, v in points) / spread

    def stepped(self, key: Hashable, now: float, window_seconds: float, step_seconds: float,
                lookback_seconds: float = 300.0) -> list[float | None]:
        """The value at each step of a PromQL subquery `[window:step]` ending now
        (newest first): the latest sample at or before each step, no older than the
        lookback; None where there is none."""
        series = list(self._series.get(key, ()))
        values: list[float | None] = []
        for k in range(int(window_seconds // step_seconds)):
            at = now - k * step_seconds
            before = [v for t, v in series if at - lookback_seconds <= t <= at]
            values.append(before[-1] if before else None)
        return values
