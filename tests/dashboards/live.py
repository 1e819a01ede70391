"""A live stack for the dashboard queries: the simulated rig, the real exporter and
the real Prometheus, all on loopback, all torn down on exit.

- The simulated SGLang server (exporter/sim/engine/server.py) runs in a thread with
  its own event loop; a ticker moves its counters (prompt tokens, cache hits per
  tier, HiCache movement, L3, retractions) so that rates are not flat.
- The two-card amdgpu sysfs tree and the /proc files come from exporter/sim.
- `rig-exporter` runs as a subprocess reading all three, with the stream probe on
  and the stream tap in front of the engine; an agent streams through the tap.
- `prometheus` (Debian's 2.42) scrapes it every second with the target label
  `rig="sim"` and evaluates the committed `alerts/rig-rules.yaml` every second.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import aiohttp

from alerts.generate import RULES_PATH
from exporter.process.launch import Process, free_port, start_exporter, wait_ready
from exporter.sim.engine.server import Block, SimServer
from exporter.sim.engine.state import SimEngine
from exporter.sim.rig.procfs_writer import HostSpec, write_cpu_hwmon, write_proc
from exporter.sim.rig.sysfs_writer import write_rig

SCRAPE_SECONDS = 1
RIG = "sim"


def sim_engine() -> SimEngine:
    """An engine mid-session with HiCache L2 and an L3 backend, every family created."""
    engine = SimEngine(
        queued=1, token_usage=0.62, hicache_host_used_tokens=200_000,
        hicache_host_total_tokens=319_193, hicache_storage="file",
        evicted_tokens=0, loaded_back_tokens=0, backed_up_tokens=0,
        storage_prefetched_tokens=0, storage_written_tokens=0, retracted_requests=0,
        spec_accept_length=2.71, spec_accept_rate=0.57,  # MTP=3, as the rig decodes
    )
    engine.running = 2
    return engine


# The simulator serves the engine's latency histograms as captured; the ticker
# observes into them so that their rates and quantiles are not flat (value in s).
OBSERVED = {"sglang:time_to_first_token_seconds": 0.5, "sglang:inter_token_latency_seconds": 0.03}


def observe(blocks: list[Block], per_second: float, seconds: float) -> None:
    """Add `per_second * seconds` observations to each captured latency histogram."""
    n = per_second * seconds
    for block in blocks:
        value = OBSERVED.get(block.name)
        if value is None:
            continue
        for i, (name, labels, text) in enumerate(block.samples):
            if name.endswith("_bucket"):
                le = float(labels["le"])  # "+Inf" parses as inf
                added = n if value <= le else 0.0
            else:
                added = n * value if name.endswith("_sum") else n
            block.samples[i] = (name, labels, repr(float(text) + added))


def advance(engine: SimEngine, seconds: float) -> None:
    """Traffic for `seconds`: prompts partly served by each tier, tokens moving."""
    def add(table: dict[str, float], key: str, tokens: float) -> None:
        table[key] = table.get(key, 0.0) + tokens

    add(engine.prompt_tokens, "true", 4000 * seconds)
    add(engine.generation_tokens, "true", 60 * seconds)
    for source, tokens in (("device", 1500), ("host", 900), ("storage_file", 300)):
        add(engine.cached_tokens, source, tokens * seconds)
    engine.evicted_tokens += 500 * seconds
    engine.loaded_back_tokens += 450 * seconds
    engine.backed_up_tokens += 600 * seconds
    engine.storage_written_tokens += 200 * seconds
    engine.storage_prefetched_tokens += 150 * seconds
    engine.retracted_requests += 1


class SimThread:
    """The simulated SGLang server on its own event loop in a daemon thread."""

    def __init__(self, engine: SimEngine) -> None:
        self.server = SimServer(engine)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._tasks: list[asyncio.Task] = []

    def start(self) -> str:
        self._thread.start()
        url = self.call(self.server.start)
        self._tasks.append(self.call(lambda: self._spawn(self._tick())))
        return url

    def start_agent(self, tap_url: str) -> None:
        """One agent streaming `/generate` requests through the stream tap, back to back."""
        self._tasks.append(self.call(lambda: self._spawn(self._agent(tap_url))))

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` (a plain function or a coroutine function) on the server's loop."""
        async def run() -> Any:
            result = fn()
            return await result if asyncio.iscoroutine(result) else result
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=30)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task:
        return self.loop.create_task(work)

    async def _tick(self) -> None:
        batches = self.server.state.decode_batches()
        while True:
            advance(self.server.state, 0.5)
            # Streamed tokens (the ITL histogram) move only while decode does: the
            # stall tracker reads them as decode progress
            # (docs/stall-tracker.md#signals-by-feature).
            decoded, batches = batches, self.server.state.decode_batches()
            if batches != decoded:
                observe(self.server.blocks, 20, 0.5)
            await asyncio.sleep(0.5)

    async def _agent(self, tap_url: str) -> None:
        request = {"text": "hello", "stream": True,
                   "sampling_params": {"max_new_tokens": 24, "ignore_eos": True}}
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    async with session.post(f"{tap_url}/generate", json=request) as response:
                        await response.read()
                except aiohttp.ClientError:
                    pass  # the tap not listening yet, or going away at the end
                await asyncio.sleep(0.2)

    def stop(self) -> None:
        for task in self._tasks:
            self.loop.call_soon_threadsafe(task.cancel)
        with contextlib.suppress(Exception):
            self.call(self.server.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


def _log_tail(process: Process) -> str:
    return "\n".join(process.log().splitlines()[-20:])


class Stack:
    """Handles to the running stack, and Prometheus' HTTP API."""

    def __init__(self, sim: SimThread, sysfs_root: Path, proc_root: Path,
                 exporter_url: str, prometheus_url: str, processes: list[Process]) -> None:
        self.processes = processes
        self.sim = sim
        self.sysfs_root = sysfs_root
        self.proc_root = proc_root
        self.exporter_url = exporter_url
        self.prometheus_url = prometheus_url

    def api(self, path: str, **params: str) -> dict[str, Any]:
        """GET /api/v1/<path>; returns the decoded body, error bodies included."""
        url = f"{self.prometheus_url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:  # 400/422 carry the parse error
            return json.load(error)

    def query_range(self, expr: str, seconds: float = 10) -> dict[str, Any]:
        end = time.time()
        return self.api("query_range", query=expr, start=f"{end - seconds:.3f}",
                        end=f"{end:.3f}", step="1")

    def series(self, match: str) -> list[dict[str, str]]:
        body = self.api("series", **{"match[]": match})
        assert body["status"] == "success", body
        return body["data"]

    def exposition(self) -> str:
        with urllib.request.urlopen(f"{self.exporter_url}/metrics", timeout=30) as response:
            return response.read().decode()

    def wait_for(self, expr: str, timeout: float = 60) -> list[dict[str, Any]]:
        """The instant result of `expr` once it is not empty."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            body = self.api("query", query=expr)
            if body["status"] == "success" and body["data"]["result"]:
                return body["data"]["result"]
            time.sleep(0.5)
        logs = "\n".join(f"--- {p.name}\n{_log_tail(p)}" for p in self.processes)
        raise AssertionError(f"{expr} returned nothing within {timeout} s\n{logs}")


def _prometheus_config(exporter: str) -> str:
    return json.dumps({  # JSON is YAML
        "global": {"scrape_interval": f"{SCRAPE_SECONDS}s",
                   "evaluation_interval": f"{SCRAPE_SECONDS}s"},
        "rule_files": [str(RULES_PATH)],
        "scrape_configs": [{
            "job_name": "rig",
            "static_configs": [{"targets": [exporter], "labels": {"rig": RIG}}],
        }],
    })


@contextlib.contextmanager
def running_stack(tmp: Path) -> Iterator[Stack]:
    prometheus_bin = shutil.which("prometheus")
    assert prometheus_bin, "prometheus not found: apt-get install prometheus"
    sysfs_root, proc_root = tmp / "sys", tmp / "proc"
    write_rig(sysfs_root)
    write_cpu_hwmon(sysfs_root, 68.0)  # the Ryzen's k10temp Tctl
    write_proc(proc_root, HostSpec(swap_in_pages=100, swap_out_pages=200))
    sim = SimThread(sim_engine())
    with contextlib.ExitStack() as stack:
        stack.callback(sim.stop)
        engine_url = sim.start()
        tap_address = f"127.0.0.1:{free_port()}"
        exporter = stack.enter_context(start_exporter(
            ["--engine", f"main={engine_url},probe_interval_seconds=1",
             "--tap.listen-address", f"main={tap_address}",
             "--sysfs.root", str(sysfs_root), "--proc.root", str(proc_root),
             "--gpu.backend", "sysfs", "--log.level", "warning"],
            tmp, wait=False))
        exporter.wait_ready(timeout=60)
        sim.start_agent(f"http://{tap_address}")
        config = tmp / "prometheus.yml"
        config.write_text(_prometheus_config(exporter.address))
        prometheus_address = f"127.0.0.1:{free_port()}"
        prometheus = stack.enter_context(Process(
            "prometheus",
            [prometheus_bin, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address={prometheus_address}", "--log.level=warn"],
            tmp / "prometheus.log"))
        prometheus_url = f"http://{prometheus_address}"
        wait_ready(f"{prometheus_url}/-/ready", prometheus, timeout=60)
        yield Stack(sim, sysfs_root, proc_root, exporter.url, prometheus_url,
                    [exporter, prometheus])
