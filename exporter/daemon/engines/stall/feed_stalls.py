"""Decode stalls from SGLang's forward-pass feed (docs/stall-tracker.md#the-forward-pass-feed).

A stall is the time between two decode-bearing passes (decode or mixed) while a
request is decoding. Each message is stamped when it is taken (`received`); the
messages carry no send time, and `wall_time` is the pass's device time. So, for the
decode-bearing passes P and Q that bound a gap:

- **at least** the device time of every pass after P up to Q, Q's own included:
  they ran one after another between P's end and Q's; and at least from P's receipt
  to when the socket was last found empty before Q came (Q ended after it, less the
  time a message takes to come, `SEND_SLACK_SECONDS`, as long as the publisher sends
  a pass's message before the next pass ends);
- **at most** from when the socket was last found empty before P came, less that
  time, to Q's receipt.

A sequence number skipped is a message lost, which may have been a decode pass: the
device time before the loss and after it are then two runs, and the lower bound is
the longer one, while the upper bound still spans the whole gap. A silent feed is a
pass under way: it leaves the stall open for as long as the engine's /metrics says
requests are in flight, and a /metrics that fails ends it, as a failed poll does.

Whether a request is decoding comes from the tracker's own readings of the engine's
counters (`observe_in_flight`, the plan's judgement, at its budget): a gap counts
only if a reading taken within it saw requests in flight and none saw none. The feed
alone cannot tell "A waits while B prefills" from "A finished, then B arrived": both
are a decode pass, prefill passes, a decode pass.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from exporter.daemon.engines.stall.feed import PASS_KINDS, ForwardPass
from exporter.daemon.engines.stall.tracker import StallState
from exporter.thresholds import MIN_STALL_SECONDS, Thresholds

#: A message's time from its pass's end to the exporter's socket (the publisher
#: thread's wake-up, the transport): the bounds drawn from receipts are widened by it.
SEND_SLACK_SECONDS = 0.02
#: A message this long after the last decode-bearing pass, or a pass without decode,
#: means a gap is open: the tracker then reads requests in flight at its floor.
GAP_OPEN_SECONDS = 0.25


@dataclass(frozen=True)
class PrefillRun:
    """Consecutive prefill-only passes: their device time and how many."""

    seconds: float = 0.0
    passes: int = 0


@dataclass(frozen=True)
class FeedFigures:
    """What the feed says beyond stalls, for the collector."""

    passes: dict[str, int] = field(default_factory=dict)
    #: Messages missing from the sequence since the exporter started.
    dropped: int = 0
    #: The longest run of prefill-only passes that ended within the window, or runs on.
    longest_prefill_run: PrefillRun = PrefillRun()


class FeedStalls:
    """The state machine; it reads no clock, every call says when."""

    def __init__(self, window_seconds: float = Thresholds.decode_stall_window_seconds,
                 min_stall_seconds: float = MIN_STALL_SECONDS, history: int = 512) -> None:
        self.window_seconds = window_seconds
        self.min_stall_seconds = min_stall_seconds
        self.passes = dict.fromkeys(PASS_KINDS, 0)
        self.dropped = 0
        self.last_received: float | None = None
        self.last_kind = ""
        self._seq: int | None = None
        # The last decode-bearing pass: (socket last empty before it, its receipt).
        self._decoded: tuple[float, float] | None = None
        self._run_wall = 0.0   # device time since it, and since the last loss
        # Decode may have moved by this receipt: P's, or the first after a loss.
        self._anchor = 0.0
        self._last_drained = 0.0
        # The longest stall known before the last loss (a lost message may have been
        # a decode pass), at least.
        self._best_wall = 0.0
        self._readings: deque[tuple[float, float, float]] = deque(maxlen=history)
        self._finished: deque[tuple[float, float, float]] = deque(maxlen=history)
        self._finished_seconds = 0.0
        self._losses: deque[tuple[float, float]] = deque(maxlen=history)  # (at, span)
        self._prefill = PrefillRun()
        self._prefill_runs: deque[tuple[float, PrefillRun]] = deque(maxlen=history)

    # -- what comes in ---------------------------------------------------------------

    def observe(self, received: float, seq: int, message: ForwardPass,
                drained_before: float) -> None:
        kind = message.kind
        self.passes[kind] += 1
        if self._seq is not None and seq <= self._seq:
            # The numbers started again: the engine restarted. Nothing spans it.
            self._decoded = None
            self._end_prefill_run(received)
        elif self._seq is not None and seq > self._seq + 1:
            self.dropped += seq - self._seq - 1
            if self.last_received is not None:
                self._losses.append((received, received - self.last_received))
            if self._decoded is not None:
                self._best_wall = max(self._best_wall, self._run_wall,
                                      self._last_drained - self._anchor)
                self._anchor = received
            self._run_wall = 0.0
            self._end_prefill_run(received)
        self._seq = seq
        self.last_received, self.last_kind = received, kind
        self._last_drained = drained_before
        wall = message.device_seconds
        if kind == "prefill":
            self._prefill = PrefillRun(self._prefill.seconds + wall, self._prefill.passes + 1)
        else:
            self._end_prefill_run(received)
        if kind in ("decode", "mixed"):
            if self._decoded is not None:
                self._record(received, self._run_wall + wall, drained_before)
            self._decoded = (drained_before, received)
            self._anchor = received
            self._run_wall = self._best_wall = 0.0
        elif kind == "idle":
            # Heartbeats come only while the scheduler is idle: nothing decodes.
            self._end(received, drained_before)
        else:
            self._run_wall += wall

    def observe_in_flight(self, asked: float, answered: float, in_flight: float) -> None:
        """One reading of the engine's counters: requests decoding, by the plan."""
        self._readings.append((asked, answered, in_flight))

    def observe_unreachable(self, now: float) -> None:
        """The engine's /metrics failed: a silent feed is then a dead engine, not a long
        pass. What was under way ends at the last reading that answered."""
        last = max((r[1] for r in self._readings), default=None)
        if self._decoded is not None and last is not None:
            self._end(last, last)
        self._decoded = None
        self._readings.clear()

    # -- what goes out ---------------------------------------------------------------

    def gap_open(self, now: float) -> bool:
        """Decode has not been seen for a moment, or a pass without decode came."""
        if self._decoded is None:
            return False
        return (now - self._decoded[1] >= GAP_OPEN_SECONDS
                or self.last_kind not in ("decode", "mixed"))

    def state(self, now: float, drained_at: float) -> StallState:
        lower, upper = self._open(now, drained_at)
        recent = [(low, high) for at, low, high in self._finished
                  if at >= now - self.window_seconds]
        losses = [span for at, span in self._losses if at >= now - self.window_seconds]
        return StallState(lower, max([lower, *(low for low, _ in recent)]),
                          self._finished_seconds + lower, upper,
                          max([upper, *(high for _, high in recent)]), self.window_seconds,
                          max(losses, default=0.0))

    def figures(self, now: float) -> FeedFigures:
        runs = [run for at, run in self._prefill_runs if at >= now - self.window_seconds]
        longest = max([self._prefill, *runs], key=lambda run: (run.seconds, run.passes))
        return FeedFigures(dict(self.passes), self.dropped, longest)

    # -- inside ----------------------------------------------------------------------

    def _bounds(self, device_seconds: float, drained_before: float,
                answered: float) -> tuple[float, float]:
        assert self._decoded is not None
        lower = max(self._best_wall, device_seconds,
                    drained_before - SEND_SLACK_SECONDS - self._anchor)
        return lower, max(lower, answered - self._decoded[0] + SEND_SLACK_SECONDS)

    def _in_flight_within(self, start: float, end: float) -> bool:
        inside = [in_flight for asked, answered, in_flight in self._readings
                  if asked >= start and answered <= end]
        return bool(inside) and min(inside) > 0

    def _open(self, now: float, drained_at: float) -> tuple[float, float]:
        """The stall under way's bounds, (0, 0) when none is known."""
        if self._decoded is None:
            return 0.0, 0.0
        lower, upper = self._bounds(max(self._best_wall, self._run_wall), drained_at, now)
        if lower < self.min_stall_seconds or not self._in_flight_within(self._decoded[1],
                                                                        drained_at):
            return 0.0, 0.0
        return lower, upper

    def _record(self, received: float, device_seconds: float, drained_before: float) -> None:
        assert self._decoded is not None
        lower, upper = self._bounds(device_seconds, drained_before, received)
        if lower >= self.min_stall_seconds and self._in_flight_within(self._decoded[1],
                                                                      drained_before):
            self._finished.append((received, lower, upper))
            self._finished_seconds += lower
        self._trim(received)

    def _end(self, answered: float, drained_before: float) -> None:
        """Nothing decodes any more: a stall under way ends, with what is known."""
        if self._decoded is not None:
            self._record(answered, max(self._best_wall, self._run_wall), drained_before)
        self._decoded = None
        self._run_wall = self._best_wall = 0.0

    def _end_prefill_run(self, at: float) -> None:
        if self._prefill.passes:
            self._prefill_runs.append((at, self._prefill))
            self._prefill = PrefillRun()

    def _trim(self, now: float) -> None:
        horizon = now - 2 * self.window_seconds
        while self._readings and self._readings[0][1] < horizon:
            self._readings.popleft()
