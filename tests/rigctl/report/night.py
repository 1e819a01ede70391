"""Two hours of two rigs' series with known incidents, written as OpenMetrics, turned
into TSDB blocks by promtool and served by a real Prometheus from disk: history that no
rule evaluated, as `rigctl report` must read it.

Rig `night` (every 5 s, the deploy's scrape and evaluation interval):
- steady traffic: agent coder sends a request every 30 s (2,000 prompt tokens, 1,500
  of them cached, 300 generated), agent analyst one every 60 s without max_tokens
  (4,000 prompt tokens, 3,000 cached, 800 generated);
- at STALL_AT the engine's decode stalls 47.23 s (the stall tracker's gauges, bounds
  0.5 s apart); coder's stream stands still and the tap blames analyst, who had a
  request waiting: 47 starved seconds;
- from DOWNCLOCK_AT for 9 min card1 runs at 60% of its sclk, busy, 2 °C below its
  junction limit: RigGpuThermalDownclock (warning; 2 min hold) fires, the 10 min
  critical one does not;
- from OUTAGE_AT for 10 min the exporter cannot be scraped: up is 0, nothing else;
- an ALERTS series says RigCpuHot fired for 5 min from CPU_HOT_AT (the TSDB has no
  CPU temperature: only ALERTS knows it, so the report must take it from there).

Rig `quiet`: the same two hours of traffic, healthy throughout.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from exporter.process.launch import Process, free_port, wait_ready

SCRAPE = 5
HOURS = 2
STALL_SECONDS = 47.23
RESOLUTION = 0.5
STALL_WINDOW = 60.0
STARVED_SECONDS = 47.0
# Seconds after the start.
STALL_AT = 20 * 60 + 2
DOWNCLOCK_AT, DOWNCLOCK_SECONDS = 40 * 60, 9 * 60
OUTAGE_AT, OUTAGE_SECONDS = 70 * 60, 10 * 60
CPU_HOT_AT, CPU_HOT_SECONDS = 95 * 60, 5 * 60
CORE = ("coder", 30, 2000, 1500, 300, False)  # agent, every s, prompt, cached, out, unbounded
ANALYST = ("analyst", 60, 4000, 3000, 800, True)
JUNCTION_LIMIT = 110.0
HOT_JUNCTION, COOL_JUNCTION = 108.0, 70.0
SCLK_MAX = 2.5e9
KV_USAGE = 0.5
L2_USED, L2_CAPACITY = 10_000, 100_000


@dataclass(frozen=True)
class History:
    url: str
    start: float  # the first sample; the last is at start + HOURS h
    end: float


def requests(agent: tuple, seconds: float) -> int:
    """Requests the agent has sent `seconds` after the start (one at 0 not counted)."""
    return int(seconds // agent[1])


def _rig_samples(rig: str, t0: float, incidents: bool, hours: float,
                 scrape: int) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    target = f'job="rig",instance="{rig}:9842",rig="{rig}"'
    engine = f'{target},engine="main",kind="sglang"'

    def put(name: str, labels: str, value: float, t: float) -> None:
        out[name].append(f"{name}{{{labels}}} {value} {t:.3f}")

    for step in range(int(hours * 3600) // scrape + 1):
        s = step * scrape
        t = t0 + s
        down = incidents and OUTAGE_AT <= s < OUTAGE_AT + OUTAGE_SECONDS
        put("up", target, 0 if down else 1, t)
        if down:
            continue
        for source in ("gpu", "host", "engine/main"):
            put("rig_source_up", f'{target},source="{source}"', 1, t)
        # The engine and its agents.
        prompt = generated = 0
        for agent in (CORE, ANALYST):
            name, _, p, c, g, unbounded = agent
            n = requests(agent, s)
            a = f'{engine},agent="{name}"'
            put("rig_agent_requests_total", f'{a},outcome="ok"', n, t)
            put("rig_agent_prompt_tokens_total", a, n * p, t)
            put("rig_agent_cached_prompt_tokens_total", a, n * c, t)
            put("rig_agent_generated_tokens_total", a, n * g, t)
            put("rig_agent_unbounded_requests_total", a, n if unbounded else 0, t)
            put("rig_agent_last_prompt_tokens", a, p, t)
            prompt, generated = prompt + n * p, generated + n * g
        into = s - STALL_AT if incidents else -1.0
        longest = min(into, STALL_SECONDS) if 0 <= into < STALL_SECONDS + STALL_WINDOW else 0.0
        put("rig_engine_decode_stall_max_seconds", engine, longest, t)
        put("rig_engine_decode_stall_max_upper_seconds", engine, longest and longest + RESOLUTION,
            t)
        starved = min(max(into, 0.0), STARVED_SECONDS) if incidents else 0.0
        put("rig_agent_starved_seconds_total", f'{engine},agent="coder",by="analyst"', starved, t)
        gap = min(into, STALL_SECONDS) if 0 <= into < STALL_SECONDS + STALL_WINDOW else 0.0
        put("rig_agent_max_token_gap_seconds", f'{engine},agent="coder"', gap, t)
        put("rig_agent_max_token_gap_seconds", f'{engine},agent="analyst"', 0.0, t)
        put("rig_engine_prompt_tokens_total", engine, prompt, t)
        put("rig_engine_generation_tokens_total", engine, generated, t)
        cached = requests(CORE, s) * CORE[3]
        put("rig_engine_cache_hit_tokens_total", f'{engine},tier="L1"', cached * 0.8, t)
        put("rig_engine_cache_hit_tokens_total", f'{engine},tier="L2"', cached * 0.2, t)
        put("rig_engine_kv_usage_ratio", engine, KV_USAGE, t)
        put("rig_engine_hicache_host_used_tokens", engine, L2_USED, t)
        put("rig_engine_hicache_host_capacity_tokens", engine, L2_CAPACITY, t)
        # The cards.
        for card in ("card0", "card1"):
            c = f'{target},card="{card}"'
            hot = incidents and card == "card1" and \
                DOWNCLOCK_AT <= s < DOWNCLOCK_AT + DOWNCLOCK_SECONDS
            put("rig_gpu_present", f'{c},pci_bus="0000:0{card[-1]}:00.0"', 1, t)
            put("rig_gpu_busy_ratio", c, 0.95, t)
            put("rig_gpu_clock_hertz", f'{c},clock="sclk"', SCLK_MAX * (0.6 if hot else 0.96), t)
            put("rig_gpu_clock_max_hertz", f'{c},clock="sclk"', SCLK_MAX, t)
            put("rig_gpu_temperature_celsius", f'{c},sensor="junction"',
                HOT_JUNCTION if hot else COOL_JUNCTION, t)
            put("rig_gpu_temperature_celsius", f'{c},sensor="edge"', 60.0, t)
            put("rig_gpu_temperature_limit_celsius", f'{c},sensor="junction",limit="critical"',
                JUNCTION_LIMIT, t)
            for reason in ("power", "thermal_edge"):
                put("rig_gpu_throttle_active", f'{c},reason="{reason}"', 0, t)
        if incidents and CPU_HOT_AT <= s < CPU_HOT_AT + CPU_HOT_SECONDS:
            put("ALERTS", f'{target},alertname="RigCpuHot",alertstate="firing",'
                          f'severity="warning",sensor="Tctl"', 1, t)
    return out


def openmetrics(t0: float, hours: float = HOURS, scrape: int = SCRAPE,
                rigs: tuple[str, ...] = ("night", "quiet")) -> str:
    families: dict[str, list[str]] = defaultdict(list)
    for rig in rigs:
        for name, rows in _rig_samples(rig, t0, rig == "night", hours, scrape).items():
            families[name] += rows
    lines = []
    for name, rows in families.items():
        kind = "counter" if name.endswith("_total") else "gauge"
        family = name.removesuffix("_total") if kind == "counter" else name
        lines += [f"# TYPE {family} {kind}", *rows]
    return "\n".join([*lines, "# EOF", ""])


@contextlib.contextmanager
def night(tmp: Path, hours: float = HOURS, scrape: int = SCRAPE,
          rigs: tuple[str, ...] = ("night", "quiet")) -> Iterator[History]:
    """Prometheus serving the history (`hours` long; bench/bench_report.py makes it a
    week) from a temporary directory."""
    binary, promtool = shutil.which("prometheus"), shutil.which("promtool")
    assert binary and promtool, "prometheus and promtool: apt-get install prometheus"
    # Ending an hour ago, on the hour: within retention, off the head block.
    end = (int(time.time()) // 3600 - 1) * 3600
    start = end - int(hours * 3600)
    with (tmp / "night.om").open("w") as f:
        f.write(openmetrics(start, hours, scrape, rigs))
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q",
                    str(tmp / "night.om"), str(tmp / "tsdb")], check=True,
                   timeout=max(120, hours * 60))
    (tmp / "night.om").unlink()
    (tmp / "prometheus.yml").write_text("global: {scrape_interval: 15s}\n")
    address = f"127.0.0.1:{free_port()}"
    with Process("prometheus", [
            binary, f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}", "--storage.tsdb.retention.time=30d",
            f"--web.listen-address={address}", "--log.level=warn"],
            tmp / "prometheus.log") as process:
        wait_ready(f"http://{address}/-/ready", process, timeout=60)
        yield History(f"http://{address}", start, end)
