"""Alert thresholds and hold durations: the one place they live.

`alerts/generate.py` renders the Prometheus rules from these values, the
dashboards draw their threshold lines from them and the exporter's
`/api/health` (read by `rigctl health`) judges against them. The owner changes
a value in one place, the `[thresholds]` table of the exporter's config file:
the exporter validates it with `Thresholds.from_mapping`, and the generators
read the same table with `thresholds_from_config(path)`.

Defaults come from the owner's measurements (docs/facts/rig.md) and the alert
list of docs/alerts.md. Durations are seconds (`*_seconds`),
ratios are 0..1, temperatures °C. This module is imported by the exporter, the
CLI and the rule generator alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from os import PathLike
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from exporter.validation import FINITE, BadValue, converted, read_toml

MIB = 1024 * 1024

#: The shortest decode standstill that is a stall, for the stall tracker and the stream
#: tap alike. Shorter ones are decode's own cadence (a mixed-chunk batch every 0.5 s, a
#: slow token rate; a healthy gap is tens of ms), not stalls: the alerts start at
#: decode_stutter_seconds (2 s) and decode_stall_critical_seconds (10 s). A floor of
#: what is measured, not a condition of a rule, so not a key of the table.
MIN_STALL_SECONDS = 1.0

#: A busy SGLang scheduler runs its loop on one thread: one CPU-second per second of
#: work is what it can use (more only with threads of its own, such as torch's on the
#: CPU device). Under half of that, as `rigctl doctor` reads SGLang's
#: scheduler_process_cpu_seconds_total over its stage seconds less its idle seconds,
#: is clearly less than a core: it spent as long waiting (for a CPU, or asleep on the
#: device) as working (docs/metrics.md#the-schedulers-cpu). A diagnosis, not a rule's.
SCHEDULER_CPU_SHORT_RATIO = 0.5
#: Busy scheduler seconds the doctor needs in its watch before it judges: the counters
#: move at most once a second, at loop events.
SCHEDULER_CPU_MIN_BUSY_SECONDS = 3.0
#: How many scrape intervals an alert with a `for` carries a series' last sample over:
#: the sample before a lost scrape, the lost one, the next one taking up to its whole
#: timeout (deploy/prometheus.yml sets it to the interval), and one more for the
#: evaluation's phase against the scrapes. A series gone for good keeps its alert
#: that much longer. Not a key of the table: it follows from how Prometheus scrapes.
LOST_SCRAPE_BRIDGE_SCRAPES = 4


@dataclass(frozen=True)
class Thresholds:
    # The range of the rules' rates (and of the health checks' rate windows):
    # the recorded `*:rate_window` series are rates over it.
    rate_window_seconds: int = 300
    # The rig job's scrape interval (deploy/prometheus.yml; a test holds them equal).
    # An alert with a `for` reads each series' last sample within
    # LOST_SCRAPE_BRIDGE_SCRAPES of them, so that one lost scrape does not restart its
    # hold (alerts/RUNBOOK.md#a-lost-scrape).
    scrape_interval_seconds: int = 5

    # --- decode (stall tracker and stream probe) ---------------------------
    # No decode progress for >= 10 s is starvation (docs/alerts.md). The default
    # scheduler stalls a 64K decode for 47.23 s during a 64K prefill
    # (docs/facts/rig.md#decode-starvation).
    decode_stall_critical_seconds: float = 10.0
    # A measured stall is already a duration: holding it again only delays the page
    # (docs/alerts.md#why-the-stall-alerts-do-not-hold).
    decode_starvation_for_seconds: int = 0
    # The exporter's longest-gap gauges (stall tracker, stream tap) look back this
    # far; the rules' ranges over them add it, and the stutter rule steps by it.
    decode_stall_window_seconds: int = 60
    # Mixed chunk or N=1 still pauses decode ~4 s per prefill chunk
    # (docs/facts/rig.md#decode-starvation).
    decode_stutter_seconds: float = 2.0
    decode_stutter_count: int = 3
    decode_stutter_window_seconds: int = 600
    # The count over the stutter window is the confirmation, as above.
    decode_stutter_for_seconds: int = 0
    # Queued requests, nothing running, no decode batch: longer than the
    # longest legitimate cold prefill (243.81 s for 192K tokens,
    # docs/facts/rig.md#latency-and-throughput).
    engine_wedged_seconds: int = 300
    # How far back RigEngineWedged{signal="queue"} looks for a decode batch: a running
    # engine runs several a second, a wedged one none.
    engine_wedged_window_seconds: int = 60
    # An engine restart (27B TP2 load, graph capture) takes minutes.
    engine_down_for_seconds: int = 300
    queue_wait_seconds: int = 300

    # --- speculative decoding -----------------------------------------------
    # The rig decodes with MTP=3: up to 4 tokens a step. Below 1.5 accepted tokens a
    # step (the engine's spec_accept_length) the drafts buy little of the speed the
    # owner sized the rig by; held while decoding.
    spec_accept_length: float = 1.5
    spec_accept_low_for_seconds: int = 600

    # --- KV pool ------------------------------------------------------------
    kv_usage_ratio: float = 0.95
    kv_saturated_for_seconds: int = 300

    # --- HiCache ------------------------------------------------------------
    hicache_host_pool_ratio: float = 0.98
    hicache_host_pool_for_seconds: int = 300
    # ~240K tokens per 10 min: the whole L1 pool (231,914 tokens,
    # docs/facts/rig.md#kv-capacity) moving down to L2 and back up every ten minutes.
    hicache_churn_tokens_per_second: float = 400.0
    hicache_l2_hit_ratio: float = 0.2
    hicache_churn_for_seconds: int = 600
    # Half of a 64K session: a long prompt recomputed from scratch
    # (48.13 s at 64K versus 0.546 s restored from L2,
    # docs/facts/rig.md#latency-and-throughput).
    hicache_recompute_tokens: int = 32768
    hicache_recompute_window_seconds: int = 900
    hicache_recompute_for_seconds: int = 60
    hicache_storage_window_seconds: int = 1800
    hicache_storage_for_seconds: int = 600
    # A session comes back from L3 only once a nearly full L2 has dropped it;
    # below this a prompt that misses every tier is new, not a lost session.
    hicache_storage_l2_ratio: float = 0.9

    # --- agents (the stream tap's [[engine.agent]]) ---------------------------
    # One agent's request running 10 min while another waits 2 min for its first
    # token: one held the engine while three waited 49 minutes (docs/tap.md#agents).
    agent_hog_running_seconds: int = 600
    agent_hog_waiting_seconds: int = 120
    # A response past this many generated tokens (an unbounded request: a quarter of
    # it) runs away; the owner saw one of more than 70,000 tokens.
    agent_runaway_tokens: int = 16384
    # The agent's last prompt against the engine's context length.
    agent_context_ratio: float = 0.9
    # The agents' last prompts, summed, over the KV pool (L1, + L2 with HiCache):
    # returning sessions are evicted and prefilled again (48 s instead of 0.5 s).
    agent_working_set_for_seconds: int = 600
    # An agent counts in the working set while it sent a prompt this recently.
    agent_working_set_active_seconds: int = 3600
    # Most of an agent's prompt tokens uncached over the window, in this many
    # requests or more and at least hicache_recompute_tokens uncached a request.
    agent_recompute_uncached_ratio: float = 0.5
    agent_recompute_window_seconds: int = 1800
    agent_recompute_requests: int = 3

    # --- GPU ----------------------------------------------------------------
    gpu_busy_ratio: float = 0.8  # "under load"
    gpu_sclk_ratio: float = 0.8
    # 7900 XTX junction critical limit is 110 °C (docs/facts/amdgpu.md#rx-7900-xtx-numbers).
    gpu_junction_margin_celsius: float = 5.0
    gpu_downclock_for_seconds: int = 120
    gpu_downclock_critical_for_seconds: int = 600
    gpu_hot_margin_celsius: float = 10.0
    gpu_hot_for_seconds: int = 120
    gpu_power_cap_ratio: float = 0.95
    gpu_power_capped_for_seconds: int = 300
    gpu_missing_for_seconds: int = 60
    # The B850 board runs both slots at x8 (docs/facts/rig.md#hardware-and-software);
    # narrower is degraded.
    gpu_pcie_min_width_lanes: int = 8
    gpu_pcie_for_seconds: int = 300

    # --- host ---------------------------------------------------------------
    host_swap_io_bytes_per_second: float = 1.0 * MIB
    # 62 MiB of swap, not growing (docs/facts/rig.md#kv-capacity); ~115 MiB per
    # 30 min is growth.
    host_swap_growth_bytes_per_second: float = 64.0 * 1024
    host_swap_growth_window_seconds: int = 1800
    host_swapping_for_seconds: int = 600
    host_memory_available_ratio: float = 0.05
    host_memory_full_stall_ratio: float = 0.1
    host_memory_for_seconds: int = 120
    # Ryzen 9600X Tjmax is 95 °C; Tctl near it under sustained load.
    cpu_temperature_celsius: float = 90.0
    cpu_hot_for_seconds: int = 300

    # --- exporter -----------------------------------------------------------
    source_down_for_seconds: int = 300

    @property
    def lost_scrape_bridge_seconds(self) -> int:
        """The window over which alerts with a `for` read a series' last sample."""
        return LOST_SCRAPE_BRIDGE_SCRAPES * self.scrape_interval_seconds

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> Thresholds:
        """Build from a `[thresholds]` table; missing keys keep defaults.

        Raises ValueError naming the key and the bad value for an unknown key,
        a wrong type or an out-of-range value.
        """
        try:
            table = converted(dict(mapping), _TABLE)
        except BadValue as exc:
            key = exc.path[-1] if exc.path else ""
            if exc.unknown:
                raise ValueError(f"thresholds: unknown key {key!r} (value {exc.value!r})") from None
            raise ValueError(f"thresholds.{key} {exc}, got {exc.value!r}") from None
        return cls(**msgspec.structs.asdict(table))


# The table as msgspec checks it: every value 0 or more and finite, a whole one for an
# int field, a ratio within 0..1.
_TABLE = msgspec.defstruct("thresholds", [
    (f.name, Annotated[int, Meta(ge=0)] if f.type == "int" else Annotated[
        float, Meta(ge=0, le=1 if f.name.endswith("_ratio") else FINITE)], f.default)
    for f in dataclasses.fields(Thresholds)], forbid_unknown_fields=True, kw_only=True)


def thresholds_from_config(path: str | PathLike[str]) -> Thresholds:
    """The thresholds of an exporter config file: its `[thresholds]` table over
    the defaults. Other tables are the exporter's business and are not read.

    Raises ValueError naming the file, and the key and value where one is bad.
    """
    try:
        raw = read_toml(path)
    except BadValue as exc:
        raise ValueError(f"{path}: {exc}") from exc
    table = raw.get("thresholds", {})
    if not isinstance(table, Mapping):
        raise ValueError(f"{path}: thresholds must be a table ([thresholds]), got {table!r}")
    try:
        return Thresholds.from_mapping(table)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc
