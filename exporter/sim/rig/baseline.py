"""The healthy rig: where every scenario starts and where a heal returns to.

Numbers from the owner's measurements (docs/facts/rig.md): two
agents with long-lived 64K sessions taking turns, TP=2 on two 7900 XTX cards
with the board power limit lowered to 305 W, HiCache size 16 (L1 219,005 tokens,
L2 319,193 tokens), 64 GB of RAM with 19 GiB available and 62 MiB of swap that
does not grow. Nothing here comes near an alert threshold.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from exporter.sim.engine.state import Fault
from exporter.sim.rig.state import EngineFlows, HostState
from exporter.sim.rig.sysfs_writer import RIG_CARDS, CardSpec

# smu13_driver_if_v13_0_0.h throttler bits: TEMP_HOTSPOT is set almost always on
# Navi 31, even at idle (docs/facts/amdgpu.md#navi-31-hotspot-bit); PPT0 is the power1_cap limit.
THROTTLE_HOTSPOT = 1 << 1
THROTTLE_PPT0 = 1 << 16

# The owner lowered power1_cap from ~330 W to 305 W, the lowest allowed
# (docs/facts/rig.md#hardware-and-software).
POWER_CAP_WATTS = 305
# PCIe x8/x8 with both slots in use, 16 GT/s on these PCIe 4.0 cards
# (docs/facts/rig.md#hardware-and-software).
SLOT_LINK = ("16.0 GT/s PCIe", 8)

L1_CAPACITY_TOKENS = 219_005  # docs/facts/rig.md#kv-capacity: L1 at HiCache size 16
L2_CAPACITY_TOKENS = 319_193  # docs/facts/rig.md#kv-capacity: L2 at size 16
SESSION_TOKENS = 65_536  # a 64K agent session


def power(spec: CardSpec, watts: float) -> dict[str, int | None]:
    """CardSpec changes for a power draw: power1_average, and power1_input where the
    card has it (hidden on some kernels)."""
    microwatts = int(watts * 1e6)
    return {"power_average_uw": microwatts,
            "power_input_uw": None if spec.power_input_uw is None else microwatts}


def card(spec: CardSpec, *, edge: float, junction: float, memory: float, watts: float,
         sclk_mhz: int, busy_percent: int, throttle_status: int,
         fan_rpm: int | None = None) -> CardSpec:
    """A card state in the rig's terms (°C, W, MHz, %)."""
    return dataclasses.replace(
        spec, edge_mc=int(edge * 1000), junction_mc=int(junction * 1000),
        memory_mc=int(memory * 1000), sclk_hz=sclk_mhz * 1_000_000,
        busy_percent=busy_percent, throttle_status=throttle_status,
        fan_rpm=spec.fan_rpm if fan_rpm is None else fan_rpm, **power(spec, watts))


def healthy_cards() -> dict[str, CardSpec]:
    lower, upper = (dataclasses.replace(spec, power_cap_uw=POWER_CAP_WATTS * 1_000_000,
                                        upstream_link=SLOT_LINK) for spec in RIG_CARDS[:2])
    # The upper card breathes the lower card's exhaust (5 mm apart, docs/facts/rig.md).
    return {
        lower.card: card(lower, edge=62, junction=84, memory=80, watts=262, sclk_mhz=2250,
                         busy_percent=95, throttle_status=THROTTLE_HOTSPOT, fan_rpm=1650),
        upper.card: card(upper, edge=68, junction=93, memory=88, watts=271, sclk_mhz=2210,
                         busy_percent=96, throttle_status=THROTTLE_HOTSPOT, fan_rpm=2240),
    }


def healthy_flows() -> EngineFlows:
    # Each of two agents sends a turn a minute: its 64K session from L1 plus about
    # 2K new tokens (tool output), and decodes ~50 tok/s (docs/facts/rig.md: 2x104K decode
    # gave 105.9 tok/s aggregate). New tokens are written through to L2.
    turns_per_second = 2 / 60
    new_tokens = 2_000
    return EngineFlows(
        prompt_tokens=turns_per_second * (SESSION_TOKENS + new_tokens),
        generation_tokens=100.0,
        hit_tokens={"L1": turns_per_second * SESSION_TOKENS},
        backed_up_tokens=turns_per_second * new_tokens,
    )


def healthy_host() -> HostState:
    # docs/facts/rig.md#kv-capacity: 40 GiB used, 19 GiB available, swap 62 MiB and not growing.
    return HostState(pressure_some_ratio=0.002, pressure_full_ratio=0.0, cpu_celsius=68.0)


@dataclass(frozen=True)
class Baseline:
    """The healthy rig as values; `SimRig.heal` applies it."""

    cards: dict[str, CardSpec]
    flows: EngineFlows
    host: HostState
    engine: dict[str, Any]  # SimRig.set_engine's changes


def healthy() -> Baseline:
    return Baseline(
        cards=healthy_cards(), flows=healthy_flows(), host=healthy_host(),
        engine=dict(running=2, queued=0, token_usage=0.58, decode_batches_per_second=30.0,
                    max_total_num_tokens=L1_CAPACITY_TOKENS,
                    hicache_host_total_tokens=L2_CAPACITY_TOKENS,
                    hicache_host_used_tokens=150_000, fault=Fault.NONE))
