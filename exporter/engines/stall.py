"""The decode stall tracker: at 4 Hz, is decode moving while requests are running?

SGLang's gauges refresh only every 40 decode batches or on a prefill batch, so the
tracker follows a counter (DESIGN §3): `cuda_graph_passes_total{mode=~"decode_.*"}`
moves once per decode batch (reference/sglang-metrics.md §3.3). While requests run
and the counter stands still, a stall is under way. Not stalls: a counter that goes
down (the engine restarted), an engine that does not answer (rig_source_up says
that), and an engine with nothing running.

A stall is measured from the last poll that saw progress to the last poll that saw
none, so with polls every 0.25 s the error is within ±0.25 s either way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from exporter.engines.exposition import parse
from exporter.engines.mapping import EngineTable
from exporter.engines.normalise import scalar, wanted_names
from exporter.sources.base import SourceError

log = logging.getLogger(__name__)

#: rig_engine_decode_stall_max_seconds looks back this far (DESIGN §2).
MAX_WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class StallState:
    current_seconds: float
    max_recent_seconds: float
    total_seconds: float


class DecodeStallTracker:
    """The stall state machine. It never reads a clock: every observation says when."""

    def __init__(self, window_seconds: float = MAX_WINDOW_SECONDS, history: int = 512) -> None:
        self.window_seconds = window_seconds
        self._counter: float | None = None  # None: no baseline (start, or after a gap)
        self._moved_at = 0.0  # the last poll at which decode was known not to be stalled
        self._stalled_to: float | None = None  # the last poll of the stall under way
        self._last_seen = 0.0
        # Finished stalls as (ended at, seconds); bounded, and 60 s rarely holds many.
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
        return StallState(current, max([current, *recent]), self._finished_seconds + current)

    def _current(self) -> float:
        return 0.0 if self._stalled_to is None else self._stalled_to - self._moved_at

    def _finish(self, ended_at: float) -> None:
        seconds = self._current()
        if seconds > 0:
            self._finished.append((ended_at, seconds))
            self._finished_seconds += seconds
        self._stalled_to = None


class StallPoller:
    """The background task that feeds a DecodeStallTracker from the engine's /metrics.

    `read_metrics` returns the body (raising SourceError when the engine does not
    answer); only the two families the tracker needs are parsed.
    """

    def __init__(self, read_metrics: Callable[[], Awaitable[str]], table: EngineTable,
                 interval_seconds: float = 0.25,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.read_metrics = read_metrics
        self.table = table
        self.interval_seconds = interval_seconds
        self.clock = clock
        self.tracker = DecodeStallTracker()
        self._wanted = wanted_names(table, (table.decode_progress, table.running))
        # A poll slower than this is an engine that does not answer, not a stall.
        self.timeout_seconds = max(2.0, 4 * interval_seconds)

    def state(self) -> StallState:
        return self.tracker.state(self.clock())

    async def poll_once(self) -> None:
        now = self.clock()
        try:
            text = await asyncio.wait_for(self.read_metrics(), self.timeout_seconds)
        except (SourceError, TimeoutError):
            self.tracker.observe_unreachable(now)
            return
        exposition = parse(text, self._wanted)
        if exposition.type_lines == 0:
            self.tracker.observe_unreachable(now)
            return
        # A family the engine has not created yet is a counter still at zero
        # (SGLang creates it on first use, reference §2.2): after a restart that
        # reads as a reset, which is what it is.
        progress = scalar(exposition, self.table, self.table.decode_progress) or 0.0
        running = scalar(exposition, self.table, self.table.running) or 0.0
        self.tracker.observe(now, progress, running)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_poll = loop.time()
        while True:
            try:
                await self.poll_once()
            except Exception:  # a bug must not end tracking for the exporter's lifetime
                log.exception("stall tracker poll failed")
                self.tracker.observe_unreachable(self.clock())
            next_poll += self.interval_seconds
            delay = next_poll - loop.time()
            if delay < 0:  # fell behind (a slow poll): keep the cadence, skip the backlog
                next_poll, delay = loop.time(), 0.0
            await asyncio.sleep(delay)
