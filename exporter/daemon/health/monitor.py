"""The health monitor: it watches every snapshot the exporter reads and keeps
the verdict up to date.

Each snapshot (a scrape, a health request, or the background sampler when
neither came for a while) feeds the history and is judged. A check says what
holds now, at its rule's gravest severity (critical: crit, warning: warn, info:
ok): a card downclocking now is the answer to "is my rig OK?", though its alert
waits 2 minutes to warn and 10 to page. The reason says how long the condition
has held (as the exporter has watched it) and when the alert fires.

The exception are the conditions that a busy, healthy rig passes through
(`Signal.sustained`: a queue, a full KV or L2 pool, requests queued with none
running during a long prefill): those count only once they have held for their
rule's `for`, and until then show ok with the time held in the reason.

Each check also gives the state its alert would be in (inactive, pending,
firing). Where several conditions of a check are judged (the rules' `signal`,
or the readings one rule combines), its line reports the worst status and,
among equals, the one whose alert has got furthest: a firing rule before a
pending one, a pending one before one that does not hold.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

from exporter.config import EngineConfig
from exporter.daemon.health.agents import agent_signals, agents_section
from exporter.daemon.health.engine import engine_signals
from exporter.daemon.health.gpu import gpu_signals
from exporter.daemon.health.hicache import hicache_signals
from exporter.daemon.health.history import History
from exporter.daemon.health.host import host_signals, source_signals
from exporter.daemon.health.report import (
    SEVERITY_STATUS,
    Check,
    HealthStatus,
    Report,
    Signal,
    State,
    worst_first,
)
from exporter.daemon.health.view import Context, RigView, history_values, seconds
from exporter.daemon.snapshot import Snapshot
from exporter.thresholds import Thresholds

SIGNALS = (engine_signals, hicache_signals, gpu_signals, host_signals, source_signals,
           agent_signals)


class HealthMonitor:
    def __init__(self, thresholds: Thresholds, engines: tuple[EngineConfig, ...] = (),
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.wall_clock = wall_clock
        self.history = History(keep_seconds=0)
        self._held_since: dict[Hashable, float] = {}
        self.last_observed: float | None = None
        self.report: Report | None = None
        self.snapshot = Snapshot(())  # the one the report judged
        self.reconfigure(thresholds, engines)

    def reconfigure(self, thresholds: Thresholds, engines: tuple[EngineConfig, ...]) -> None:
        """New thresholds or engines (a config reload); the history and holds stay."""
        self.thresholds = thresholds
        self.engines = engines
        windows = [getattr(thresholds, f) for f in thresholds.__dataclass_fields__
                   if f.endswith("_window_seconds")]
        self.history.keep_seconds = max(windows) + 60
        # Ten samples or more in the shortest window, and none closer than 5 s
        # apart at the defaults, however often the exporter is scraped.
        self.history.min_spacing_seconds = min(5.0, min(windows) / 10)

    def observe(self, snapshot: Snapshot) -> Report:
        now = self.clock()
        self.last_observed = now
        self.snapshot = snapshot
        view = RigView.of(snapshot)
        self.history.record(now, history_values(view))
        context = Context(view, self.history, self.thresholds, now, self.engines)
        signals = [s for judge in SIGNALS for s in judge(context)]
        self.report = Report(self._checks(signals, now), self.wall_clock(),
                             self.history.watched(now), tuple(agents_section(view)))
        return self.report

    def _checks(self, signals: list[Signal], now: float) -> tuple[Check, ...]:
        held_keys = set()
        merged: dict[tuple[str, tuple[tuple[str, str], ...]], Check] = {}
        for sig in signals:
            key = (sig.check, tuple(sorted(sig.labels.items())), sig.signal)
            held = 0.0
            if sig.holds:
                held = now - self._held_since.setdefault(key, now)
                held_keys.add(key)
            check = _judge(sig, held)
            slot = key[:2]
            if slot not in merged or _rank(check) > _rank(merged[slot]):
                merged[slot] = check
        # A condition that stopped holding starts its hold again next time.
        for key in set(self._held_since) - held_keys:
            del self._held_since[key]
        return worst_first(list(merged.values()))


def _rank(check: Check) -> tuple[int, int]:
    return check.status.rank, -1 if check.state is None else check.state.rank


def _judge(sig: Signal, held: float) -> Check:
    reason = sig.reason
    state = None if sig.holds is None else State.INACTIVE
    if sig.holds is None:
        status = HealthStatus.UNKNOWN
    elif not sig.holds:
        status = HealthStatus.OK
    else:
        first = sig.stages[0]
        reached = [stage for stage in sig.stages if held >= stage.hold_seconds]
        state = State.FIRING if reached else State.PENDING
        if not sig.sustained:
            status = SEVERITY_STATUS[sig.stages[-1].severity]
        elif reached:
            status = SEVERITY_STATUS[reached[-1].severity]
        else:
            status = HealthStatus.OK
        if not reached:
            reason += (f" (for {seconds(held)}; {sig.alert} fires after "
                       f"{seconds(first.hold_seconds)})")
        elif held:
            reason += f" (for {seconds(held)})"
    return Check(sig.check, status, sig.value, sig.threshold, sig.unit, reason,
                 dict(sig.labels), sig.alert, sig.signal, state)
