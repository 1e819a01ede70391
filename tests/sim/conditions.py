"""Which alert conditions a pair of exporter scrapes crosses, without Prometheus.

Each check restates one rule of `alerts/rules/*.py` over two scrapes of the
exporter's /metrics: gauges are read from the later scrape, counters as their
increase (and rate) between the two. The `for` durations and the exact range
windows are Prometheus' part, tested end to end; this is the question the
scenario tests ask: do the rig's values cross the condition (and nothing
else's)? Thresholds come scaled to the rig's time (`alerts.timescale.scaled_thresholds`).
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.thresholds import Thresholds
from tests.scrape import Samples

ENGINE = "main"


@dataclass(frozen=True)
class Crossing:
    alert: str
    labels: frozenset[tuple[str, str]] = frozenset()

    def matches(self, alert: str, labels: dict[str, str]) -> bool:
        """Same alert, and the labels this check knows agree with `labels`."""
        mine = dict(self.labels)
        return alert == self.alert and all(labels[k] == v for k, v in mine.items()
                                           if k in labels)


def crossed(first: Samples, later: Samples, seconds: float, t: Thresholds) -> set[Crossing]:
    """Every condition `later` (with the increase since `first`, `seconds` apart) crosses."""
    found: set[Crossing] = set()
    view = _View(first, later, seconds)
    for check in (_engine, _hicache, _gpu, _host):
        found |= check(view, t)
    return found


class _View:
    def __init__(self, first: Samples, later: Samples, seconds: float) -> None:
        self.first, self.later, self.seconds = first, later, seconds

    def gauge(self, metric: str, /, **labels: str) -> float | None:
        return self.later.get((metric, frozenset(labels.items())))

    def increase(self, metric: str, /, **labels: str) -> float | None:
        """The increase of a counter; None if absent now. A counter that appeared
        since `first` counts from its first value (Prometheus would not see that
        step either)."""
        key = (metric, frozenset(labels.items()))
        now = self.later.get(key)
        if now is None:
            return None
        before = self.first.get(key, now)
        return now - before if now >= before else now  # a reset: the new count

    def rate(self, metric: str, /, **labels: str) -> float | None:
        increase = self.increase(metric, **labels)
        return None if increase is None else increase / self.seconds

    def labelled(self, name: str) -> list[tuple[dict[str, str], float]]:
        return [(dict(labels), value) for (n, labels), value in self.later.items() if n == name]


def _c(alert: str, **labels: str) -> Crossing:
    return Crossing(alert, frozenset(labels.items()))


def _engine(v: _View, t: Thresholds) -> set[Crossing]:
    found: set[Crossing] = set()
    e = {"engine": ENGINE, "kind": "sglang"}
    stall_max = v.gauge("rig_engine_decode_stall_max_seconds", **e)
    gaps = (stall_max, v.gauge("rig_probe_max_token_gap_seconds", **e),
            v.gauge("rig_stream_max_token_gap_seconds", **e))
    if any(x is not None and x >= t.decode_stall_critical_seconds for x in gaps):
        found.add(_c("RigDecodeStarvation"))
    if any(x is not None and t.decode_stutter_seconds <= x < t.decode_stall_critical_seconds
           for x in (gaps[0], gaps[2])):
        found.add(_c("RigDecodeStuttering"))
    queued = v.gauge("rig_engine_queued_requests", **e)
    running = v.gauge("rig_engine_running_requests", **e)
    decoded = v.increase("rig_engine_decode_batches_total", **e)
    probe = v.gauge("rig_probe_success", **e)
    if queued and running == 0 and not decoded and probe is None:
        found.add(_c("RigEngineWedged", signal="queue"))
    if queued and running:
        found.add(_c("RigQueueHeadOfLine"))
    up = v.gauge("rig_source_up", source=f"engine/{ENGINE}")
    if up == 0:
        found.add(_c("RigEngineDown"))
    if probe == 0 and up == 1:
        found.add(_c("RigEngineWedged", signal="probe"))
    usage = v.gauge("rig_engine_kv_usage_ratio", **e)
    if usage is not None and usage >= t.kv_usage_ratio:
        found.add(_c("RigKVPoolSaturated", signal="usage"))
    if (v.increase("rig_engine_retracted_requests_total", **e) or 0) > 0:
        found.add(_c("RigKVPoolSaturated", signal="retractions"))
    return found


def _hicache(v: _View, t: Thresholds) -> set[Crossing]:
    found: set[Crossing] = set()
    e = {"engine": ENGINE, "kind": "sglang"}
    prompts = v.increase("rig_engine_prompt_tokens_total", **e) or 0.0
    hits = {tier: v.increase("rig_engine_cache_hit_tokens_total", tier=tier, **e) or 0.0
            for tier in ("L1", "L2", "L3")}
    missing = prompts - sum(hits.values())
    evicted = v.increase("rig_engine_hicache_evicted_tokens_total", **e)
    loaded = v.increase("rig_engine_hicache_loaded_back_tokens_total", **e)
    capacity = v.gauge("rig_engine_hicache_host_capacity_tokens", **e)
    used = v.gauge("rig_engine_hicache_host_used_tokens", **e)
    usage = used / capacity if used is not None and capacity else None
    if evicted is not None and loaded is not None and capacity and prompts > 0:
        churn = min(evicted, loaded) / v.seconds
        if churn >= t.hicache_churn_tokens_per_second and \
                hits["L2"] / prompts < t.hicache_l2_hit_ratio:
            found.add(_c("RigHiCacheThrash", signal="churn"))
    pool_full = usage is not None and usage >= t.hicache_host_pool_ratio
    if missing >= t.hicache_recompute_tokens and (evicted or 0) >= t.hicache_recompute_tokens \
            and pool_full:
        found.add(_c("RigHiCacheThrash", signal="recompute"))
    if pool_full and (evicted or 0) > 0:
        found.add(_c("RigHiCacheHostPoolFull"))
    written = v.increase("rig_engine_hicache_storage_written_tokens_total", **e)
    prefetched = v.increase("rig_engine_hicache_storage_prefetched_tokens_total", **e) or 0.0
    if written and prefetched == 0 and missing >= t.hicache_recompute_tokens \
            and usage is not None and usage >= t.hicache_storage_l2_ratio:
        found.add(_c("RigHiCacheStorageMisses"))
    return found


def _gpu(v: _View, t: Thresholds) -> set[Crossing]:
    found: set[Crossing] = set()
    present = v.labelled("rig_gpu_present")
    for labels, value in present:
        if value == 0:
            found.add(_c("RigGpuMissing", signal="vanished", card=labels["card"]))
    # Cards never seen: fewer read than expected, unless the missing ones are
    # known (a vanished card pages as itself).
    expected = v.gauge("rig_gpu_expected_cards") or 0
    if sum(1 for _, value in present if value == 1) < expected and len(present) < expected:
        found.add(_c("RigGpuMissing", signal="count"))
    for labels, _ in present:
        found |= _card(v, t, labels["card"])
    return found


def _card(v: _View, t: Thresholds, card: str) -> set[Crossing]:
    found: set[Crossing] = set()
    sclk = v.gauge("rig_gpu_clock_hertz", card=card, clock="sclk")
    sclk_max = v.gauge("rig_gpu_clock_max_hertz", card=card, clock="sclk")
    busy = v.gauge("rig_gpu_busy_ratio", card=card)
    headroom = {}
    for sensor in ("edge", "junction", "memory"):
        temp = v.gauge("rig_gpu_temperature_celsius", card=card, sensor=sensor)
        limit = v.gauge("rig_gpu_temperature_limit_celsius", card=card, sensor=sensor,
                        limit="critical")
        if temp is not None and limit is not None:
            headroom[sensor] = limit - temp
    throttled = {r for r in ("power", "thermal_edge", "thermal_memory", "thermal_vr")
                 if v.gauge("rig_gpu_throttle_active", card=card, reason=r) == 1}
    if sclk is not None and sclk_max and busy is not None and sclk / sclk_max < t.gpu_sclk_ratio \
            and busy >= t.gpu_busy_ratio and (
                headroom.get("junction", 1e9) <= t.gpu_junction_margin_celsius
                or throttled & {"thermal_edge", "thermal_memory", "thermal_vr"}):
        found.add(_c("RigGpuThermalDownclock", card=card))
    for sensor in ("junction", "memory"):
        if headroom.get(sensor, 1e9) <= t.gpu_hot_margin_celsius:
            found.add(_c("RigGpuHot", card=card, sensor=sensor))
    watts = v.gauge("rig_gpu_power_watts", card=card)
    cap = v.gauge("rig_gpu_power_cap_watts", card=card)
    if watts is not None and cap is not None and watts >= cap * t.gpu_power_cap_ratio \
            and "power" in throttled:
        found.add(_c("RigGpuPowerCapped", card=card))
    if busy is not None and busy >= t.gpu_busy_ratio:
        for port in ("endpoint", "upstream"):
            for metric, signal in (("rig_gpu_pcie_link_speed_transfers_per_second", "speed"),
                                   ("rig_gpu_pcie_link_width_lanes", "width")):
                now = v.gauge(metric, card=card, port=port, kind="current")
                top = v.gauge(metric, card=card, port=port, kind="max")
                if now is None or top is None or now >= top:
                    continue
                if signal == "speed" or now < t.gpu_pcie_min_width_lanes:
                    found.add(_c("RigGpuPcieDegraded", signal=signal, card=card))
    return found


def _host(v: _View, t: Thresholds) -> set[Crossing]:
    found: set[Crossing] = set()
    swap_io = (v.rate("rig_host_swap_in_bytes_total") or 0.0) + \
        (v.rate("rig_host_swap_out_bytes_total") or 0.0)
    before = v.first.get(("rig_host_swap_used_bytes", frozenset()))
    after = v.gauge("rig_host_swap_used_bytes")
    growth = (after - before) / v.seconds if before is not None and after is not None else 0.0
    if swap_io >= t.host_swap_io_bytes_per_second or growth >= t.host_swap_growth_bytes_per_second:
        found.add(_c("RigHostSwapping"))
    available = v.gauge("rig_host_memory_available_bytes")
    total = v.gauge("rig_host_memory_total_bytes")
    if available is not None and total and available / total < t.host_memory_available_ratio:
        found.add(_c("RigHostMemoryPressure", signal="available"))
    full = v.rate("rig_host_memory_pressure_stall_seconds_total", kind="full")
    if full is not None and full >= t.host_memory_full_stall_ratio:
        found.add(_c("RigHostMemoryPressure", signal="stall"))
    for labels, value in v.labelled("rig_host_cpu_temperature_celsius"):
        if value >= t.cpu_temperature_celsius:
            found.add(_c("RigCpuHot", **labels))
    for labels, value in v.labelled("rig_source_up"):
        if value == 0 and not labels["source"].startswith("engine/"):
            found.add(_c("RigExporterSourceDown", source=labels["source"]))
    return found
