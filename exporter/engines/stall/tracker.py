"""The decode stall tracker: is decode moving while requests are in flight?

What counts as decode progress and as requests in flight depends on the SGLang
release (`stall_signals.py`); where the counters come from depends on the reader
(`stall_readers.py`). While requests are in flight and progress stands still, a stall
is under way. Not stalls: progress that goes down (the engine restarted), an engine
that does not answer (rig_source_up says that), and an engine with nothing in flight.

A stall is measured from the last poll that saw progress to the last poll that saw
none, so the error is within one poll interval (the resolution) either way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from exporter.engines.stall.plans import ProgressView, SignalPlan
from exporter.engines.stall.readers import CounterReader
from exporter.log_limits import Conditions
from exporter.snapshot import SourceError
from exporter.thresholds import Thresholds

log = logging.getLogger(__name__)

#: Shorter standstills are decode's own cadence (a mixed-chunk batch every 0.5 s, a
#: slow token rate), not stalls; the alerts start at 2 s (stutter) and 10 s.
MIN_STALL_SECONDS = 1.0


@dataclass(frozen=True)
class StallState:
    current_seconds: float
    max_recent_seconds: float
    total_seconds: float
    #: How far `max_recent_seconds` looks back.
    window_seconds: float = Thresholds.decode_stall_window_seconds


class DecodeStallTracker:
    """The stall state machine. It never reads a clock: every observation says when."""

    def __init__(self, window_seconds: float = Thresholds.decode_stall_window_seconds,
                 history: int = 512, min_stall_seconds: float = MIN_STALL_SECONDS) -> None:
        self.window_seconds = window_seconds
        self.min_stall_seconds = min_stall_seconds
        self._counter: float | None = None  # None: no baseline (start, or after a gap)
        self._moved_at = 0.0  # the last poll at which decode was known not to be stalled
        self._stalled_to: float | None = None  # the last poll of the stall under way
        self._last_seen = 0.0
        # Finished stalls as (ended at, seconds); bounded, and a window rarely holds many.
        self._finished: deque[tuple[float, float]] = deque(maxlen=history)
        self._finished_seconds = 0.0

    def observe(self, now: float, progress: float, running: float) -> None:
        """One successful poll: the decode-progress counter and the running requests."""
        counter, self._counter = self._counter, progress
        if counter is None or progress < counter or running <= 0:
            # A fresh baseline, a restart (counter reset) or an idle engine: not a stall.
            self._finish(self._last_seen)
            self._moved_at = now
        elif progress > counter:
            self._finish(self._last_seen)
            self._moved_at = now
        else:
            self._stalled_to = now
        self._last_seen = now

    def observe_unreachable(self, now: float) -> None:
        """A failed poll: whatever was under way ends at the last poll that answered."""
        self._finish(self._last_seen)
        self._counter = None
        self._last_seen = now

    def state(self, now: float) -> StallState:
        current = self._current()
        recent = [seconds for ended, seconds in self._finished
                  if ended >= now - self.window_seconds]
        return StallState(current, max([current, *recent]), self._finished_seconds + current,
                          self.window_seconds)

    def _current(self) -> float:
        if self._stalled_to is None:
            return 0.0
        seconds = self._stalled_to - self._moved_at
        return seconds if seconds >= self.min_stall_seconds else 0.0

    def _finish(self, ended_at: float) -> None:
        seconds = self._current()
        if seconds > 0:
            self._finished.append((ended_at, seconds))
            self._finished_seconds += seconds
        self._stalled_to = None


class StallPoller:
    """The background task that feeds a DecodeStallTracker from a CounterReader.

    The reader (multiprocess files or /metrics under a budget) and the release's
    signal plan are chosen once at start; this loop only asks, interprets and
    observes. An observation is stamped when its answer arrives, since that is when
    the counters were read: stamping the ask instead turned the time a poll waited on
    a hung engine into a false stall on recovery (docs/stall-tracker.md#the-state-machine).
    """

    def __init__(self, reader: CounterReader, plan: SignalPlan,
                 clock: Callable[[], float] = time.monotonic,
                 timeout_seconds: float = 2.0,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 window_seconds: float = Thresholds.decode_stall_window_seconds) -> None:
        self.reader = reader
        self.view = ProgressView(plan)
        self.clock = clock
        self.sleep = sleep
        # A poll slower than this is an engine that does not answer, not a stall.
        self.timeout_seconds = timeout_seconds
        self.tracker = DecodeStallTracker(window_seconds)
        self._conditions = Conditions(log, level=logging.ERROR)

    def state(self) -> StallState:
        return self.tracker.state(self.clock())

    def resolution_seconds(self) -> float:
        return self.reader.resolution_seconds()

    async def poll_once(self) -> None:
        asked = self.clock()
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a
            # cancellation that lands as the read completes (CPython gh-86296;
            # docs/stall-tracker.md#stopping).
            async with asyncio.timeout(self.timeout_seconds):
                counters = await self.reader.read()
        except (SourceError, TimeoutError):
            self.tracker.observe_unreachable(asked)
            return
        now = self.clock()
        if now - asked > self.timeout_seconds / 2:
            # A slow answer is a body of unknown age within the wait: it may start a
            # baseline but must not measure a stall.
            self.tracker.observe_unreachable(asked)
        progress = self.view.progress(counters)
        self.tracker.observe(now, progress.decode, progress.in_flight)

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
            next_poll += self.reader.resolution_seconds()
            delay = next_poll - self.clock()
            if delay < 0:  # fell behind (a slow poll): keep the cadence, skip the backlog
                next_poll, delay = self.clock(), 0.0
            await self.sleep(delay)
