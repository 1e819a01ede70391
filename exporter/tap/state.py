"""What the tap has seen: every stream's timing, folded into bounded counters.

The proxy hands each streamed response's bytes here as they pass; this module
times them with `exporter.streams` and keeps only fixed-size aggregates (two
histograms, counters, a window of the longest gap per second, one slot a second)
plus one meter per stream in flight. Nothing here grows with the traffic.

Outcomes, for generation requests only (docs/tap.md#what-it-measures): `ok` a stream
read to its end; `error` an HTTP error status, an error frame or event, an engine
that could not be reached or broke mid-stream; `client_closed` a client that left,
before the headers or after; `untimed` a stream the tap cannot read (compressed, a
content type it does not know, frames it does not recognise), relayed all the same.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from exporter.streams import Histogram, StreamMeter
from exporter.thresholds import Thresholds

log = logging.getLogger(__name__)

OUTCOMES = ("ok", "error", "client_closed", "untimed")


@dataclass(eq=False)
class LiveStream:
    """One streamed response in flight."""

    meter: StreamMeter
    counted_tokens: int = 0  # already added to generated_tokens
    counted_frames: int = 0  # already added to frames
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
    #: Only what the streams reported (usage, meta_info): a stream that counts nothing
    #: adds nothing.
    generated_tokens: int
    #: Frames that carried tokens (those timed), counted or not.
    frames: int = 0
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
    frames: int = 0
    live: set[LiveStream] = field(default_factory=set)
    #: (whole second, longest gap that ended in it), oldest first, a window's worth at most.
    recent: deque[tuple[int, float]] = field(default_factory=deque)
    #: The engine's name in the log lines.
    name: str = ""
    #: The kinds of untimed stream already logged: each once (a fixed set of kinds).
    logged: set[str] = field(default_factory=set)

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
        if timer.frames > stream.counted_frames:
            self.frames += timer.frames - stream.counted_frames
            stream.counted_frames = timer.frames
        if timer.tokens is not None and timer.tokens > stream.counted_tokens:
            self.generated_tokens += timer.tokens - stream.counted_tokens
            stream.counted_tokens = timer.tokens

    def close(self, stream: LiveStream, outcome: str) -> None:
        """The stream ended: an `error` frame turns `ok` into `error`, and a stream of
        which no frame was recognised is `untimed`. The wait since its last token
        counts in the max gap (an agent that gave up mid-stall waited it)."""
        meter = stream.meter
        if outcome == "ok" and meter.error is not None:
            outcome = "error"
        elif outcome == "ok" and meter.unrecognised and not meter.timer.frames:
            outcome = "untimed"
            self.untimed("unrecognised frames", f"frames such as {meter.first_unrecognised!r}")
        self.live.discard(stream)
        self.requests[outcome] += 1
        now = self.clock()
        trailing = meter.timer.open_gap(now)
        if trailing is not None:
            self._note_gap(now, trailing)

    def count(self, outcome: str) -> None:
        """A generation request that was no stream the tap could time: refused (an HTTP
        error), failed (the engine down: a 502), left before its headers, or untimed."""
        self.requests[outcome] += 1

    def untimed(self, kind: str, detail: str) -> None:
        """Say once per kind why streams go untimed (they are relayed all the same)."""
        if kind not in self.logged:
            self.logged.add(kind)
            log.warning("tap %s: a stream with %s is relayed but not timed "
                        "(counted as outcome=\"untimed\"; logged once)", self.name, detail)

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
                          self.frames, self.window_seconds)

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
