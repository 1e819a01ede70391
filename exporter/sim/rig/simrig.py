"""The whole simulated rig: one SGLang server, two 7900 XTX cards, the host.

`SimRig` starts the simulated SGLang server on a free loopback port and writes
an amdgpu sysfs tree (two cards, plus the CPU's k10temp hwmon) and a proc tree
into a directory, so that a real exporter reads all three through its usual
flags (`exporter_args`). A tick loop moves the rig on in scenario time: token
counters follow `EngineFlows`, swap and memory-pressure counters follow
`HostState`; cards change only when told. Scenarios (`exporter.sim.scenarios`)
drive it through the methods below, and so does the control endpoint. Requests
(the exporter's probe, a client's) go through the engine's scheduler model, so a
decode pause shows in their streams and in /metrics alike.

    async with SimRig(time_scale=20) as rig:
        config = rig.exporter_config()
        await play(rig, SCENARIOS["thermal-downclock"])  # exporter.sim.scenarios.player

Compressed time (`exporter.sim.rig.clock`): at time scale F the rig lives F
times faster than real time. Counts (tokens, bytes) move per scenario second.
Durations the exporter measures against a threshold (decode stalls, the probe's
deadline) compress by `stall_scale` instead, F unless told: on a busy machine a
process can go unscheduled for a second, which at F = 10 would read as a 10 s
stall, so the end-to-end tests and the demo compress stalls 2-fold only. PSI
stall time accrues in real time (a share of time is the same at any scale).
"""

from __future__ import annotations

import asyncio
import dataclasses
import filecmp
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporter.config import default_of
from exporter.process.launch import free_port
from exporter.sim.agents import Agents, SimAgent, roster_for
from exporter.sim.engine.llamacpp import LlamacppSimServer
from exporter.sim.engine.scheduler import Policy
from exporter.sim.engine.server import SimServer
from exporter.sim.engine.state import SimEngine
from exporter.sim.rig import baseline, sysfs_writer
from exporter.sim.rig.clock import ScenarioClock
from exporter.sim.rig.procfs_writer import PAGE, HostSpec, write_cpu_hwmon, write_proc
from exporter.sim.rig.state import EngineFlows, HostState
from exporter.sim.rig.sysfs_writer import CardSpec
from exporter.thresholds import Thresholds

if TYPE_CHECKING:
    from exporter.config import Config

# SGLang's `cache_source` label for each tier (docs/facts/sglang.md#cache-tiers).
CACHE_SOURCE = {"L1": "device", "L2": "host", "L3": "storage"}

# The rig's stream probe runs once a minute (time scale 1); its deadline, the
# stall tracker's poll and look-back are the exporter's defaults, compressed.
PROBE_INTERVAL_SECONDS = 60.0
# Below this the tracker's polls (a full /metrics render each) cost more than they
# resolve: 20 polls/s of ~5 ms renders is a tenth of a core on this machine.
MIN_STALL_POLL_SECONDS = 0.05
# A probe's whole stream must fit its timeout even on a loaded machine, or a
# healthy engine reads as wedged; so the compressed timeout has a floor.
MIN_PROBE_TIMEOUT_SECONDS = 3.0


