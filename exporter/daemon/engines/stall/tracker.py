"""The decode stall tracker: is decode moving while requests are in flight?

What counts as decode progress and as requests in flight is the plan's
(`plans.py`, chosen by `planner.py`); where the counters come from is the reader's
(`readers.py`). While requests are in flight and progress stands still, a stall is
under way. Not stalls: progress that goes down (the engine restarted), an engine
that fails (rig_source_up says that), and an engine with nothing in flight.

A stall is known only between polls (docs/stall-tracker.md#honest-bounds), and each
poll's counters describe the engine at some moment between when they were asked for
and when they were answered. Its lower bound runs from the answer that last saw
progress to the ask of the last poll that saw none; its upper bound from the ask of
the poll before that progress to the answer that saw the stall over (decode moving,
nothing in flight, or a failed poll; a poll that times out ends nothing). Both are
exported; the alerts judge their midpoint.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, Protocol

from exporter.daemon.engines.stall.planner import SignalChooser
from exporter.daemon.engines.stall.plans import SignalPlan, feed_plan
from exporter.daemon.engines.stall.readers import CounterReader, Shown, TrackerBlind
from exporter.daemon.snapshot import SourceError
from exporter.process.log_limits import Conditions
from exporter.thresholds import MIN_STALL_SECONDS, Thresholds

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrackerStatus:
    """Whether the tracker sees; when not, why (a `readers.CAUSES` key and a sentence
    naming where it looked and what it found)."""

    up: bool
    cause: str = ""
    reason: str = ""


@dataclass(frozen=True)
class StallState:
    current_seconds: float
    max_recent_seconds: float
    total_seconds: float
    #: The upper bounds of the stall under way and of the longest one in the window.
    current_upper_seconds: float
    max_recent_upper_seconds: float
    #: How far `max_recent_seconds` looks back.
    window_seconds: float = Thresholds.decode_stall_window_seconds
    #: The longest span in the window from one reading's ask to the next one's answer:
    #: a stall shorter than it could have passed between them unseen. None before two
    #: readings (docs/stall-tracker.md#blind-spans).
    max_recent_blind_seconds: float | None = None

    @property
    def longest_estimate_seconds(self) -> float:
        """The middle of the longest stall's bounds: what the alerts judge."""
        return (self.max_recent_seconds + self.max_recent_upper_seconds) / 2


class DecodeStallTracker:
    """The stall state machine. It never reads a clock: every observation says when it
    was asked for and answered, and readings come in the order of the moments they
    describe (each asked for after the previous one was answered)."""

    def __init__(self, window_seconds: float = Thresholds.decode_stall_window_seconds,
                 history: int = 512, min_stall_seconds: float = MIN_STALL_SECONDS) -> None:
        self.window_seconds = window_seconds
        self.min_stall_seconds = min_stall_seconds
        self._counter: float | None = None  # None: no baseline (start, or after a gap)
        # Decode last moved after the ask of one reading and by the answer of the next:
        # the stall began in (_moved_after, _moved_at].
        self._moved_after = 0.0
        self._moved_at = 0.0
        # The last reading of the stall under way, (asked, answered).
        self._stalled_to: tuple[float, float] | None = None
        self._last_asked = 0.0
        self._last_answered = 0.0
        self._in_flight = False
        # Finished stalls as (ended at, lower, upper); bounded, a window rarely holds many.
        self._finished: deque[tuple[float, float, float]] = deque(maxlen=history)
        self._finished_seconds = 0.0
        # Blind spans as (answered, seconds), each longer than every one after it: the
        # first within the window is the window's longest (a sliding maximum).
        self._blind: deque[tuple[float, float]] = deque()

    @property
    def standing_still(self) -> bool:
        """The last reading saw requests in flight and no progress."""
        return self._stalled_to is not None and self._stalled_to[1] == self._last_answered

    def observe(self, answered: float, progress: float, running: float,
                asked: float | None = None) -> None:
        """One successful reading: the decode-progress counter and the running requests,
        asked for at `asked` (default: `answered`, an instant reading)."""
        asked = answered if asked is None else asked
        counter, self._counter = self._counter, progress
        if counter is not None:
            self._note_blind(answered, answered - self._last_asked)
        if counter is None or progress < counter or running <= 0:
            # A fresh baseline, a restart (counter reset) or an idle engine: not a stall,
            # and one measured from here on.
            self._finish(answered)
            self._moved_after, self._moved_at = asked, answered
        elif progress > counter or not self._in_flight:
            # Decode moved since the last reading, or requests came in flight since it.
            self._finish(answered)
            self._moved_after, self._moved_at = self._last_asked, answered
        else:
            self._stalled_to = (asked, answered)
        self._in_flight = running > 0
        self._last_asked, self._last_answered = asked, answered

    def observe_unreachable(self, now: float) -> None:
        """A failed poll: whatever was under way ends at the last poll that answered."""
        self._finish(now)
        self._counter = None
        self._in_flight = False
        self._last_asked = self._last_answered = now

    def recent(self, now: float) -> list[tuple[float, float, float]]:
        """The stalls that ended within the window: (ended at, lower, upper bound)."""
        return [stall for stall in self._finished if stall[0] >= now - self.window_seconds]

    def state(self, now: float) -> StallState:
        lower, upper = self._current()
        recent = [(low, high) for _, low, high in self.recent(now)]
        blind = next((span for at, span in self._blind if at >= now - self.window_seconds),
                     None)
        return StallState(lower, max([lower, *(low for low, _ in recent)]),
                          self._finished_seconds + lower, upper,
                          max([upper, *(high for _, high in recent)]), self.window_seconds,
                          blind)

    def _note_blind(self, answered: float, span: float) -> None:
        while self._blind and self._blind[-1][1] <= span:
            self._blind.pop()
        while self._blind and self._blind[0][0] < answered - self.window_seconds:
            self._blind.popleft()
        self._blind.append((answered, span))

    def _current(self, until: float | None = None) -> tuple[float, float]:
        """The stall under way's bounds; `until`: the answer that saw it over."""
        if self._stalled_to is None:
            return 0.0, 0.0
        asked, answered = self._stalled_to
        lower = asked - self._moved_at
        if lower < self.min_stall_seconds:
            return 0.0, 0.0
        return lower, (answered if until is None else until) - self._moved_after

    def _finish(self, ended_by: float) -> None:
        """End the stall under way: `ended_by` is when the reading that saw it over
        was answered."""
        lower, upper = self._current(ended_by)
        if lower > 0:
            self._finished.append((self._last_answered, lower, upper))
            self._finished_seconds += lower
        self._stalled_to = None


