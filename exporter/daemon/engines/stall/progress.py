"""Turns one poll's Counters into what the state machine needs, under a plan.

Two judgements live here, both made to err toward hiding a stall, never toward
inventing one (docs/stall-tracker.md#requests-in-flight):

- **The finished guard** (no HTTP in-flight count to trust). The running gauge can
  count requests that have finished: it stays up to 30 s after a burst (up to
  0.5.15), and the decode log that sets it runs after the step's finished requests
  were streamed, so it counts those too (0.5.5 `scheduler_output_processor_mixin.py`
  l.420-429 then `scheduler_metrics_mixin.py` l.214/305; 0.5.7 l.454-462 then l.282).
  So the requests the tokenizer saw finish are taken off the gauge, counted from the
  finished count at the poll *before* the gauge changed: any finished request a new
  gauge value includes finished after that poll, so it is taken off. A request that
  finished just before the write is taken off too, although the gauge no longer
  counts it: that can hide a stall, never invent one. At a start or restart the
  gauge may still count requests finished before the first poll, so the guard
  counts nothing in flight until decode has moved once.
- **The HTTP in-flight count** is trusted to cover the streams only while it does:
  tokens reaching clients over three polls and 2 s or more while it reads 0 on the
  generation endpoints mean a route it does not count, or a tree before 0.5.10 whose
  middleware stops counting at the response headers. The plan then falls back to the
  finished guard (`planner.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.daemon.engines.stall.plans import Counters, SignalPlan

#: Tokens flowing while the HTTP count reads 0 for this many polls, and this long,
#: mean the count does not see the streams (one short request cannot span them).
UNSEEN_STREAM_POLLS = 3
UNSEEN_STREAM_SECONDS = 2.0


@dataclass(frozen=True)
class Progress:
    """What the state machine needs from one poll."""

    #: A cumulative count that moves whenever decode makes progress.
    decode: float
    #: Requests that should be decoding.
    in_flight: float


class ProgressView:
    def __init__(self, plan: SignalPlan) -> None:
        self.plan = plan
        self._decode_logs = DecodeLogCount()
        self._guard = FinishedGuard()
        self._http = HttpCoverage()

    @property
    def http_shortfall(self) -> str:
        return self._http.shortfall

    def progress(self, counters: Counters, now: float) -> Progress:
        parts = [counters.streamed_tokens]
        if self.plan.decode_passes:
            parts.append(counters.decode_passes)
        # A family not created yet: nothing of that kind since the engine started.
        decode = sum(p for p in parts if p is not None)
        if self.plan.decode_logs:
            decode += self._decode_logs.count(counters.gen_throughput)
        running = counters.running or 0.0
        guarded = self._guard.in_flight(running, counters.finished or 0.0, decode)
        if self.plan.http_in_flight and counters.http_active is not None:
            self._http.observe(counters.streamed_tokens or 0.0, counters.http_active, now)
            return Progress(decode, running if counters.http_active > 0 else 0.0)
        return Progress(decode, guarded)


class DecodeLogCount:
    """How many decode logs were seen: polls at which gen_throughput took a new value."""

    def __init__(self) -> None:
        self._value: float | None = None
        self._logs = 0

    def count(self, value: float | None) -> float:
        if value is not None:
            if self._value is not None and value != self._value:
                self._logs += 1
            self._value = value
        return float(self._logs)


class FinishedGuard:
    def __init__(self) -> None:
        self._gauge = 0.0
        self._baseline = 0.0
        self._finished_before: float | None = None
        self._decode_before: float | None = None
        self._anchored = False

    def in_flight(self, running: float, finished: float, decode: float) -> float:
        if self._finished_before is None or finished < self._finished_before:
            # Start, or the engine restarted: what the gauge counts is not known yet.
            self._gauge, self._baseline, self._anchored = running, finished, False
        elif running != self._gauge:
            self._gauge, self._baseline = running, self._finished_before
        if self._decode_before is not None and decode > self._decode_before:
            self._anchored = True
        self._finished_before, self._decode_before = finished, decode
        if not self._anchored:
            return 0.0
        return max(0.0, running - (finished - self._baseline))


class HttpCoverage:
    """Whether http_requests_active sees the streams that receive tokens."""

    def __init__(self) -> None:
        self.shortfall = ""
        self._before: tuple[float, float, float] | None = None  # (tokens, http, at)
        self._unseen_since: float | None = None
        self._unseen_polls = 0

    def observe(self, tokens: float, http_active: float, now: float) -> None:
        before, self._before = self._before, (tokens, http_active, now)
        if before is None or not (tokens > before[0] and http_active == 0 == before[1]):
            self._unseen_since, self._unseen_polls = None, 0
            return
        if self._unseen_since is None:
            self._unseen_since = before[2]
        self._unseen_polls += 1
        seconds = now - self._unseen_since
        if (not self.shortfall and self._unseen_polls >= UNSEEN_STREAM_POLLS
                and seconds >= UNSEEN_STREAM_SECONDS):
            self.shortfall = (f"tokens reached clients for {seconds:.1f} s while "
                              "http_requests_active on the generation endpoints read 0")