class SimRig:
    def __init__(self, time_scale: float = 1.0, directory: str | os.PathLike[str] | None = None,
                 engine_name: str = "main", tick_seconds: float = 0.05,
                 say: Callable[[str], None] | None = None,
                 stall_scale: float | None = None, engine_kind: str = "sglang") -> None:
        self.clock = ScenarioClock(time_scale)
        #: "sglang", or "llamacpp": a llama-server front on the same scheduler model
        #: (exporter/sim/engine/llamacpp.py).
        self.engine_kind = engine_kind
        self.initial_time_scale = time_scale
        self._stall_scale = stall_scale  # None: stalls compress like the rest
        self.engine_name = engine_name
        self.tick_seconds = tick_seconds
        self.say = say or (lambda line: None)
        self._own_directory = directory is None
        self.directory = Path(directory) if directory else None
        # The rig has an NVMe L3 (docs/facts/rig.md); its counters appear on first use.
        # --enable-cache-report: the agents' OpenAI streams report their cache hits.
        self.engine = SimEngine(clock=self.clock.now, hicache_storage="file",
                                time_scale=time_scale, enable_cache_report=True)
        self.flows = EngineFlows()
        self.host = HostState()
        self.cards: dict[str, CardSpec] = baseline.healthy_cards()
        self.removed_cards: set[str] = set()
        self.server: SimServer | LlamacppSimServer | None = None
        self.engine_url = ""
        self._port = 0
        #: The stream tap the exporter puts in front of the engine, and the agents
        #: that talk through it (exporter.sim.agents); both from `start`.
        self.tap_port = 0
        self.agents: Agents | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._last_tick = 0.0
        self._written_cpu: float | None | str = "unwritten"
        self._written_host: HostSpec | None = None
        self.phase = "idle"
        #: Clock time at which the scenario playing now started (scenario seconds).
        self.scenario_started_at: float | None = None

    # --- lifecycle ----------------------------------------------------------

    async def start(self) -> SimRig:
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="sim-rig-"))
        self.sysfs_root.mkdir(parents=True, exist_ok=True)
        sysfs_writer.write_rig(self.sysfs_root, tuple(self.cards.values()))
        self.heal()
        self.server = self._new_server()
        self.engine_url = await self.server.start()
        self._port = int(self.engine_url.rsplit(":", 1)[1])
        self.tap_port = free_port()
        self.agents = Agents(f"http://127.0.0.1:{self.tap_port}", self.directory / "agents",
                             roster_for(self.engine_kind))
        self._last_tick = self.clock.now()
        self._ticker = asyncio.create_task(self._tick_loop(), name="sim rig ticks")
        return self

    async def stop(self) -> None:
        if self.agents is not None:
            await self.agents.close()
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
            self._ticker = None
        if self.server is not None:
            await self.server.stop()
            self.server = None
        if self.directory is not None:
            if self._own_directory:
                shutil.rmtree(self.directory, ignore_errors=True)
            else:
                for tree in (self.sysfs_root, self.proc_root, self.directory / "agents"):
                    shutil.rmtree(tree, ignore_errors=True)
            # The files are gone: a restarted rig writes them again.
            self._written_host, self._written_cpu = None, "unwritten"

    def _new_server(self) -> SimServer | LlamacppSimServer:
        if self.engine_kind == "llamacpp":
            return LlamacppSimServer(self.engine)
        return SimServer(self.engine)

    async def __aenter__(self) -> SimRig:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def stall_scale(self) -> float:
        return self._stall_scale or self.clock.time_scale

    # --- where the exporter reads -------------------------------------------

    @property
    def sysfs_root(self) -> Path:
        assert self.directory is not None, "the rig has not started"
        return self.directory / "sys"

    @property
    def proc_root(self) -> Path:
        assert self.directory is not None, "the rig has not started"
        return self.directory / "proc"

    def exporter_args(self, stall_poll_seconds: float | None = None,
                      compress_stall_window: bool = False) -> list[str]:
        """rig-exporter flags for this rig: the probe's schedule compressed like the
        scenario; its deadline and the stall tracker's poll like stalls (a 47 s
        stall must not fail the probe), down to a floor: a 50 ms poll and a 3 s
        probe timeout. `compress_stall_window` compresses the tracker's look-back
        (the rules' decode_stall_window_seconds) like the scenario too, for
        Prometheus rules time-scaled by the same factor (`alerts.timescale`): a
        stall then leaves the longest-stall gauge when the scaled rules expect it to."""
        stall = self.stall_scale
        timeout = max(MIN_PROBE_TIMEOUT_SECONDS,
                      default_of("engine", "probe_timeout_seconds") / stall)
        default_poll = default_of("engine", "stall_poll_interval_seconds")
        poll = stall_poll_seconds or min(default_poll,
                                         max(MIN_STALL_POLL_SECONDS, default_poll / stall))
        scale = self.initial_time_scale
        engine = (f"{self.engine_name}={self.engine_url},kind={self.engine_kind}"
                  f",probe_interval_seconds={PROBE_INTERVAL_SECONDS / scale:g}"
                  f",probe_timeout_seconds={timeout:g}"
                  f",stall_poll_interval_seconds={poll:g}")
        if compress_stall_window:
            window = Thresholds.decode_stall_window_seconds
            engine += f",stall_window_seconds={window / scale:g}"
        assert self.agents is not None, "the rig has not started"
        return ["--engine", engine, "--sysfs.root", str(self.sysfs_root),
                "--proc.root", str(self.proc_root), "--gpu.backend", "sysfs",
                "--tap.listen-address", f"{self.engine_name}=127.0.0.1:{self.tap_port}",
                *self.agents.exporter_args(self.engine_name)]

    def exporter_config(self, listen_address: str = "127.0.0.1:0") -> Config:
        from exporter.daemon.cli import build_parser, config_from_args

        args = [*self.exporter_args(), "--web.listen-address", listen_address]
        return config_from_args(build_parser().parse_args(args))

    def describe(self) -> dict[str, Any]:
        """The machine-readable ready line (see `python -m exporter.sim --help`)."""
        return {
            "engine_url": self.engine_url,
            "tap_url": f"http://127.0.0.1:{self.tap_port}",
            "sysfs_root": str(self.sysfs_root),
            "proc_root": str(self.proc_root),
            "exporter_args": self.exporter_args(),
            "time_scale": self.clock.time_scale,
            "stall_scale": self.stall_scale,
        }

    # --- controls (scenarios and the control endpoint) ----------------------

    def heal(self) -> None:
        """Put every part of the rig back to healthy (the engine's process state aside:
        `engine_up` brings a stopped engine back). Counters keep counting."""
        healthy = baseline.healthy()
        for name, spec in healthy.cards.items():
            if name in self.removed_cards:
                self.restore_card(name)
            self.put_card(spec)
        kept = self.host
        host = dataclasses.replace(
            healthy.host, swap_in_bytes_total=kept.swap_in_bytes_total,
            swap_out_bytes_total=kept.swap_out_bytes_total,
            pressure_some_seconds=kept.pressure_some_seconds,
            pressure_full_seconds=kept.pressure_full_seconds)
        self.set_host(**dataclasses.asdict(host))
        self.set_flows(healthy.flows)
        self.wedge_scheduler(False)
        self.engine.set_policy(Policy())
        self.prefills_stall(False)
        if self.agents is not None:
            self.agents.hang_up()
        self.set_engine(**healthy.engine)
        self.engine.scheduler.kv_capacity_tokens = self.engine.max_total_num_tokens
        if self.engine.retracted_requests is None:
            self.engine.retracted_requests = 0

    def set_card(self, card: str, **changes: Any) -> CardSpec:
        """Change one card's sysfs state (CardSpec fields) and rewrite its files."""
        return self.put_card(dataclasses.replace(self.cards[card], **changes))

    def put_card(self, spec: CardSpec) -> CardSpec:
        self.cards[spec.card] = spec
        if spec.card not in self.removed_cards:
            self._publish_card(spec)
        return spec

    def remove_card(self, card: str) -> None:
        """The card falls off the bus (a driver reset): its DRM entry goes."""
        if card not in self.cards:
            raise KeyError(card)
        if card not in self.removed_cards:
            sysfs_writer.remove_card(self.sysfs_root, card)
            self.removed_cards.add(card)

    def restore_card(self, card: str) -> None:
        self.removed_cards.discard(card)
        self._publish_card(self.cards[card])

    def set_host(self, **changes: Any) -> None:
        self._tick()
        for name, value in changes.items():
            if not hasattr(self.host, name):
                raise AttributeError(f"host has no {name!r}")
            setattr(self.host, name, value)
        self._write_host()

    def set_flows(self, flows: EngineFlows) -> None:
        self._tick()
        self.flows = flows

    def set_engine(self, **changes: Any) -> None:
        """Set SimEngine attributes (running, queued, token_usage, fault, ...)."""
        for name, value in changes.items():
            if not hasattr(self.engine, name):
                raise AttributeError(f"engine has no {name!r}")
            setattr(self.engine, name, value)

    def retract(self, requests: int = 1) -> None:
        """The scheduler retracts running requests for lack of KV space."""
        self.engine.retracted_requests = (self.engine.retracted_requests or 0) + requests

    def pause_decode(self, scenario_seconds: float) -> None:
        """No decode batch for a stall of `scenario_seconds` (compressed like stalls)."""
        self.engine.pause_decode(scenario_seconds * self.clock.time_scale / self.stall_scale)

    def agent(self, name: str) -> SimAgent:
        assert self.agents is not None, "the rig has not started"
        return self.agents[name]

    def cache_session(self, agent: SimAgent) -> None:
        """The agent's session is in the device pool, left there by its earlier turns."""
        self.engine.advance()
        self.engine.scheduler.remember(agent.context, agent.context_tokens)

    def without_hicache(self, l1_tokens: int) -> None:
        """The engine runs without HiCache: no host pool, and a device pool of
        `l1_tokens` (231,914 in one of the owner's configurations, docs/facts/rig.md)."""
        self.engine.advance()
        self.set_engine(max_total_num_tokens=l1_tokens, hicache_host_total_tokens=None,
                        hicache_host_used_tokens=None)
        self.engine.scheduler.kv_capacity_tokens = l1_tokens
        self.set_flows(dataclasses.replace(self.flows, backed_up_tokens=0.0,
                                           storage_written_tokens=0.0))

    def prefills_stall(self, stall: bool = True) -> None:
        """Prefill (and admission) compress like stalls from now on: a prefill that
        starves decode then lasts as long as `pause_decode`'s stall of its length,
        and an agent's stream shows the gap the exporter judges as a stall. Off, they
        compress like the rest (the rig's time scale)."""
        stretch = self.clock.time_scale / self.stall_scale if stall else 1.0
        self.engine.set_timings(dataclasses.replace(self.engine.timings,
                                                    prefill_stretch=stretch))

    def wedge_scheduler(self, wedged: bool = True) -> None:
        """The scheduler hangs between batches: requests are accepted and never
        get a token, while HTTP and /metrics still answer. It hangs between
        requests: one caught mid-answer would make this a decode stall as well."""
        if wedged:
            self.engine.advance()
            self.engine.scheduler.abort_all()
        self.engine.wedged = wedged

    async def engine_down(self) -> None:
        """The engine process is gone: its port refuses connections."""
        if self.server is not None:
            await self.server.stop()
            self.server = None

    async def engine_up(self) -> None:
        """The engine comes back on the same port, its counters restarted."""
        if self.server is not None:
            return
        self.engine.restart()
        self.server = self._new_server()
        await self.server.start(port=self._port)

    # --- the rig's clock ----------------------------------------------------

    def rescale(self, time_scale: float) -> None:
        """From now on the rig lives `time_scale` times faster (the clock stays
        continuous; stalls keep their own compression)."""
        self.engine.advance()
        self.clock.rescale(time_scale)
        self.engine.time_scale = time_scale

    async def sleep_until(self, scenario_time: float) -> None:
        # Again after waking: the time scale may have changed meanwhile.
        while (remaining := scenario_time - self.clock.now()) > 0:
            await asyncio.sleep(self.clock.real_seconds(remaining))

    # --- the tick loop ------------------------------------------------------

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.tick_seconds)
            self._tick()
            self._write_host()

    def _tick(self) -> None:
        now = self.clock.now()
        dt, self._last_tick = max(0.0, now - self._last_tick), now
        if dt == 0:
            return
        self._move_engine(dt)
        host = self.host
        host.swap_in_bytes_total += host.swap_in_bytes_per_second * dt
        host.swap_out_bytes_total += host.swap_out_bytes_per_second * dt
        grown = (host.swap_out_bytes_per_second - host.swap_in_bytes_per_second) * dt
        host.swap_used_bytes = min(host.swap_total_bytes, max(0.0, host.swap_used_bytes + grown))
        real_dt = self.clock.real_seconds(dt)
        host.pressure_some_seconds += host.pressure_some_ratio * real_dt
        host.pressure_full_seconds += host.pressure_full_ratio * real_dt

    def _move_engine(self, dt: float) -> None:
        flows, engine = self.flows, self.engine
        for keyed, rate in ((engine.prompt_tokens, flows.prompt_tokens),
                            (engine.generation_tokens, flows.generation_tokens)):
            if rate > 0:
                keyed["true"] = keyed.get("true", 0.0) + rate * dt
        for tier, rate in flows.hit_tokens.items():
            if rate > 0:
                source = CACHE_SOURCE[tier]
                engine.cached_tokens[source] = engine.cached_tokens.get(source, 0.0) + rate * dt
        for name in ("evicted_tokens", "loaded_back_tokens", "backed_up_tokens",
                     "storage_prefetched_tokens", "storage_written_tokens"):
            rate = getattr(flows, name)
            # SGLang creates a counter on first use (docs/facts/sglang.md#multiprocess-mode).
            if rate > 0:
                setattr(engine, name, (getattr(engine, name) or 0.0) + rate * dt)

    # --- files --------------------------------------------------------------

    def _write_host(self) -> None:
        host = self.host
        spec = HostSpec(
            memory_total_bytes=int(host.memory_total_bytes),
            memory_available_bytes=int(host.memory_available_bytes),
            swap_total_bytes=int(host.swap_total_bytes),
            swap_used_bytes=int(host.swap_used_bytes),
            swap_in_pages=int(host.swap_in_bytes_total // PAGE),
            swap_out_pages=int(host.swap_out_bytes_total // PAGE),
            pressure_some_us=int(host.pressure_some_seconds * 1e6),
            pressure_full_us=int(host.pressure_full_seconds * 1e6),
        )
        if spec != self._written_host:  # most ticks change nothing the host files show
            write_proc(self.proc_root, spec)
            self._written_host = spec
        if host.cpu_celsius != self._written_cpu:
            write_cpu_hwmon(self.sysfs_root, host.cpu_celsius)
            self._written_cpu = host.cpu_celsius

    def _publish_card(self, spec: CardSpec) -> None:
        """Write a card into a staging tree, then rename each file into the live
        tree, so that a scrape never reads a half-written file."""
        staging = Path(tempfile.mkdtemp(prefix=".stage-", dir=self.directory))
        try:
            sysfs_writer.write_card(staging, spec)
            for folder, dirs, files in os.walk(staging):
                live = self.sysfs_root / Path(folder).relative_to(staging)
                live.mkdir(parents=True, exist_ok=True)
                for name in [*files, *(d for d in dirs if (Path(folder) / d).is_symlink())]:
                    source, target = Path(folder) / name, live / name
                    if source.is_symlink():
                        if not target.is_symlink() or os.readlink(target) != os.readlink(source):
                            target.unlink(missing_ok=True)
                            target.symlink_to(os.readlink(source))
                    elif not (target.is_file()
                              and filecmp.cmp(source, target, shallow=False)):
                        os.replace(source, target)  # an unchanged file stays (procfs_writer)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
