"""A live rig for `rigctl health`: a real exporter process reading a simulated rig
(SGLang server in the caller's event loop, sysfs and /proc trees on disk), with windows
and holds compressed through the config's [thresholds]."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

from exporter.process.launch import free_port, start_exporter
from exporter.sim.engine.server import SimServer
from exporter.sim.engine.state import SimEngine
from exporter.sim.rig.procfs_writer import HostSpec, write_proc
from exporter.sim.rig.sysfs_writer import RIG_CARDS, CardSpec, write_rig
from tests.support.rig_readings import validate

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
MIB = 1024 * 1024

# Compressed windows and holds; everything else keeps its default.
THRESHOLDS = """
[thresholds]
rate_window_seconds = 2
host_swap_growth_window_seconds = 3
hicache_recompute_window_seconds = 3
hicache_recompute_tokens = 4096
hicache_storage_window_seconds = 3
kv_saturated_for_seconds = 3
decode_stutter_window_seconds = 3
decode_stall_critical_seconds = 2.0
decode_stutter_seconds = 0.5
hicache_host_pool_for_seconds = 1
hicache_churn_for_seconds = 1
"""
WINDOW_SECONDS = 3.5  # the longest window above, and a sample


@dataclasses.dataclass
class LiveRig:
    engine: SimEngine
    url: str
    proc: Path

    async def rigctl(self, *args: str, exporter: str | None = None) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "exporter.rigctl", "health",
            "--exporter", exporter or self.url, *args,
            cwd=REPO, env=ENV, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    async def until(self, code: int, within: float = 45.0) -> tuple[int, str, str]:
        """Run rigctl health until it exits `code` (the rig needs a few samples)."""
        deadline = time.monotonic() + within
        while True:
            result = await self.rigctl()
            if result[0] == code or time.monotonic() > deadline:
                return result
            await asyncio.sleep(0.5)

    async def report(self) -> dict:
        code, out, _ = await self.rigctl("--json")
        report = json.loads(out)
        validate(report)
        assert code == {"ok": 0, "warn": 1, "crit": 2, "unknown": 3}[report["status"]]
        return report


def write_host(root: Path, spec: HostSpec) -> None:
    """Write the proc tree beside it, then move each file in whole: the exporter
    never reads a half-written meminfo."""
    staging = root.with_name(root.name + ".new")
    write_proc(staging, spec)
    for relative in ("meminfo", "vmstat", "pressure/memory"):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / relative, root / relative)


@asynccontextmanager
async def live_rig(tmp_path: Path, cards: tuple[CardSpec, ...] = RIG_CARDS,
                   engine: SimEngine | None = None):
    engine = engine or SimEngine()
    engine.running = 2
    write_rig(tmp_path / "sys", cards)
    write_host(tmp_path / "proc", HostSpec())
    sim = SimServer(engine)
    await sim.start()
    port = free_port()
    config = tmp_path / "rig.toml"
    config.write_text(f"""
[web]
listen_address = "127.0.0.1:{port}"
[[engine]]
name = "main"
url = "{sim.url}"
[gpu]
backend = "sysfs"
sysfs_root = "{tmp_path / 'sys'}"
[host]
proc_root = "{tmp_path / 'proc'}"
[health]
sample_interval_seconds = 0.25
{THRESHOLDS}""")
    # Started in this thread, waited for in another: it dies with the thread that
    # started it (exporter.process.launch.Process).
    exporter = start_exporter(["--config.file", str(config)], tmp_path,
                              address=f"127.0.0.1:{port}", wait=False)
    try:
        await asyncio.to_thread(exporter.wait_ready)
        yield LiveRig(engine, exporter.url, tmp_path / "proc")
    finally:
        await asyncio.to_thread(exporter.stop)  # the simulated engine keeps answering
        await sim.stop()
