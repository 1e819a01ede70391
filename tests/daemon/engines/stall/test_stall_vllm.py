"""The stall tracker on vLLM (docs/stall-tracker.md#vllm): its counters from a real
vLLM body, and a stand-in whose values move only when an engine step ends, played
on a simulated clock through the real poller with answers late at random."""

from __future__ import annotations

import asyncio
import logging
import math
import random
from pathlib import Path

import pytest

from exporter.daemon.engines.stall.readers import TRACKER_BUDGET, MetricsBody, TrackerBlind
from exporter.daemon.engines.stall.tracker import StallPoller
from exporter.daemon.engines.stall.vllm import ENGINE_STEPS, StepPlanner, VllmMetricsReader

FIXTURE = Path(__file__).parents[3] / "fixtures" / "engine" / "vllm-0.33.0-metrics.txt"
STEP = 0.03  # a decode step of the stand-in


def test_counters_from_a_real_vllm_body():
    async def fetch() -> str:
        return FIXTURE.read_text()

    reading = asyncio.run(VllmMetricsReader(MetricsBody(fetch), 0.25).read())
    c = reading.counters
    assert (c.generated_tokens, c.running, c.first_tokens) == (3508.0, 2.0, 6.0)
    assert c.finished == 4.0  # stop 3 + length 1, summed over finished_reason
    progress = StepPlanner("main").progress(c, 0.0)
    assert (progress.decode, progress.in_flight) == (3508.0, 2.0)


def test_a_body_without_the_running_gauge_is_blind_and_names_it():
    body = "\n".join(line for line in FIXTURE.read_text().splitlines()
                     if "num_requests_running" not in line) + "\n"

    async def fetch() -> str:
        return body

    with pytest.raises(TrackerBlind, match="holds no vllm:num_requests_running$") as blind:
        asyncio.run(VllmMetricsReader(MetricsBody(fetch), 0.25).read())
    assert blind.value.cause == "no_running_gauge"


