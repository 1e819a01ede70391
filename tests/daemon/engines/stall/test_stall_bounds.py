"""Honest bounds under the render budget (docs/stall-tracker.md#honest-bounds): a
stall is known only between polls. With /metrics renders of 54 ms the 2 % budget
spaces polls 3 s apart; a true 12 s starvation must still read 10 s or more, and a
true 8 s one less, wherever the stall falls between two polls."""

from __future__ import annotations

import pytest

from exporter.thresholds import Thresholds
from tests.daemon.engines.stall.release_timeline import play

#: 54 ms per render / 0.018 = a 3 s poll interval.
SLOW_RENDER = 0.054
PHASES = [5.0 + 0.25 * k for k in range(12)]  # every quarter second of a 3 s interval
THRESHOLD = Thresholds().decode_stall_critical_seconds


def starve(seconds: float, at: float):
    out = play("0.5.23", "metrics", at + seconds + 10.0,
               {0.0: lambda p: p.start_requests(streaming=2),
                at: lambda p: p.long_prefill(seconds)},
               render_cost=SLOW_RENDER)
    assert out.resolution_seconds == pytest.approx(3.0)
    ((_, lower, upper),) = out.stalls
    return lower, upper


@pytest.mark.parametrize("at", PHASES)
def test_a_true_12_s_stall_reads_10_s_or_more(at):
    lower, upper = starve(12.0, at)
    assert lower <= 12.0 <= upper
    assert (lower + upper) / 2 >= THRESHOLD


@pytest.mark.parametrize("at", PHASES)
def test_a_true_8_s_stall_reads_under_10_s(at):
    lower, upper = starve(8.0, at)
    assert lower <= 8.0 <= upper
    assert (lower + upper) / 2 < THRESHOLD


def test_while_decode_stands_still_the_tracker_polls_at_its_floor():
    """A render delays no token while none moves: the end is known to 0.25 s."""
    lower, upper = starve(12.0, 5.0)
    # The start is known to the 3 s interval before it, the end to the 0.25 s floor,
    # each reading only from its ask to its answer: two renders more.
    assert upper - lower == pytest.approx(3.0 + 0.25 + 2 * SLOW_RENDER, abs=0.01)