class FeedSight(Protocol):
    """What the poller asks of SGLang's forward-pass feed (feed_watch.FeedWatch)."""

    def live(self, now: float) -> bool: ...

    def gap_open(self, now: float) -> bool: ...

    def state(self, now: float) -> StallState: ...

    def observe_in_flight(self, asked: float, answered: float, in_flight: float) -> None: ...

    def observe_unreachable(self, now: float) -> None: ...


class StallPoller(Generic[Shown]):
    """The background task that feeds a DecodeStallTracker from a CounterReader.

    The reader (multiprocess files or /metrics under a budget) is chosen once at
    start; the planner chooses the signals and may change them as evidence arrives.
    This loop only asks, interprets and observes. Each observation carries the times
    its counters were asked for and answered, the reader's (a reused body's own), so
    that the bounds hold however late an answer comes
    (docs/stall-tracker.md#honest-bounds). While decode stands still the reader is
    asked at its floor, so that the stall's end is known closely.
    """

    def __init__(self, reader: CounterReader[Shown], planner: SignalChooser[Shown],
                 clock: Callable[[], float] = time.monotonic,
                 timeout_seconds: float = 2.0,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 window_seconds: float = Thresholds.decode_stall_window_seconds,
                 feed: FeedSight | None = None) -> None:
        self.reader = reader
        self.planner = planner
        #: SGLang's forward-pass feed, the plan in force while it is live; the counters
        #: read here then say only whether requests are in flight (feed_watch.py).
        self.feed = feed
        # The exported stalled-seconds total stays a counter across plan changes.
        self._total_source = ""
        self._total_offset = 0.0
        self._total_last = 0.0
        self.clock = clock
        self.sleep = sleep
        # A poll slower than this got no answer: it neither begins nor ends a stall.
        self.timeout_seconds = timeout_seconds
        self.tracker = DecodeStallTracker(window_seconds)
        self._conditions = Conditions(log, level=logging.ERROR)
        self._blindness = Conditions(
            log, down="{subject} cannot see: {message}; rig_engine_decode_stall_* stay "
                      "absent", up="{subject} sees again")
        self._subject = f"engine {planner.engine}: the stall tracker"
        # Polls that time out: the tracker is blind for their span, which no series
        # shows (a scrape, with its longer deadline, may still succeed).
        self._silences = Conditions(log, up="{subject} answered again")
        self._poll_subject = f"{self._subject}'s poll"
        self.blind: TrackerBlind | None = None

    def status(self) -> TrackerStatus:
        if self.blind is not None:
            return TrackerStatus(False, self.blind.cause, str(self.blind))
        if self.planner.plan is None:
            return TrackerStatus(False, "no_plan", self.planner.choice.note)
        return TrackerStatus(True)

    def feed_live(self) -> bool:
        return self.feed is not None and self.feed.live(self.clock())

    @property
    def plan(self) -> SignalPlan | None:
        """The plan in force: the feed's while it is live, else the counters'."""
        plan = self.planner.plan
        if plan is not None and self.feed_live():
            return feed_plan(plan)
        return plan

    def state(self) -> StallState | None:
        """None while it cannot see or no plan can be trusted: the stall series stay
        absent, never an invented 0 (docs/stall-tracker.md#when-the-tracker-cannot-see)."""
        if not self.status().up:
            return None
        now = self.clock()
        source = "feed" if self.feed is not None and self.feed_live() else "counters"
        state = (self.feed.state(now) if source == "feed" and self.feed is not None
                 else self.tracker.state(now))
        if source != self._total_source:
            # Each plan counts its own stalls: carry the total over from the other one.
            if self._total_source:
                self._total_offset = self._total_last - state.total_seconds
            self._total_source = source
        total = max(self._total_last, state.total_seconds + self._total_offset)
        self._total_last = total
        return dataclasses.replace(state, total_seconds=total)

    def resolution_seconds(self) -> float:
        # An open gap in the feed is decode standing still: read the counters at the
        # floor, so that whether requests are in flight through it is known.
        still = self.tracker.standing_still or (
            self.feed is not None and self.feed.gap_open(self.clock()))
        return self.reader.resolution_seconds(still)

    async def poll_once(self) -> None:
        asked = self.clock()
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a
            # cancellation that lands as the read completes (CPython gh-86296;
            # docs/stall-tracker.md#stopping).
            async with asyncio.timeout(self.timeout_seconds):
                reading = await self.reader.read()
        except TrackerBlind as exc:
            self._see(exc)
            self.tracker.observe_unreachable(asked)
            if self.feed is not None:
                self.feed.observe_unreachable(asked)
            return
        except TimeoutError:
            # No answer in time says nothing about decode: the next reading is compared
            # with the last, so a stall under way stays open and its bounds hold (ending
            # it here cut one long stall into pieces under every threshold).
            self._silences.failed(self._poll_subject, (
                f"no answer within {self.timeout_seconds:g} s; the next answer is compared "
                "with the last, and a stall under way stays open"), kind="timeout")
            return
        except SourceError:
            # Refused, reset, or the reader's own budget run out: as with a timeout, no
            # answer says nothing about decode. The stall under way stays open and the
            # next answer closes it if decode moved, its upper bound running to that
            # answer; ending it here read a 12 s stall with the engine silent from its
            # 4th second as a 4 s one. The outage itself is the engine source's
            # (rig_source_up 0) and the span without an answer the blind span's.
            if self.feed is not None:
                # The feed's silence is a long pass only while /metrics answers: with
                # /metrics refused too, the feed's gap ends at its last answered reading.
                self.feed.observe_unreachable(asked)
            return
        self._see(None)
        self._silences.ok(self._poll_subject)
        # A slow answer is observed like any other: its ask and answer bound the moment
        # it describes, and the bounds hold whatever lies between them. Leaving such
        # readings out, as the tracker did, blinded it through a whole stall when a
        # busy engine answered every poll in 1-2 s, and read that stall as none.
        progress = self.planner.progress(reading.counters, reading.answered_at)
        if progress is not None:
            self.tracker.observe(reading.answered_at, progress.decode, progress.in_flight,
                                 asked=reading.asked_at)
            if self.feed is not None:
                self.feed.observe_in_flight(reading.asked_at, reading.answered_at,
                                            progress.in_flight)

    def _see(self, blind: TrackerBlind | None) -> None:
        """Log each change of sight once: the cause and what the reader found."""
        self.blind = blind
        if blind is None:
            self._blindness.ok(self._subject)
        else:
            self._blindness.failed(self._subject, str(blind), kind=blind.cause)

    async def run(self) -> None:
        next_poll = self.clock()
        while True:
            try:
                await self.poll_once()
            except Exception as exc:  # a bug must not end tracking for the exporter's lifetime
                # 4 polls a second: the traceback once an interval, not each time.
                self._conditions.failed("stall tracker poll", f"{type(exc).__name__}: {exc}",
                                        kind=type(exc).__name__, exc=exc)
                self.tracker.observe_unreachable(self.clock())
            else:
                self._conditions.ok("stall tracker poll")
            next_poll += self.resolution_seconds()
            delay = next_poll - self.clock()
            if delay < 0:  # fell behind (a slow poll): keep the cadence, skip the backlog
                next_poll, delay = self.clock(), 0.0
            await self._wait(delay)

    async def _wait(self, delay: float) -> None:
        """Sleep until the next poll; with the feed, wake at the floor to poll at once
        when a gap opens (a long pass sends nothing until it ends)."""
        if self.feed is None:
            await self.sleep(delay)
            return
        step = self.reader.resolution_seconds(True)
        end = self.clock() + delay
        while (left := end - self.clock()) > 0:
            await self.sleep(min(left, step))
            if self.feed.gap_open(self.clock()):
                return
