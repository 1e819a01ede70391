"""The rig's moving state in plain values: what flows through the engine and the
host's memory. SimRig applies them; the baseline and the scenarios make them."""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.sim.rig.procfs_writer import GIB, MIB


@dataclass
class EngineFlows:
    """What moves through the engine, in tokens per scenario second."""

    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    hit_tokens: dict[str, float] = field(default_factory=dict)  # tier (L1, L2, L3) -> tokens/s
    evicted_tokens: float = 0.0
    loaded_back_tokens: float = 0.0
    backed_up_tokens: float = 0.0
    storage_prefetched_tokens: float = 0.0
    storage_written_tokens: float = 0.0


@dataclass
class HostState:
    """Host memory and the CPU; rates per scenario second, PSI as a share of time."""

    memory_total_bytes: float = 64 * GIB
    memory_available_bytes: float = 19 * GIB
    swap_total_bytes: float = 8 * GIB
    swap_used_bytes: float = 62 * MIB
    swap_in_bytes_per_second: float = 0.0
    swap_out_bytes_per_second: float = 0.0
    # PSI counts stalled time, a duration, so it accrues in real time: a share
    # of 0.1 reads as rate 0.1 at any time scale.
    pressure_some_ratio: float = 0.0
    pressure_full_ratio: float = 0.0
    cpu_celsius: float | None = 68.0
    swap_in_bytes_total: float = 0.0
    swap_out_bytes_total: float = 0.0
    pressure_some_seconds: float = 0.0
    pressure_full_seconds: float = 0.0
