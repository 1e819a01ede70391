"""The simulated scheduler's own time: what SGLang 0.5.23 counts in
`scheduler_process_cpu_seconds_total`, `scheduler_idle_seconds_total` and
`scheduler_stage_seconds_total{category,forward_overlap}`.

SGLang adds to the three together, at most once a second
(`_SCHEDULER_TIME_ACCOUNTING_INTERVAL_NS`, `_record_scheduler_time` in
`srt/managers/scheduler_components/metrics_reporter.py`); so does this. A busy
scheduler's loop time is split over its stages in fixed shares (a model, not a
measurement: the shares of the capture this simulator's template comes from), and it
gets `cpu_share` CPU-seconds per busy second: about one core (the capture's schedulers
got 1.13 counting their idle CPU), or less when it is starved (`/sim/set
{"scheduler_cpu_share": 0.3}`). Idle, it spends little CPU. Every TP rank is its own
scheduler process with its own counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: SGLang's stage categories (`SCHEDULER_STAGE_CATEGORIES`,
#: srt/observability/scheduler_stage_metrics.py), and the share of a busy loop each
#: took in the capture (tests/fixtures/engine/sglang-0.5.23-metrics-multiproc-b.txt).
BUSY_STAGES = {"run_batch": 0.781, "process_batch_result": 0.112,
               "get_next_batch_to_run": 0.048, "recv_requests": 0.022,
               "process_input_requests": 0.002, "process_queue": 0.006,
               "sanity_check_cache": 0.001, "other": 0.028}
STAGES = (*BUSY_STAGES, "idle")
#: CPU an idle scheduler spends per second (its poll of the request socket).
IDLE_CPU_SHARE = 0.02
FLUSH_SECONDS = 1.0


@dataclass
class SchedulerTime:
    cpu_share: float = 0.97
    busy: float = 0.0
    idle: float = 0.0
    cpu: float = 0.0
    #: What the counters show: the totals at the last flush (SGLang creates them at
    #: 0 when its collector starts).
    shown: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("cpu", "idle", *BUSY_STAGES, "stage:idle"), 0.0))
    _since_flush: float = 0.0

    def spend(self, seconds: float, busy: bool) -> None:
        if seconds <= 0:
            return
        if busy:
            self.busy += seconds
            self.cpu += seconds * self.cpu_share
        else:
            self.idle += seconds
            self.cpu += seconds * IDLE_CPU_SHARE
        self._since_flush += seconds
        if self._since_flush >= FLUSH_SECONDS:
            self._since_flush = 0.0
            self.shown = {"cpu": self.cpu, "idle": self.idle,
                          **{stage: self.busy * share for stage, share in BUSY_STAGES.items()},
                          "stage:idle": self.idle}

    def stage(self, category: str) -> float | None:
        """A stage's seconds as shown; None for a category this model does not know."""
        return self.shown.get("stage:idle" if category == "idle" else category)
