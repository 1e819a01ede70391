"""The plan `forward_pass_feed`: SGLang's per-pass feed, kept beside the counter plan.

The feed gives the stall's timing, pass by pass, at no render; the counter plan
(`plans.py`, read at its budget) keeps saying whether requests are in flight and
whether the engine answers at all. The feed is the plan in force while it is live:
heard within `FEED_QUIET_SECONDS`, or silent inside a gap while the engine answers and
requests are in flight (one long pass). Otherwise the counter plan's own stalls are
exported, and the change is logged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from exporter.daemon.engines.stall.feed import FeedSubscriber, cancel_quietly, rank_endpoint
from exporter.daemon.engines.stall.feed_stalls import FeedFigures, FeedStalls
from exporter.daemon.engines.stall.tracker import StallState
from exporter.process.log_limits import Conditions
from exporter.thresholds import Thresholds

log = logging.getLogger(__name__)

#: An idle scheduler sends a heartbeat every second (`HEARTBEAT_INTERVAL`), a busy one
#: a message a pass: silence longer than this is a long pass or a feed gone.
FEED_QUIET_SECONDS = 3.0


class FeedWatch:
    def __init__(self, base: str, engine: str,
                 window_seconds: float = Thresholds.decode_stall_window_seconds,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoint = rank_endpoint(base)
        self.clock = clock
        self.stalls = FeedStalls(window_seconds)
        self.subscriber = FeedSubscriber(self.endpoint, self.stalls.observe, engine, clock)
        self._task: asyncio.Task[None] | None = None
        self._answering = False
        self._in_flight = 0.0
        self._sight = Conditions(log, down="{subject}: {message}",
                                 up="{subject} is the stall tracker's plan again")
        self._subject = f"engine {engine}: forward-pass feed {self.endpoint}"

    def start(self) -> None:
        self._task = asyncio.create_task(self.subscriber.run(),
                                         name=f"forward-pass feed {self.endpoint}")

    async def close(self) -> None:
        await cancel_quietly(self._task)
        self.subscriber.close()

    def live(self, now: float) -> bool:
        last = self.stalls.last_received
        if last is None:
            return False
        quiet = now - last
        live = quiet < FEED_QUIET_SECONDS or (
            self._answering and self._in_flight > 0 and self.stalls.gap_open(now))
        if live:
            self._sight.ok(self._subject)
        else:
            self._sight.failed(self._subject, (
                f"silent for {quiet:.0f} s with nothing in flight or the engine not "
                "answering: the stall tracker reads its counter plan until it speaks"),
                kind="silent")
        return live

    def observe_in_flight(self, asked: float, answered: float, in_flight: float) -> None:
        self._answering, self._in_flight = True, in_flight
        self.stalls.observe_in_flight(asked, answered, in_flight)

    def observe_unreachable(self, now: float) -> None:
        self._answering = False
        self.stalls.observe_unreachable(now)

    def gap_open(self, now: float) -> bool:
        return self.stalls.gap_open(now)

    def state(self, now: float) -> StallState:
        return self.stalls.state(now, self.subscriber.note_drained())

    def figures(self, now: float) -> FeedFigures:
        return self.stalls.figures(now)