class SteppingVllm:
    """vLLM's /metrics as its engine steps write it: a value moves only when a step
    ends. `decoding` requests get a token per step; `long_step(at, seconds)` is one
    step (a prefill with chunked prefill off) that holds every value still."""

    def __init__(self, decoding: int, prefilling: int = 0) -> None:
        self.decoding, self.prefilling = decoding, prefilling
        self.long_steps: list[tuple[float, float]] = []
        self.first_tokens = float(decoding)

    def tokens_by(self, t: float) -> float:
        """Tokens written by the steps that ended by `t`."""
        steps, at = 0, 0.0
        for start, length in sorted(self.long_steps):
            if t < start:
                break
            steps += int((start - at) / STEP)
            at = start + length
            if t < at:
                return steps * self.decoding
        steps += int((t - at) / STEP)
        return steps * self.decoding

    def body(self, t: float) -> str:
        return (
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0"}} {self.decoding + self.prefilling}\n'
            "# TYPE vllm:generation_tokens_total counter\n"
            f'vllm:generation_tokens_total{{engine="0"}} {self.tokens_by(t)}\n'
            "# TYPE vllm:time_to_first_token_seconds histogram\n"
            f'vllm:time_to_first_token_seconds_count{{engine="0"}} {self.first_tokens}\n'
            "# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{engine="0",finished_reason="stop"}} 0.0\n')


def play(engine: SteppingVllm, seconds: float, max_delay: float, seed: int,
         late_in_long_steps: tuple[float, float] | None = None,
         timeout_seconds: float = 30.0, intervals: list[tuple[float, float]] | None = None):
    """Poll through the real poller; each answer late by up to `max_delay` (by a
    delay in `late_in_long_steps` when asked during a long step), rendered at a moment
    between ask and answer; one later than `timeout_seconds` times out as the
    poller's wait would. Returns the stalls that ended; `intervals` gets each poll's
    time into the play and the poll interval in force after it."""
    rng = random.Random(seed)
    clock = [1000.0]
    start = clock[0]

    def in_long_step(t: float) -> bool:
        return any(at <= t < at + length for at, length in engine.long_steps)

    async def fetch() -> str:
        delay = (rng.uniform(*late_in_long_steps)
                 if late_in_long_steps and in_long_step(clock[0] - start)
                 else rng.uniform(0.0, max_delay))
        if delay > timeout_seconds:
            clock[0] += timeout_seconds
            raise TimeoutError
        moment = clock[0] + rng.uniform(0.0, delay)
        clock[0] += delay
        return engine.body(moment - start)

    async def scenario():
        now = lambda: clock[0]  # noqa: E731
        reader = VllmMetricsReader(MetricsBody(fetch, clock=now, timer=now), 0.25)
        # Every stall of the play stays in view, however far apart the last polls.
        poller = StallPoller(reader, StepPlanner("main"), clock=now,
                             timeout_seconds=timeout_seconds, window_seconds=math.inf)
        while clock[0] - start < seconds:
            await poller.poll_once()
            interval = poller.resolution_seconds()
            if intervals is not None:
                intervals.append((clock[0] - start, interval))
            clock[0] += interval
        assert poller.status().up and poller.planner.plan == ENGINE_STEPS
        return poller.tracker.recent(clock[0])

    return asyncio.run(scenario())


@pytest.mark.parametrize("seed", range(10))
def test_a_long_step_is_a_stall_within_its_bounds(seed):
    """Chunked prefill off: a 4.4 s prefill step freezes every value, and the request
    decoding beside it gets no token: the gap its client measures lies in the bracket."""
    engine = SteppingVllm(decoding=1)
    engine.long_steps.append((5.0, 4.4))
    # Answers late by up to 20 ms: the render budget then spaces polls up to 1.1 s
    # apart while decoding, and 0.25 s while it stands still.
    stalls = play(engine, 15.0, max_delay=0.02, seed=seed)
    ((_, lower, upper),) = stalls
    # The client's gap: the last token before the step to the first after it.
    gap = 4.4 + STEP
    assert lower <= gap <= upper
    assert upper - lower <= 1.1 + 0.25 + 2 * 0.02


@pytest.mark.parametrize("seed", range(10))
def test_answers_slowed_by_the_step_still_bracket_it(seed):
    """A busy box: through a 40 s prefill step every /metrics answer takes 1.1-1.9 s
    (vLLM's API server short of CPU beside its engine), within the poller's 2 s wait.
    Each such reading still bounds its moment. The tracker used to leave readings
    slower than 1 s out, and read this stall as none at all."""
    engine = SteppingVllm(decoding=1)
    engine.long_steps.append((5.0, 40.0))
    stalls = play(engine, 60.0, max_delay=0.02, seed=seed, late_in_long_steps=(1.1, 1.9),
                  timeout_seconds=2.0)
    ((_, lower, upper),) = stalls
    gap = 40.0 + STEP
    assert lower <= gap <= upper
    # The poll spacing before the step and the floor in it, and three late answers:
    # the first reading in the step, the last that saw it stand, the one that saw it end.
    assert upper - lower <= 1.1 + 0.25 + 3 * 1.9 + 0.02


@pytest.mark.parametrize("seed", range(10))
def test_answers_that_time_out_in_the_step_leave_it_one_stall(seed, caplog):
    """Through a 40 s step almost half the /metrics answers take longer than the
    poller's 2 s wait. Those polls say nothing about decode: the stall stays open across them, and
    one bracket holds the gap. A timeout used to end the stall, and the readings after
    it began another: the step read as short pieces or as nothing."""
    caplog.set_level(logging.INFO, logger="exporter.daemon.engines.stall.tracker")
    engine = SteppingVllm(decoding=1)
    engine.long_steps.append((5.0, 40.0))
    stalls = play(engine, 60.0, max_delay=0.02, seed=seed, late_in_long_steps=(1.0, 2.8),
                  timeout_seconds=2.0)
    ((_, lower, upper),) = stalls
    assert lower <= 40.0 + STEP <= upper
    # The log says the tracker went without answers, and that they came back.
    said = [r.getMessage() for r in caplog.records]
    assert any("main: the stall tracker's poll: no answer within 2 s" in m for m in said), said
    assert any("main: the stall tracker's poll answered again" in m for m in said), said


def test_renders_slowed_by_the_step_leave_the_spacing_after_it_as_before():
    """The budget spares tokens that wait on a render, and none waits while decode
    stands still. The renders of a 40 s step answered 1.1-1.9 s late used to make the
    spacing after it their median over the budget: 1.5 s / 0.018, about 83 s."""
    engine = SteppingVllm(decoding=1)
    engine.long_steps.append((5.0, 40.0))
    intervals: list[tuple[float, float]] = []
    play(engine, 90.0, max_delay=0.02, seed=4, late_in_long_steps=(1.1, 1.9),
         timeout_seconds=2.0, intervals=intervals)
    before = max(interval for at, interval in intervals if at < 5.0)
    after = [interval for at, interval in intervals if at > 46.0]
    assert len(after) > 10  # polled on through the 44 s after the step
    assert max(after) <= max(before, 0.02 / TRACKER_BUDGET) + 1e-9


def test_a_lone_prefill_is_not_a_stall():
    """A request in chunked prefill is running with no first token: nothing decodes,
    so nothing stands still, however long it takes."""
    engine = SteppingVllm(decoding=0, prefilling=1)
    engine.first_tokens = 0.0
    assert play(engine, 15.0, max_delay=0.02, seed=1) == []


def test_idle_is_not_a_stall():
    assert play(SteppingVllm(decoding=0), 10.0, max_delay=0.02, seed=2) == []
