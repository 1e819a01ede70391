"""What counts as decode progress, and as requests in flight, on each SGLang release.

Read from the release wheels (`pip download sglang==X --no-deps`, unzipped;
docs/stall-tracker.md#signals-by-release and docs/facts/sglang.md):

- `cuda_graph_passes_total{mode=decode_*}` exists from 0.5.7 (`metrics/collector.py`
  0.5.7 line 688). It moves once per decode batch, and only on the decode result
  path: mixed batches (`--enable-mixed-chunk`) go through the prefill path and leave
  it still while decode goes on inside them.
- The tokenizer's inter-token-latency histogram (`inter_token_latency_seconds`, in
  every release read) counts each token a streaming request receives: its bucket
  counts grow by the tokens of each output (`observe_inter_token_latency`,
  `tokenizer_manager.py::collect_metrics`), mixed batch or not. Non-streaming requests
  reach the tokenizer every 50 tokens (`DEFAULT_FORCE_STREAM_INTERVAL`, 0.5.5
  `scheduler_output_processor_mixin.py`) and at their end.
- `num_running_reqs` is refreshed on a prefill batch, every 40 decode batches and,
  when idle, only every 30 s until 0.5.16 (`_maybe_log_idle_metrics`; 0.5.16 adds the
  `gauge_stale` check). So on 0.5.15 and before it reads "running" for up to 30 s
  after a burst.
- `http_requests_active{endpoint}` (livesum) exists from 0.5.10. Its middleware's
  `call_next` awaits the whole ASGI app (`utils/http_middleware_patch.py`), so a
  streamed request counts until its stream ends: a live count that does not go stale.
- `num_requests_total` counts finished requests (tokenizer, every release read).

Decode progress is the decode pass counter plus the streamed-token count: either
moving is progress. Requests are in flight when the running gauge says so and, where
it exists, the HTTP in-flight count on the generation endpoints agrees; without it
(before 0.5.10) requests the tokenizer saw finish since the gauge last changed are
taken off the gauge, which can hide a stall that starts as a request finishes but
never invents one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Counters:
    """The few upstream values the tracker reads; None: the family does not exist (yet)."""

    #: cuda_graph_passes_total{mode=decode_*}, one value per DP group summed.
    decode_passes: float | None = None
    #: Tokens streamed to clients: inter_token_latency_seconds _count.
    streamed_tokens: float | None = None
    #: num_running_reqs (max over TP ranks, summed over DP ranks).
    running: float | None = None
    #: http_requests_active on the generation endpoints.
    http_active: float | None = None
    #: num_requests_total: requests the tokenizer saw finish.
    finished: float | None = None


@dataclass(frozen=True)
class SignalPlan:
    """The signals one release range offers, and what they cannot see."""

    releases: str
    decode_counter: bool
    http_in_flight: bool
    blind_spots: str


PLANS = (
    ((0, 5, 5), SignalPlan(
        "0.5.5-0.5.6", decode_counter=False, http_in_flight=False,
        blind_spots="a non-streaming request reaches the tokenizer only every 50 "
                    "tokens, so alone it shows as 50-token gaps; a stall that begins "
                    "as a request finishes is hidden until the running gauge changes")),
    ((0, 5, 7), SignalPlan(
        "0.5.7-0.5.9", decode_counter=True, http_in_flight=False,
        blind_spots="mixed-chunk decode of non-streaming requests is seen every 50 "
                    "tokens only; a stall that begins as a request finishes is hidden "
                    "until the running gauge changes")),
    ((0, 5, 10), SignalPlan(
        "0.5.10 and later", decode_counter=True, http_in_flight=True,
        blind_spots="mixed-chunk decode of non-streaming requests is seen every 50 "
                    "tokens only")),
)


def parse_version(text: str) -> tuple[int, int, int] | None:
    """`0.5.10.post1` -> (0, 5, 10); None for anything without three leading numbers."""
    match = re.match(r"v?(\d+)\.(\d+)\.(\d+)", text.strip())
    return None if match is None else (int(match[1]), int(match[2]), int(match[3]))


def plan_for(version: str) -> SignalPlan | None:
    """The plan for a release, or None where the tracker cannot tell (not read, unknown)."""
    parsed = parse_version(version)
    if parsed is None:
        return None
    chosen = None
    for first, plan in PLANS:
        if parsed >= first:
            chosen = plan
    return chosen


@dataclass(frozen=True)
class Progress:
    """What the state machine needs from one poll."""

    #: A cumulative count that moves whenever decode makes progress.
    decode: float
    #: Requests that should be decoding.
    in_flight: float


class ProgressView:
    """Turns one release's Counters into Progress, remembering what the guard needs."""

    def __init__(self, plan: SignalPlan) -> None:
        self.plan = plan
        self._gauge: float | None = None
        self._finished_at_gauge = 0.0

    def progress(self, counters: Counters) -> Progress:
        parts = [counters.streamed_tokens]
        if self.plan.decode_counter:
            parts.append(counters.decode_passes)
        # A family not created yet: nothing of that kind since the engine started.
        decode = sum(p for p in parts if p is not None)
        running = counters.running or 0.0
        return Progress(decode, self._in_flight(running, counters))

    def _in_flight(self, running: float, counters: Counters) -> float:
        if self.plan.http_in_flight and counters.http_active is not None:
            return running if counters.http_active > 0 else 0.0
        finished = counters.finished or 0.0
        if running != self._gauge or finished < self._finished_at_gauge:
            self._gauge, self._finished_at_gauge = running, finished
        return max(0.0, running - (finished - self._finished_at_gauge))
