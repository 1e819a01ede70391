"""Blind spans: the longest stretch between two readings, in which a stall could pass
unseen (docs/stall-tracker.md#blind-spans)."""

from __future__ import annotations

import itertools
import random

import pytest

from exporter.daemon.collector import families
from exporter.daemon.engines.normalise import EngineMetrics
from exporter.daemon.engines.source import EngineReading
from exporter.daemon.engines.stall.tracker import DecodeStallTracker

BLIND = "rig_engine_decode_stall_max_blind_seconds"


def test_none_before_two_readings_then_the_span_from_ask_to_answer() -> None:
    tracker = DecodeStallTracker()
    assert tracker.state(0.0).max_recent_blind_seconds is None
    tracker.observe(0.1, 5, running=2, asked=0.0)
    assert tracker.state(0.1).max_recent_blind_seconds is None
    tracker.observe(0.4, 9, running=2, asked=0.3)
    # From the first reading's ask (0.0) to the second's answer (0.4).
    assert tracker.state(0.4).max_recent_blind_seconds == pytest.approx(0.4)


def test_a_tracker_frozen_through_a_stall_sees_none_and_says_how_long_it_was_blind() -> None:
    tracker = DecodeStallTracker()
    t, counter = 0.0, 0
    while t < 3.0:  # 4 Hz, decode moving
        tracker.observe(t, counter, running=2)
        t, counter = t + 0.25, counter + 5
    # The exporter's process gets no CPU for 39 s; a 30 s stall begins and ends in it.
    tracker.observe(t + 39.0, counter + 50, running=2)
    state = tracker.state(t + 39.0)
    assert state.max_recent_seconds == 0.0  # unseen, as it must be...
    assert state.max_recent_blind_seconds == pytest.approx(39.25)  # ...and said so


def test_the_span_leaves_with_the_window_and_a_restart_starts_afresh() -> None:
    tracker = DecodeStallTracker(window_seconds=60.0)
    tracker.observe(0.0, 1, running=2)
    tracker.observe(20.0, 2, running=2)  # 20 s blind
    tracker.observe(20.25, 3, running=2)
    assert tracker.state(20.25).max_recent_blind_seconds == 20.0
    t, counter = 20.25, 3
    while t < 81.0:
        t, counter = t + 0.25, counter + 1
        tracker.observe(t, counter, running=2)
    assert tracker.state(t).max_recent_blind_seconds == pytest.approx(0.25)
    # A failed poll is not blindness (rig_source_up says it): no span across it.
    tracker.observe_unreachable(t + 30.0)
    tracker.observe(t + 30.25, 1, running=2)
    assert tracker.state(t + 30.25).max_recent_blind_seconds == pytest.approx(0.25)


@pytest.mark.parametrize("seed", range(20))
def test_the_sliding_longest_is_the_longest_span_in_the_window(seed: int) -> None:
    rng = random.Random(seed)
    window = rng.uniform(2.0, 20.0)
    tracker = DecodeStallTracker(window_seconds=window)
    readings: list[tuple[float, float]] = []  # (asked, answered)
    t = 0.0
    for counter in range(400):
        asked = t
        t += rng.choice([0.0, 0.01, 0.3]) + rng.expovariate(4.0) * rng.choice([1, 1, 1, 20])
        tracker.observe(t, counter, running=2, asked=asked)
        readings.append((asked, t))
        spans = [(answered, answered - previous_ask) for (previous_ask, _), (_, answered)
                 in itertools.pairwise(readings)]
        in_window = [span for answered, span in spans if answered >= t - window]
        expected = max(in_window) if in_window else None
        assert tracker.state(t).max_recent_blind_seconds == (
            None if expected is None else pytest.approx(expected))
        t += rng.expovariate(8.0)


def test_the_family_is_there_with_a_span_and_absent_without() -> None:
    tracker = DecodeStallTracker()

    def blind_samples() -> list[float]:
        reading = EngineReading("sglang", "main", EngineMetrics(), None, tracker.state(1.0))
        return [s.value for f in families(reading) if f.name == BLIND for s in f.samples]

    tracker.observe(0.0, 1, running=2)
    assert blind_samples() == []
    tracker.observe(0.75, 2, running=2)
    assert blind_samples() == [0.75]
