"""Bounds that hold however late an answer comes (docs/stall-tracker.md#honest-bounds).

A reading describes the engine at some moment between its ask and its answer. Here
the engine's decode counter moves every 20 ms except through a true stall; each poll
is answered after a random delay of up to several poll intervals, the engine's moment
falling anywhere in between, and some polls take a body a scrape fetched earlier
(with that fetch's own times). Whatever the delays, the exported bracket holds the
true stall: the gap between the last move before it and the first after it.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import pytest

from exporter.daemon.engines.stall.readers import FetchedBody, MetricsBody, MetricsReader
from exporter.daemon.engines.stall.tracker import DecodeStallTracker

STEP = 0.02  # a decode step
POLL = 0.25  # the tracker's floor


@dataclass
class Engine:
    """Decode moves every STEP except in [stall_from, stall_to)."""

    stall_from: float
    stall_to: float

    def moves_before(self, t: float) -> int:
        """How many decode steps have ended by `t` (the counter at `t`)."""
        steps = int(t / STEP)
        frozen_from = int(self.stall_from / STEP)
        frozen_to = int(self.stall_to / STEP)
        return steps - max(0, min(steps, frozen_to) - frozen_from)

    def true_stall(self) -> float:
        """From the last move before the stall to the first after it."""
        last = int(self.stall_from / STEP) * STEP
        first = (int(self.stall_to / STEP) + 1) * STEP
        return first - last


def poll_with_late_answers(rng: random.Random, engine: Engine, max_delay: float,
                           reuse_share: float, until: float) -> DecodeStallTracker:
    """Poll the engine until `until`; each answer late by up to `max_delay`, the moment
    it describes anywhere between ask and answer; a share of polls reuse a scrape's
    body fetched since the previous answer."""
    tracker = DecodeStallTracker(window_seconds=1e9)
    last_answer = 0.0
    t = 0.0
    while t < until:
        if rng.random() < reuse_share and t - last_answer > 0.01:
            # A scrape's body: asked after the previous reading was answered.
            asked = rng.uniform(last_answer, t)
            answered = min(t, asked + rng.uniform(0.0, max_delay))
        else:
            asked = t
            answered = t + rng.uniform(0.0, max_delay)
        moment = rng.uniform(asked, answered)
        tracker.observe(answered, engine.moves_before(moment), running=2, asked=asked)
        last_answer = t = max(t, answered)
        # Polls at the floor while standing still, else a longer interval.
        t += POLL if tracker.standing_still else rng.uniform(POLL, 3 * POLL)
    return tracker


@pytest.mark.parametrize("max_delay", [0.0, 0.3, 1.0, 3 * POLL * 4])
@pytest.mark.parametrize("seed", range(25))
def test_the_bracket_holds_the_true_stall_whatever_the_delays(seed, max_delay):
    rng = random.Random(seed)
    start = rng.uniform(5.0, 8.0)
    engine = Engine(start, start + 12.0)
    tracker = poll_with_late_answers(rng, engine, max_delay, reuse_share=0.4,
                                     until=start + 25.0)
    stalls = tracker.recent(1e9)
    assert len(stalls) == 1, stalls
    (_, lower, upper), = stalls
    truth = engine.true_stall()
    assert lower <= truth <= upper, (lower, truth, upper)


def test_the_old_stamp_missed_a_late_stall():
    """The stamp of the answer alone (the tracker before): a body that waited long
    before its answer reads the stall short. Here the last stalled reading describes
    the engine 1.5 s before its answer, and the bracket with one time excludes 12 s."""
    tracker = DecodeStallTracker()
    tracker.observe(0.0, 10, running=2)
    tracker.observe(0.25, 11, running=2)  # the last move, at 0.25 at the latest
    for t in (2.0, 5.0, 8.0, 11.0):
        tracker.observe(t, 11, running=2)
    # Asked at 12.3 (decode moves again at 12.26), answered at 13.8 with the still
    # body of a moment before 12.26.
    tracker.observe(13.8, 11, running=2)
    tracker.observe(14.0, 50, running=2)
    (_, single_lower, single_upper), = tracker.recent(14.0)
    assert single_lower > 12.01  # the true gap is 12.01 s: excluded

    honest = DecodeStallTracker()
    honest.observe(0.0, 10, running=2)
    honest.observe(0.25, 11, running=2)
    for t in (2.0, 5.0, 8.0, 11.0):
        honest.observe(t, 11, running=2)
    honest.observe(13.8, 11, running=2, asked=12.3)
    honest.observe(14.0, 50, running=2)
    (_, lower, upper), = honest.recent(14.0)
    assert lower == pytest.approx(12.3 - 0.25) and upper == pytest.approx(14.0 - 0.0)


class TestReusedBodies:
    def _reader(self, clock: list[float]) -> tuple[MetricsReader, MetricsBody]:
        bodies = iter(range(1, 100))

        async def fetch() -> str:
            clock[0] += 0.1  # each fetch takes 0.1 s
            return ("# TYPE sglang:num_running_reqs gauge\n"
                    f"sglang:num_running_reqs 2\n"
                    "# TYPE sglang:inter_token_latency_seconds histogram\n"
                    f"sglang:inter_token_latency_seconds_count {next(bodies)}\n")

        body = MetricsBody(fetch, clock=lambda: clock[0], timer=lambda: clock[0])
        return MetricsReader(body, POLL), body

    def test_a_reused_body_keeps_its_own_times(self):
        clock = [100.0]

        async def run() -> None:
            reader, body = self._reader(clock)
            first = await reader.read()
            assert (first.asked_at, first.answered_at) == (100.0, pytest.approx(100.1))
            clock[0] += 0.2
            scrape = await body.fresh()  # a scrape fetches at 100.3 .. 100.4
            clock[0] += 0.3
            second = await reader.read()  # at 100.7: the scrape's body serves
            assert second.counters.streamed_tokens == 2.0
            assert (second.asked_at, second.answered_at) == (scrape.asked_at,
                                                             scrape.answered_at)
            assert second.asked_at == pytest.approx(100.3)

        asyncio.run(run())

    def test_a_body_asked_before_the_last_answer_is_not_reused(self):
        """It may describe a moment before the last reading's: fetched afresh."""
        clock = [100.0]

        async def run() -> None:
            reader, body = self._reader(clock)
            await reader.read()  # 100.0 .. 100.1
            # A scrape asked at 100.05 and answered at 100.15 (overlapping the read).
            body._latest = FetchedBody("# TYPE x gauge\n", 100.05, 100.15)
            third = await reader.read()
            assert third.asked_at >= 100.1 and body.fetches == 2

        asyncio.run(run())

    def test_never_the_same_body_twice(self):
        clock = [100.0]

        async def run() -> None:
            reader, body = self._reader(clock)
            first = await reader.read()
            again = await reader.read()
            assert again.asked_at >= first.answered_at and body.fetches == 2

        asyncio.run(run())

