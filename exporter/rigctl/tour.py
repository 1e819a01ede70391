"""The simulated rig and the scenario tour that `rigctl demo` plays and the
end-to-end tests (tests/e2e) assert on.

A `TourRig` is one simulated rig: the simulated SGLang server (exporter/sim), a
two-card amdgpu sysfs tree and /proc files in a directory, and a real
`rig-exporter` process reading all three. A `Scenario` is a fault on it, the
notifications it must cause (and, by omission, every one it must not), and how
it heals. Numbers are rig-facts' (the 47.23 s stall, the 110 °C junction limit,
64 GB of host RAM); durations and rates are in the rig's time and compress with
the time scale. `fault` and `heal` run on the simulator's event loop; `tick`
runs there every `TICK_SECONDS` while the fault lasts (counters that grow).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.rigctl.stack import REPO, Process, free_port
from exporter.sim.amdgpu_sysfs import RIG_CARDS, CardSpec, remove_card, write_card, write_rig
from exporter.sim.procfs import GIB, HostSpec, write_proc
from exporter.sim.sglang_server import SimServer
from exporter.sim.sglang_state import Fault, SimEngine


def healthy_engine() -> SimEngine:
    """Two agents decoding, half the KV pool used, HiCache L2 at a third."""
    engine = SimEngine(token_usage=0.5, hicache_host_used_tokens=140_000,
                       hicache_host_total_tokens=423_593, evicted_tokens=0,
                       loaded_back_tokens=0, backed_up_tokens=0)
    engine.running = 2
    return engine


@dataclass
class TourRig:
    """One simulated rig: SGLang server, two-card sysfs tree, /proc files, exporter."""

    name: str
    workdir: Path
    time_scale: float
    # Stall lengths compress by this, which may be less than time_scale: a busy
    # machine's scheduling hiccups must stay below the compressed stall threshold.
    stall_scale: float
    engine: SimEngine = field(default_factory=healthy_engine)
    cards: dict[str, CardSpec] = field(default_factory=lambda: {c.card: c for c in RIG_CARDS})
    host: HostSpec = field(default_factory=HostSpec)
    server: SimServer | None = None
    exporter: Process | None = None
    exporter_address: str = ""

    @property
    def sysfs(self) -> Path:
        return self.workdir / "sys"

    @property
    def proc(self) -> Path:
        return self.workdir / "proc"

    async def start_engine(self) -> None:
        self.server = SimServer(self.engine)
        await self.server.start()

    def write_files(self) -> None:
        write_rig(self.sysfs, tuple(self.cards.values()))
        write_proc(self.proc, self.host)

    def set_card(self, card: str, **changes: Any) -> None:
        self.cards[card] = dataclasses.replace(self.cards[card], **changes)
        write_card(self.sysfs, self.cards[card])

    def set_host(self, **changes: Any) -> None:
        self.host = dataclasses.replace(self.host, **changes)
        write_proc(self.proc, self.host)

    def start_exporter(self, stall_poll_seconds: float = 0.25) -> None:
        assert self.server is not None
        port = free_port()
        self.exporter_address = f"127.0.0.1:{port}"
        # The probe's schedule (every 60 s by default) compresses with time; its
        # 60 s deadline is a duration it measures against the stream, so it
        # compresses like stall lengths: a 47 s stall must not fail the probe.
        interval, timeout = 60 / self.time_scale, 60 / self.stall_scale
        engine = (f"main={self.server.url},kind=sglang,probe_interval_seconds={interval:g},"
                  f"probe_timeout_seconds={timeout:g},"
                  f"stall_poll_interval_seconds={stall_poll_seconds:g}")
        self.exporter = Process(
            f"exporter {self.name}",
            [sys.executable, "-m", "exporter", "--web.listen-address", self.exporter_address,
             "--sysfs.root", str(self.sysfs), "--gpu.backend", "sysfs",
             "--proc.root", str(self.proc), "--engine", engine],
            self.workdir / "exporter.log", cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )


TICK_SECONDS = 0.5
PAGE = 4096  # /proc/vmstat counts swap in 4 KiB pages


@dataclass(frozen=True)
class Expected:
    """One alert that must reach the receiver once, and resolve once."""

    alertname: str
    labels: dict[str, str]
    # Asserted to appear in the notification's description.
    says: str = ""

    def matches(self, labels: dict[str, str]) -> bool:
        return labels.get("alertname") == self.alertname and all(
            labels.get(k) == v for k, v in self.labels.items())


def _nothing(rig: TourRig) -> None:
    pass


def _no_tick(rig: TourRig, seconds: float) -> None:
    pass


@dataclass(frozen=True)
class Scenario:
    name: str
    reproduces: str
    expected: tuple[Expected, ...]
    fault: Callable[[TourRig], None] = _nothing
    heal: Callable[[TourRig], None] = _nothing
    tick: Callable[[TourRig, float], None] = _no_tick
    # In the rig's time: how long the fault may take to page, at most.
    fire_within: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)


ENGINE = {"engine": "sglang", "name": "main"}


# -------------------------------------------------------------------- faults
def _starve(rig: TourRig) -> None:
    rig.engine.pause_decode(47.23 / rig.stall_scale)  # rig-facts: 64K prefill, default scheduler


def _wedge(rig: TourRig) -> None:
    rig.engine.queued = 3
    rig.engine.running = 0
    # The scheduler hangs between requests: a probe caught mid-answer would make this
    # a decode stall as well (RigDecodeStarvation, RigQueueHeadOfLine) depending on
    # when the wedge lands, and the scenario is the wedge alone.
    rig.engine.advance()
    rig.engine.scheduler.abort_all()
    rig.engine.wedged = True  # no batch runs: the probe's next request never starts


def _unwedge(rig: TourRig) -> None:
    rig.engine.wedged = False
    rig.engine.queued = 0
    rig.engine.running = 2


def _down(rig: TourRig) -> None:
    rig.engine.fault = Fault.REFUSE


def _up(rig: TourRig) -> None:
    rig.engine.fault = Fault.NONE


def _kv_full(rig: TourRig) -> None:
    rig.engine.token_usage = 0.97
    rig.engine.retracted_requests = 3  # SGLang creates the counter at the first ones


def _kv_ok(rig: TourRig) -> None:
    rig.engine.token_usage = 0.5


def _hot(rig: TourRig) -> None:
    # 3 °C under the 110 °C junction limit, sclk at 1.5 of 2.304 GHz, busy.
    rig.set_card("card1", junction_mc=107_000, sclk_hz=1_500_000_000, busy_percent=99)


def _cool(rig: TourRig) -> None:
    rig.set_card("card1", junction_mc=88_000, sclk_hz=2_250_000_000)


def _pull_card(rig: TourRig) -> None:
    remove_card(rig.sysfs, "card2")


def _reseat_card(rig: TourRig) -> None:
    write_card(rig.sysfs, rig.cards["card2"])


def _memory_short(rig: TourRig) -> None:
    rig.set_host(memory_available_bytes=2 * GIB)  # 3 % of 64 GB


def _memory_ok(rig: TourRig) -> None:
    rig.set_host(memory_available_bytes=19 * GIB)


def _swap_storm(rig: TourRig, seconds: float) -> None:
    # 20 MiB/s each way and memory stalls 30 % of the time, in the rig's time.
    pages = 20 * 1024 * 1024 / PAGE * seconds * rig.time_scale
    stall_us = 0.3 * seconds * 1e6
    rig.set_host(swap_in_pages=rig.host.swap_in_pages + int(pages),
                 swap_out_pages=rig.host.swap_out_pages + int(pages),
                 pressure_full_us=(rig.host.pressure_full_us or 0) + int(stall_us),
                 pressure_some_us=(rig.host.pressure_some_us or 0) + int(stall_us))


def _queue(rig: TourRig) -> None:
    rig.engine.queued = 3


def _dequeue(rig: TourRig) -> None:
    rig.engine.queued = 0


def _thrash(rig: TourRig, seconds: float) -> None:
    # Four agents at 196K outgrow L1 + L2 (rig-facts): 600 tokens/s go down to L2
    # and come back (the alert is at 400, one L1 pool per 10 min), while prompts
    # arrive at 2,000 tokens/s and L2 serves none of them.
    rig_seconds = seconds * rig.time_scale
    engine = rig.engine
    engine.evicted_tokens = (engine.evicted_tokens or 0) + 600 * rig_seconds
    engine.loaded_back_tokens = (engine.loaded_back_tokens or 0) + 600 * rig_seconds
    engine.finish_request(int(2000 * rig_seconds), int(30 * rig_seconds))
    engine.cached_tokens["device"] = engine.cached_tokens.get("device", 0) + 100 * rig_seconds


SCENARIOS = (
    Scenario(
        "healthy",
        "Two agents decoding, both cards busy and cool, 19 GB of RAM available.",
        (),
    ),
    Scenario(
        "prefill-starves-decode",
        "A 64K prefill holds the GPUs and stops another agent's decode for 47.23 s.",
        (Expected("RigDecodeStarvation", {"severity": "critical", **ENGINE},
                  says="without decoding a token"),),
        fault=_starve,
        fire_within=40 + 10 + 60,
        notes=("must not page RigDecodeStuttering",),
    ),
    Scenario(
        "engine-wedged",
        "The scheduler hangs: requests queue, none runs, the probe gets no first token,"
        " while /metrics still answers.",
        (Expected("RigEngineWedged", {"severity": "critical", "signal": "probe", **ENGINE}),),
        fault=_wedge, heal=_unwedge,
        # The probe fails at its 60 s deadline, which compresses like stalls only
        # (about 300 s of the rig's time at x10 and x2), then the 5 min hold.
        fire_within=300 + 300 + 10 + 120,
        notes=("one page: not RigDecodeStarvation, not RigEngineWedged{signal=queue}",),
    ),
    Scenario(
        "engine-down",
        "The engine process is gone: /metrics refuses connections.",
        (Expected("RigEngineDown", {"severity": "critical", "name": "main",
                                    "source": "engine/main"}),),
        fault=_down, heal=_up,
        fire_within=300 + 10 + 120,
    ),
    Scenario(
        "kv-saturated",
        "Long contexts fill the KV pool to 97 % and SGLang retracts 3 running requests.",
        (Expected("RigKVPoolSaturated", {"severity": "warning", "signal": "usage", **ENGINE}),
         Expected("RigKVPoolSaturated", {"severity": "warning", "signal": "retractions",
                                         **ENGINE}, says="retracted 3 running requests")),
        fault=_kv_full, heal=_kv_ok,
        fire_within=300 + 30 + 120,
    ),
    Scenario(
        "thermal-downclock",
        "card1's junction reaches 107 °C under load and its sclk drops to 65 % of max.",
        (Expected("RigGpuThermalDownclock", {"severity": "warning", "card": "card1"}),
         Expected("RigGpuThermalDownclock", {"severity": "critical", "card": "card1"})),
        fault=_hot, heal=_cool,
        fire_within=600 + 10 + 120,
        notes=("RigGpuHot is silenced by the downclock",),
    ),
    Scenario(
        "gpu-missing",
        "card2 falls off the bus (a GPU reset).",
        (Expected("RigGpuMissing", {"severity": "critical", "signal": "vanished",
                                    "card": "card2"}),),
        fault=_pull_card, heal=_reseat_card,
        fire_within=60 + 10 + 120,
        notes=("RigGpuMissing{signal=count} is silenced by the vanished card",),
    ),
    Scenario(
        "swap-storm",
        "The L2 pool and a second workload exhaust RAM: 3 % available, 20 MiB/s of swap"
        " each way, all tasks stalled on memory 30 % of the time.",
        (Expected("RigHostMemoryPressure", {"severity": "critical", "signal": "available"}),
         Expected("RigHostMemoryPressure", {"severity": "critical", "signal": "stall"}),
         Expected("RigHostSwapping", {"severity": "warning"})),
        fault=_memory_short, heal=_memory_ok, tick=_swap_storm,
        fire_within=600 + 300 + 30 + 150,
    ),
    Scenario(
        "queue-hog",
        "Three agents wait in the queue while one long request holds the KV pool.",
        (Expected("RigQueueHeadOfLine", {"severity": "warning", **ENGINE}),),
        fault=_queue, heal=_dequeue,
        fire_within=300 + 30 + 120,
    ),
    Scenario(
        "hicache-thrash",
        "Four agents at 196K outgrow L1 + L2: tokens churn between GPU and host RAM"
        " while L2 serves almost no prompt.",
        (Expected("RigHiCacheThrash", {"severity": "warning", "signal": "churn", **ENGINE}),),
        tick=_thrash,
        fire_within=600 + 300 + 30 + 150,
    ),
)
