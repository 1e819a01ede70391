"""The owner's starvation experiment in the scheduler model, in simulated time, and its
calibration table against the owner's figures (docs/facts/rig.md#decode-starvation):
what tests/sim/test_scheduler.py holds the model to and bench/bench_sim_calibration.py
prints."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.sim.engine.scheduler import Policy, Scheduler, Timings

#: docs/facts/rig.md#decode-starvation: A's longest decode gap and B's TTFT per setting.
STARVATION_TABLE: dict[str, tuple[float, float]] = {
    "default": (47.23, 49.43),
    "n=1": (4.04, 49.48),
    "n=2": (7.70, 49.21),
    "n=3": (11.70, 49.05),
    "n=4": (13.80, 49.37),
    "n=8": (25.76, 49.24),
    "n=16": (47.05, 49.24),
    "mixed-chunk": (3.997, 48.91),
}


@dataclass(frozen=True)
class StarvationResult:
    policy: str
    a_max_gap_seconds: float
    b_ttft_seconds: float
    a_tokens_per_second_before_b: float
    a_tokens_per_second_during_b: float  # from B's send to B's first token
    a_tokens_per_second_during_b_prefill: float  # from B's first chunk to its first token


def starvation_experiment(policy: Policy, context_tokens: int = 65536,
                          delay_seconds: float = 5.0,
                          timings: Timings | None = None) -> StarvationResult:
    """A decodes on a cached `context_tokens` context; `delay_seconds` after its first
    token, B sends a fresh prompt of the same size. B's TTFT ends at its first token;
    A's gaps are measured until A's first token after that, which closes the gap."""
    sched = Scheduler(policy, timings, start=0.0, kv_capacity_tokens=10 * context_tokens)
    a = sched.submit(context_tokens, max_new_tokens=10**6,
                     cached={"device": context_tokens - 1})
    sched.run_until_true(lambda: bool(a.token_times))
    b_at = a.token_times[0] + delay_seconds
    b = sched.submit(context_tokens, max_new_tokens=1, at=b_at)
    sched.run_until_true(lambda: b.done and a.token_times[-1] > b.token_times[0])
    end = b.token_times[0]
    before = [t for t in a.token_times if t <= b_at]
    during = [t for t in a.token_times if b_at < t <= end]
    prefill = [t for t in during if t > b.admitted_at]
    return StarvationResult(
        policy.name, a.longest_gap(), b.ttft or 0.0,
        (len(before) - 1) / (before[-1] - before[0]) if len(before) > 1 else 0.0,
        len(during) / (end - b_at), len(prefill) / (end - b.admitted_at))


def calibration_table(timings: Timings | None = None) -> list[tuple[str, float, float,
                                                                   float, float, float]]:
    """Per setting: (policy, target gap, simulated gap, target TTFT, simulated TTFT,
    A's simulated tokens/s while B prefills)."""
    rows = []
    for name, (gap, ttft) in STARVATION_TABLE.items():
        result = starvation_experiment(Policy.named(name), timings=timings)
        rows.append((name, gap, result.a_max_gap_seconds, ttft, result.b_ttft_seconds,
                     result.a_tokens_per_second_during_b_prefill))
    return rows


def a_gaps_in_the_scheduler(policy_name: str, b_prompt_tokens: int, chunk_tokens: int,
                            longer_than: float, delay_seconds: float = 3.0) -> list[float]:
    """A's stops longer than `longer_than` while B's fresh prompt prefills, in the
    scheduler model: A on a short prompt, B `delay_seconds` after A's first token
    (the tier's real-SGLang scenario, in the rig's timings: the shape, not the
    seconds, is what compares)."""
    policy = Policy.named(policy_name, chunked_prefill_size=chunk_tokens)
    sched = Scheduler(policy, start=0.0, kv_capacity_tokens=4 * b_prompt_tokens)
    a = sched.submit(256, max_new_tokens=10**6)
    sched.run_until_true(lambda: bool(a.token_times))
    b = sched.submit(b_prompt_tokens, max_new_tokens=1, at=a.token_times[0] + delay_seconds)
    sched.run_until_true(lambda: b.done and a.token_times[-1] > b.token_times[0])
    times = a.token_times
    return [later - earlier for earlier, later in zip(times, times[1:], strict=False)
            if later - earlier > longer_than]
