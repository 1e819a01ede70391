"""The exporter's own short history: windows, counter arithmetic, bounds."""

from __future__ import annotations

import pytest

from exporter.daemon.health.history import History


def fed(points: list[tuple[float, float]], key: str = "c", **kw: float) -> History:
    history = History(keep_seconds=kw.pop("keep", 600), min_spacing_seconds=kw.pop("spacing", 0))
    for t, v in points:
        history.record(t, [(key, v)])
    return history


def test_increase_and_rate_span_the_window_from_the_last_sample_before_it() -> None:
    history = fed([(t, 10.0 * t) for t in range(0, 101, 10)])
    assert history.increase("c", 100, 30) == pytest.approx(300)  # base at t=70
    assert history.rate("c", 100, 30) == pytest.approx(10)


def test_a_counter_reset_counts_from_zero() -> None:
    history = fed([(0, 100.0), (10, 150.0), (20, 5.0), (30, 25.0)])
    assert history.increase("c", 30, 60) == pytest.approx(50 + 5 + 20)


def test_one_sample_gives_no_increase() -> None:
    assert fed([(0, 1.0)]).increase("c", 0, 60) is None
    assert fed([]).rate("c", 0, 60) is None


def test_deriv_is_the_least_squares_slope() -> None:
    history = fed([(t, 1000 + 64 * t + (5 if t % 20 else -5)) for t in range(0, 301, 10)])
    assert history.deriv("c", 300, 300) == pytest.approx(64, rel=0.02)


def test_filled_only_after_watching_the_whole_window() -> None:
    history = fed([(100, 1.0), (150, 1.0)])
    assert history.watched(150) == 50
    assert not history.filled(150, 60)
    assert history.filled(160, 60)


def test_stepped_takes_the_latest_sample_at_each_step() -> None:
    # A stall maximum sampled every 15 s: 4 s in minute 1 and minute 5, else 0.
    points = [(t, 4.0 if t in (60, 300) else 0.0) for t in range(0, 601, 15)]
    history = fed(points)
    steps = history.stepped("c", 600, 600, 60)
    assert len(steps) == 10
    assert sum(1 for v in steps if v is not None and v >= 2) == 2
    assert fed([(500, 1.0)]).stepped("c", 600, 600, 60) == [1.0, 1.0] + [None] * 8


def test_memory_is_bounded_by_age_and_spacing() -> None:
    history = History(keep_seconds=100, min_spacing_seconds=5)
    for i in range(10_000):
        history.record(i * 0.5, [("c", float(i))])
    samples = history.samples("c", 5000, 10_000)
    assert len(samples) <= 100 / 5 + 2
    assert samples[-1][0] >= 4990
