"""What the tap has seen: every stream's timing, folded into bounded counters, in
total and per agent.

The proxy hands each streamed response's bytes here as they pass; this module
times them with `exporter.streams` and keeps only fixed-size aggregates (histograms,
counters, a window of the longest gap per second, one slot a second) plus one meter
per stream and one record per request in flight. Per agent the same, for the
configured agents and `other` (`exporter/daemon/tap/tally.py`). Nothing here grows with
the traffic.

Outcomes, for generation requests only (docs/tap.md#what-it-measures): `ok` a stream
read to its end; `error` an HTTP error status, an error frame or event, an engine
that could not be reached or broke mid-stream; `client_closed` a client that left,
before the headers or after; `untimed` a stream the tap cannot read (compressed, a
content type it does not know, frames it does not recognise), relayed all the same.

A request is named after its agent once its body has passed (the `user` field may
be anywhere in it), or when its response comes if that is sooner. From then until
its first token it waits: that is what a stall of another stream is blamed on.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from exporter.config import AgentConfig
from exporter.daemon.tap.agents import AgentBook
from exporter.daemon.tap.asks import StreamAsk
from exporter.daemon.tap.tally import (
    NOBODY,
    OUTCOMES,
    AgentReading,
    AgentTally,
    FlightView,
    GapWindow,
    Mark,
    blamed,
)
from exporter.streams import Histogram, StreamMeter
from exporter.thresholds import MIN_STALL_SECONDS, Thresholds

log = logging.getLogger(__name__)

__all__ = ["OUTCOMES", "Flight", "LiveStream", "TapReading", "TapState"]


@dataclass(eq=False)
class Flight:
    """One generation request, from sent upstream to its end."""

    sent_at: float
    ask: StreamAsk | None = None
    #: Who sent it, until it is named: its headers and the client's address.
    headers: Mapping[str, str] | None = None
    peer: str | None = None
    tally: AgentTally | None = None
    #: Counted among its agent's requests in flight (it is, or asked to be, a stream).
    entered: bool = False
    waiting: bool = False
    stream: LiveStream | None = None
    ended: bool = False


@dataclass(eq=False)
class LiveStream:
    """One streamed response in flight."""

    meter: StreamMeter
    flight: Flight
    counted_tokens: int = 0  # already added to generated_tokens
    counted_frames: int = 0  # already added to frames
    ttft_seen: bool = False
    prompt_seen: bool = False
    #: Counted apart: the cache reads may come later than the prompt (vLLM's Messages
    #: stream gives them only on its closing message_delta).
    cached_seen: bool = False
    #: The waiting mark current at the stream's last token (tally.Mark).
    mark: Mark | None = None


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
    #: One per configured agent, then `other`.
    agents: tuple[AgentReading, ...] = ()


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
    #: The engine's name in the log lines.
    name: str = ""
    #: The kinds of untimed stream already logged: each once (a fixed set of kinds).
    logged: set[str] = field(default_factory=set)
    agents: Sequence[AgentConfig] = ()

    def __post_init__(self) -> None:
        self.window = GapWindow(self.window_seconds)
        self.book = AgentBook()
        self.tallies: dict[str, AgentTally] = {}
        self.flights: dict[str, set[Flight]] = {}
        self._waiting: Counter[str] = Counter()
        self.mark = Mark(self.clock(), {}, frozenset())
        self.set_agents(self.agents)

    @property
    def recent(self) -> deque[tuple[int, float]]:
        return self.window.recent

    def set_agents(self, agents: Sequence[AgentConfig]) -> None:
        """The agents to name requests after (at start, and at a reload: an agent kept
        by name keeps its counts; the requests in flight keep the names they have)."""
        self.agents = tuple(agents)
        self.book = AgentBook(self.agents)
        self.tallies = {name: self.tallies.get(name) or AgentTally(name, self.window_seconds)
                        for name in self.book.names}
        #: Each agent's streaming requests in flight, from named to end.
        self.flights = {name: self.flights.get(name, set()) for name in self.book.names}

    # --- a request's life ------------------------------------------------------

    def begin(self, sent_at: float, ask: StreamAsk | None = None,
              headers: Mapping[str, str] | None = None, peer: str | None = None) -> Flight:
        """A generation request is going upstream."""
        return Flight(sent_at, ask, headers, peer)

    def named(self, flight: Flight) -> AgentTally:
        """Name the request after its agent (its body has passed, or its answer came);
        one that asked to stream is then in flight for its agent, and waits."""
        if flight.tally is None:
            ask = flight.ask
            name = self.book.name(flight.headers, flight.peer, ask.user if ask else None)
            flight.tally = self.tallies[name]
            flight.headers = None  # a token is kept no longer than the request's own
            if ask is not None and ask.streaming:
                self._enter(flight)
        return flight.tally

    def end(self, flight: Flight) -> None:
        """The request is over, however it ended (idempotent)."""
        if flight.ended:
            return
        flight.ended = True
        if flight.tally is not None:
            self.flights.get(flight.tally.name, set()).discard(flight)
        self._stop_waiting(flight)

    def open(self, sent_at: float, flight: Flight | None = None) -> LiveStream:
        flight = flight or self.begin(sent_at)
        self.named(flight)
        self._enter(flight)
        stream = LiveStream(StreamMeter(flight.sent_at, keep_gaps=False), flight)
        flight.stream = stream
        self.live.add(stream)
        return stream

    def chunk(self, stream: LiveStream, chunk: bytes) -> None:
        now = self.clock()
        meter = stream.meter
        tally = stream.flight.tally
        assert tally is not None, "open() names the stream"
        for gap in meter.feed(chunk, now):
            self.gaps.observe(gap)
            self.window.note(now, gap)
            tally.gaps.note(now, gap)
            if gap >= MIN_STALL_SECONDS and stream.mark is not None:
                tally.starve(blamed(stream.mark, now - gap, self.mark, now, self.book.names))
        timer = meter.timer
        if timer.last_at == now:
            stream.mark = self.mark
        if not stream.ttft_seen and timer.first_at is not None:
            stream.ttft_seen = True
            ttft = timer.first_at - timer.sent_at
            self.ttft.observe(ttft)
            tally.ttft.observe(ttft)
            self._stop_waiting(stream.flight)
        if timer.frames > stream.counted_frames:
            self.frames += timer.frames - stream.counted_frames
            stream.counted_frames = timer.frames
        if timer.tokens is not None and timer.tokens > stream.counted_tokens:
            grown = timer.tokens - stream.counted_tokens
            self.generated_tokens += grown
            tally.generated_tokens += grown
            stream.counted_tokens = timer.tokens
        if not stream.prompt_seen and meter.prompt_tokens is not None:
            stream.prompt_seen = True
            tally.prompt_tokens += meter.prompt_tokens
            tally.last_prompt_tokens = meter.prompt_tokens
        if (not stream.cached_seen and meter.cached_tokens is not None
                and meter.prompt_tokens is not None):
            stream.cached_seen = True
            tally.cached_prompt_tokens = (tally.cached_prompt_tokens or 0) + min(
                meter.cached_tokens, meter.prompt_tokens)

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
        tally = stream.flight.tally
        assert tally is not None
        tally.requests[outcome] += 1
        trailing = meter.timer.open_gap(now)
        if trailing is not None:
            self.window.note(now, trailing)
            tally.gaps.note(now, trailing)
            if trailing >= MIN_STALL_SECONDS and stream.mark is not None:
                tally.starve(blamed(stream.mark, now - trailing, self.mark, now,
                                    self.book.names))
        self.end(stream.flight)

    def count(self, outcome: str, flight: Flight | None = None) -> None:
        """A generation request that was no stream the tap could time: refused (an HTTP
        error), failed (the engine down: a 502), left before its headers, or untimed."""
        self.requests[outcome] += 1
        if flight is not None:
            self.named(flight).requests[outcome] += 1
            self.end(flight)

    def untimed(self, kind: str, detail: str) -> None:
        """Say once per kind why streams go untimed (they are relayed all the same)."""
        if kind not in self.logged:
            self.logged.add(kind)
            log.warning("tap %s: a stream with %s is relayed but not timed "
                        "(counted as outcome=\"untimed\"; logged once)", self.name, detail)

    # --- readings --------------------------------------------------------------

    def max_gap(self) -> float:
        now = self.clock()
        longest = self.window.longest(now)
        for stream in self.live:
            open_gap = stream.meter.timer.open_gap(now)
            if open_gap is not None and open_gap > longest:
                longest = open_gap
        return longest

    def reading(self, kind: str, name: str) -> TapReading:
        return TapReading(kind, name, dict(self.requests), tuple(self.ttft.buckets()),
                          self.ttft.sum, tuple(self.gaps.buckets()), self.gaps.sum,
                          self.max_gap(), len(self.live), self.generated_tokens,
                          self.frames, self.window_seconds,
                          tuple(self._agent_reading(t) for t in self.tallies.values()))

    def _agent_reading(self, tally: AgentTally) -> AgentReading:
        now = self.clock()
        starved = dict.fromkeys((*self.book.names, NOBODY), 0.0)
        starved.update((by, s) for by, s in tally.starved.items() if by in starved)
        longest_gap = tally.gaps.longest(now)
        views = []
        for flight in sorted(self.flights[tally.name], key=lambda f: f.sent_at):
            stream = flight.stream
            open_gap = None if stream is None else stream.meter.timer.open_gap(now)
            if open_gap is not None:
                longest_gap = max(longest_gap, open_gap)
                if open_gap >= MIN_STALL_SECONDS and stream is not None and stream.mark:
                    # A stall under way counts as it lasts (a counter may not wait
                    # for its end: the page names the agents while it pages).
                    for by, s in blamed(stream.mark, now - open_gap, self.mark, now,
                                        self.book.names).items():
                        starved[by] += s
            tokens = 0 if stream is None else max(stream.counted_tokens, stream.counted_frames)
            views.append(FlightView(now - flight.sent_at, flight.waiting, tokens, open_gap,
                                    flight.ask is None or flight.ask.bounded))
        return AgentReading(
            name=tally.name,
            requests=dict(tally.requests),
            streams_active=sum(1 for f in self.flights[tally.name] if f.stream is not None),
            prompt_tokens=tally.prompt_tokens,
            cached_prompt_tokens=tally.cached_prompt_tokens,
            generated_tokens=tally.generated_tokens,
            last_prompt_tokens=tally.last_prompt_tokens,
            ttft_buckets=tuple(tally.ttft.buckets()),
            ttft_sum=tally.ttft.sum,
            max_gap_seconds=longest_gap,
            longest_request_seconds=max((v.age_seconds for v in views), default=0.0),
            longest_first_token_wait_seconds=max(
                (v.age_seconds for v in views if v.waiting), default=0.0),
            unbounded_requests=tally.unbounded_requests,
            response_tokens_max=max((v.tokens for v in views), default=0),
            unbounded_response_tokens_max=max(
                (v.tokens for v in views if not v.bounded), default=0),
            starved_seconds=starved,
            in_flight=tuple(views),
        )

    # --- who waits ---------------------------------------------------------------

    def _enter(self, flight: Flight) -> None:
        """Among its agent's requests in flight, waiting for its first token."""
        if flight.entered or flight.ended or flight.tally is None:
            return
        flight.entered = True
        self.flights[flight.tally.name].add(flight)
        if flight.ask is not None and not flight.ask.bounded:
            flight.tally.unbounded_requests += 1
        if flight.stream is None or not flight.stream.ttft_seen:
            flight.waiting = True
            self._waiting[flight.tally.name] += 1
            self._remark()

    def _stop_waiting(self, flight: Flight) -> None:
        if flight.waiting and flight.tally is not None:
            flight.waiting = False
            self._waiting[flight.tally.name] -= 1
            if not self._waiting[flight.tally.name]:
                del self._waiting[flight.tally.name]
            self._remark()

    def _remark(self) -> None:
        self.mark = self.mark.then(self.clock(), frozenset(self._waiting), self.book.names)
