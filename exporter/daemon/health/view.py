"""One snapshot seen as the rig: engines, probes, cards and host by name, the
history that windowed checks read, the thresholds, and the words of a reason."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from exporter.config import EngineConfig
from exporter.daemon.collector.families import engine_label_values
from exporter.daemon.engines.probe import ProbeReading
from exporter.daemon.engines.source import EngineReading
from exporter.daemon.health.history import History
from exporter.daemon.health.report import Signal, Stage
from exporter.daemon.snapshot import Snapshot, SourceResult
from exporter.daemon.sources.gpu import GpuReading
from exporter.daemon.sources.host import HostReading
from exporter.daemon.tap.state import TapReading
from exporter.schema import ENGINE_LABELS
from exporter.thresholds import Thresholds


@dataclass(frozen=True)
class RigView:
    results: dict[str, SourceResult]
    engines: dict[str, EngineReading]
    probes: dict[str, ProbeReading]
    taps: dict[str, TapReading]
    gpu: GpuReading | None
    host: HostReading | None

    @classmethod
    def of(cls, snapshot: Snapshot) -> RigView:
        readings = list(snapshot.readings())
        gpus = [r for r in readings if isinstance(r, GpuReading)]
        hosts = [r for r in readings if isinstance(r, HostReading)]
        return cls(
            results={r.name: r for r in snapshot.results},
            engines={r.name: r for r in readings if isinstance(r, EngineReading)},
            probes={r.name: r for r in readings if isinstance(r, ProbeReading)},
            taps={r.name: r for r in readings if isinstance(r, TapReading)},
            gpu=gpus[0] if gpus else None,
            host=hosts[0] if hosts else None,
        )


@dataclass(frozen=True)
class Context:
    """What every check reads: the rig now, its history, the thresholds."""

    view: RigView
    history: History
    t: Thresholds
    now: float
    engines: tuple[EngineConfig, ...]

    def filled(self, window_seconds: float) -> bool:
        return self.history.filled(self.now, window_seconds)

    def not_filled(self, window_seconds: float) -> str:
        return (f"window not filled yet: watched {seconds(self.history.watched(self.now))}"
                f" of {seconds(window_seconds)}")


def engine_labels(config: EngineConfig) -> dict[str, str]:
    """An engine's check labels: those of its series, so that a check names what its alert does."""
    return dict(zip(ENGINE_LABELS, engine_label_values(config), strict=True))


def history_values(view: RigView) -> Iterator[tuple[tuple[str, ...], float]]:
    """The series the windowed checks need, from one snapshot."""
    for name, engine in view.engines.items():
        values = engine.metrics.values
        for family in ("decode_batches_total", "decode_calls_total", "spec_accepted_tokens_total",
                       "spec_verify_steps_total", "retracted_requests_total",
                       "prompt_tokens_total",
                       "hicache_evicted_tokens_total", "hicache_loaded_back_tokens_total",
                       "hicache_storage_prefetched_tokens_total",
                       "hicache_storage_written_tokens_total"):
            if family in values:
                yield ("engine", name, family), values[family]
        hits = engine.metrics.tiers.get("cache_hit_tokens_total")
        if hits is not None:
            yield ("engine", name, "cache_hit_tokens_total"), sum(hits.values())
            if "L2" in hits:
                yield ("engine", name, "cache_hit_tokens_total:L2"), hits["L2"]
        if engine.stall is not None:
            yield (("engine", name, "decode_stall_estimate_seconds"),
                   engine.stall.longest_estimate_seconds)
    for name, tap in view.taps.items():
        yield ("engine", name, "stream_max_token_gap_seconds"), tap.max_gap_seconds
    if view.host is not None:
        host = view.host
        yield ("host", "swap_io_bytes_total"), host.swap_in_bytes_total + host.swap_out_bytes_total
        yield ("host", "swap_used_bytes"), host.swap_used_bytes
        if "full" in host.pressure_stall_seconds_total:
            yield ("host", "pressure_full_seconds_total"), host.pressure_stall_seconds_total["full"]


def signal(check: str, labels: dict[str, str], alert: str, stages: tuple[Stage, ...],
           holds: bool | None, value: float | None, threshold: float | None, unit: str,
           reason: str, name: str = "", sustained: bool = False) -> Signal:
    return Signal(check, labels, alert, stages, holds, value, threshold, unit, reason, name,
                  sustained)


def seconds(value: float) -> str:
    """45 s, 4m, 2m30s, 1h: short, for one-line reasons."""
    if value < 60:
        return f"{value:.0f} s" if value == int(value) else f"{value:.1f} s"
    minutes, rest = divmod(int(round(value)), 60)
    if minutes >= 60 and minutes % 60 == 0 and not rest:
        return f"{minutes // 60}h"
    return f"{minutes}m{rest:02d}s" if rest else f"{minutes}m"


def percent(ratio: float) -> str:
    return f"{ratio * 100:.0f}%" if ratio * 100 >= 10 else f"{ratio * 100:.1f}%"


def mib(value: float) -> str:
    return f"{value / 1024 / 1024:.1f} MiB"
