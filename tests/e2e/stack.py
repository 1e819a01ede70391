"""The end-to-end stack's simulated side: rigs whose exporters are real processes.

- Every process runs in its own session (process group) and its own temporary
  directory (`exporter.rigctl.stack.Process`), and the tests' `ExitStack`s stop
  them in reverse order, even when a test fails.
- The simulated SGLang servers and the webhook receiver share one asyncio loop in
  a background thread (`LoopThread`); tests change a rig's state through it.
- Prometheus and Alertmanager: `exporter.rigctl.stack.Monitoring`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from exporter.rigctl.stack import REPO, Process, free_port
from exporter.sim.amdgpu_sysfs import RIG_CARDS, CardSpec, write_card, write_rig
from exporter.sim.procfs import HostSpec, write_proc
from exporter.sim.sglang_server import SimServer
from exporter.sim.sglang_state import SimEngine

T = TypeVar("T")


class LoopThread:
    """An asyncio loop in a daemon thread; `run` waits for a coroutine's result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="e2e-loop",
                                        daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def call(self, fn: Callable[[], T]) -> T:
        async def call() -> T:
            return fn()
        return self.run(call())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


# --------------------------------------------------------------------- the rig
def healthy_engine() -> SimEngine:
    """Two agents decoding, half the KV pool used, HiCache L2 at a third."""
    engine = SimEngine(token_usage=0.5, hicache_host_used_tokens=140_000,
                       hicache_host_total_tokens=423_593, evicted_tokens=0,
                       loaded_back_tokens=0, backed_up_tokens=0)
    engine.running = 2
    return engine


@dataclass
class SimRig:
    """One simulated rig: SGLang server, two-card sysfs tree, /proc files, exporter."""

    name: str
    workdir: Path
    time_scale: float
    # Stall lengths compress by this, not by time_scale (tests/e2e/test_scenarios.py).
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

    def start_exporter(self) -> None:
        assert self.server is not None
        port = free_port()
        self.exporter_address = f"127.0.0.1:{port}"
        # The probe's schedule and deadline (60 s each by default) compress with
        # the rest of time.
        probe = 60 / self.time_scale
        # The stall tracker polls at 2 Hz, not 4: ten simulators render /metrics
        # in one process, and 0.5 s resolves a stall threshold of 5 s.
        engine = (f"main={self.server.url},kind=sglang,probe_interval_seconds={probe:g},"
                  f"probe_timeout_seconds={probe:g},stall_poll_interval_seconds=0.5")
        self.exporter = Process(
            f"exporter {self.name}",
            [sys.executable, "-m", "exporter", "--web.listen-address", self.exporter_address,
             "--sysfs.root", str(self.sysfs), "--gpu.backend", "sysfs",
             "--proc.root", str(self.proc), "--engine", engine],
            self.workdir / "exporter.log", cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )


