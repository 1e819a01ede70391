"""What the tap has seen: every stream's timing, folded into bounded counters.

The proxy hands each streamed response's bytes here as they pass; this module
times them with `exporter.streams` and keeps only fixed-size aggregates (two
histograms, counters, a window of the longest gap per second, one slot a second)
plus one meter per stream in flight. Nothing here grows with the traffic.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from exporter.streams import Histogram, StreamMeter
from exporter.thresholds import Thresholds

OUTCOMES = ("ok", "error", "client_closed")


@dataclass(eq=False)
class LiveStream:
    """One streamed response in flight."""

    meter: StreamMeter
    counted_tokens: int = 0  # already added to generated_tokens
    ttft_seen: bool = False


@dataclass(frozen=True)
class TapReading:
    """The tap's state at one scrape (plain data; the collector makes families of it)."""

    kind: str
    name: str
    requests: dict[str, int]  # by outcome
    ttft_buckets: tuple[tuple[str, float], ...]
    ttft_sum: float
    gap_buckets: tuple[tuple[str, float], ...]
    gap_sum: float
    #: The longest gap of any stream in the window, a gap still open included.
    max_gap_seconds: float
    active: int
    generated_tokens: int
    window_seconds: float = Thresholds.decode_stall_window_seconds


@dataclass
class TapState:
    clock: Callable[[], float] = time.monotonic
    #: rig_stream_max_token_gap_seconds looks this far back.
    window_seconds: float = Thresholds.decode_stall_window_seconds
    requests: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    ttft: Histogram = field(default_factory=Histogram)
    gaps: Histogram = field(default_factory=Histogram)
    generated_tokens: int = 0
    live: set[LiveStream] = field(default_factory=set)
    #: (whole second, longest gap that ended in it), oldest first, a window's worth at most.
    recent: deque[tuple[int, float]] = field(default_factory=deque)

    def open(self, sent_at: float) -> LiveStream:
        stream = LiveStream(StreamMeter(sent_at, keep_gaps=False))
        self.live.add(stream)
        return stream

    def chunk(self, stream: LiveStream, chunk: bytes) -> None:
        now = self.clock()
        for gap in stream.meter.feed(chunk, now):
            self.gaps.observe(gap)
            self._note_gap(now, gap)
        timer = stream.meter.timer
        if not stream.ttft_seen and timer.first_at is not None:
            stream.ttft_seen = True
            self.ttft.observe(timer.first_at - timer.sent_at)
        if timer.tokens > stream.counted_tokens:
            self.generated_tokens += timer.tokens - stream.counted_tokens
            stream.counted_tokens = timer.tokens

    def close(self, stream: LiveStream, outcome: str) -> None:
        """The stream ended: an `error` frame turns `ok` into `error`. The wait since
        its last token counts in the max gap (an agent that gave up mid-stall waited it)."""
        if outcome == "ok" and stream.meter.error is not None:
            outcome = "error"
        self.live.discard(stream)
        self.requests[outcome] += 1
        now = self.clock()
        trailing = stream.meter.timer.open_gap(now)
        if trailing is not None:
            self._note_gap(now, trailing)

    def failed(self) -> None:
        """A request the upstream refused or broke before answering (the client got a 502)."""
        self.requests["error"] += 1

    def max_gap(self) -> float:
        now = self.clock()
        self._forget(now)
        longest = max((gap for _, gap in self.recent), default=0.0)
        for stream in self.live:
            open_gap = stream.meter.timer.open_gap(now)
            if open_gap is not None and open_gap > longest:
                longest = open_gap
        return longest

    def reading(self, kind: str, name: str) -> TapReading:
        return TapReading(kind, name, dict(self.requests), tuple(self.ttft.buckets()),
                          self.ttft.sum, tuple(self.gaps.buckets()), self.gaps.sum,
                          self.max_gap(), len(self.live), self.generated_tokens,
                          self.window_seconds)

    def _note_gap(self, now: float, gap: float) -> None:
        second = int(now)
        if self.recent and self.recent[-1][0] == second:
            if gap > self.recent[-1][1]:
                self.recent[-1] = (second, gap)
        else:
            self.recent.append((second, gap))
            self._forget(now)

    def _forget(self, now: float) -> None:
        oldest = int(now) - self.window_seconds
        while self.recent and self.recent[0][0] <= oldest:
            self.recent.popleft()
