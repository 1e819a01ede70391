"""What SGLang's forward-pass feed, and the exporter's subscription to it, cost the engine.

    .venv/bin/python bench/bench_feed_engine_cost.py [--answers 3] [--tokens 1000] [--no-busy]

Starts the real-engine tier's SGLang 0.5.23 for the CPU (`sglang_server` in
tests/support/real_engines.py: the tiny random model, torch_native attention, every
engine process pinned to one core, the other left to this process) with the feed on
(`--enable-forward-pass-metrics --forward-pass-metrics-ipc-name ipc://...`) and its
samples in a PROMETHEUS_MULTIPROC_DIR. Then, in each mode, it streams `--answers`
answers of `--tokens` tokens (ignore_eos), one after another, straight to the engine:

1. `none`: no exporter; SGLang's publisher thread still encodes and sends every pass;
2. `exporter, feed off`: an in-process exporter reading the engine's metrics_dir,
   `forward_pass_metrics_ipc = "off"` (the counter plan alone, no /metrics render);
3. `exporter, feed on`: the same exporter subscribed to the feed;
4. `feed on, cores busy` (unless --no-busy): mode 3 with a spinner
   (tests/support/cpu_load.py's loop) pinned to each core, the engine's included.

Per mode it prints decode tokens/s as the client sees it (each answer's first chunk to
its last), the scheduler's CPU per generated token from its own
`sglang:scheduler_process_cpu_seconds_total` (flushed at most once a second, so it
waits for a flush before and after) and from /proc (the scheduler process's utime and
stime, exact), the engine's CPU share as the doctor computes it (CPU seconds per busy
scheduler second, `rigctl doctor`'s scheduler_cpu), and this process's CPU (the
client's in every mode; the exporter's is the excess over mode 1). In mode 4 the
doctor's own check judges three scrapes of the exporter (the run's start, its middle,
its end), as `rigctl doctor` would.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from exporter.config import Config, EngineConfig, GpuConfig, HostConfig  # noqa: E402
from exporter.daemon.engines.exposition import parse  # noqa: E402
from exporter.daemon.engines.source import EngineSource  # noqa: E402
from exporter.daemon.runtime import Exporter  # noqa: E402
from exporter.rigctl.doctor.context import Context  # noqa: E402
from exporter.rigctl.doctor.engine import _scheduler_cpu  # noqa: E402
from exporter.rigctl.doctor.watch import FAMILIES, Scrape, Watch  # noqa: E402
from exporter.thresholds import SCHEDULER_CPU_SHORT_RATIO  # noqa: E402
from tests.support.cpu_load import SPIN  # noqa: E402
from tests.support.real_engines import (  # noqa: E402
    MODEL,
    SOLO,
    RealEngine,
    sglang_server,
    token_ids,
)

PROMPT_TOKENS = 16
#: One answer may take this long before the run gives up (a spinner on the engine's
#: core slows decode; it must still end).
ANSWER_TIMEOUT_SECONDS = 300.0
#: How long to wait for the scheduler to flush its time counters (once a second at
#: most, at its loop's events).
FLUSH_WAIT_SECONDS = 4.0
IDLE_SECONDS = 5.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: The doctor's families, and the feed's passes (to count the messages taken).
WANTED = FAMILIES | {"rig_engine_decode_stall_feed_passes_total"}


# --- the engine's side ---------------------------------------------------------------

def _group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid:
                    pids.append(int(entry.name))
    return pids


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def _scheduler_pid(engine: RealEngine) -> int:
    for pid in _group_pids(engine.process.popen.pid):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sglang::scheduler"):
                return pid
    raise RuntimeError("no sglang::scheduler process in the engine's process group")


@dataclass(frozen=True)
class EngineReading:
    cpu: float  # sglang:scheduler_process_cpu_seconds_total
    idle: float  # sglang:scheduler_idle_seconds_total
    stages: float  # sglang:scheduler_stage_seconds_total, every stage
    generated: float  # sglang:generation_tokens_total
    scheduler_proc: float  # the scheduler process's CPU from /proc
    engine_proc: float  # every engine process's CPU from /proc


async def _engine_reading(session: aiohttp.ClientSession, engine: RealEngine,
                          scheduler: int) -> EngineReading:
    async with session.get(engine.url + "/metrics") as response:
        text = await response.text()
    totals = {"sglang:scheduler_process_cpu_seconds_total": 0.0,
              "sglang:scheduler_idle_seconds_total": 0.0,
              "sglang:scheduler_stage_seconds_total": 0.0,
              "sglang:generation_tokens_total": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    group = 0.0
    for pid in _group_pids(engine.process.popen.pid):
        with contextlib.suppress(OSError):
            group += _cpu_seconds(pid)
    cpu, idle, stages, generated = totals.values()
    return EngineReading(cpu, idle, stages, generated, _cpu_seconds(scheduler), group)


async def _flushed_reading(session: aiohttp.ClientSession, engine: RealEngine,
                           scheduler: int) -> EngineReading:
    """A reading taken just after the scheduler flushed its counters: the first whose
    CPU counter moved, within FLUSH_WAIT_SECONDS."""
    first = await _engine_reading(session, engine, scheduler)
    deadline = time.monotonic() + FLUSH_WAIT_SECONDS
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        reading = await _engine_reading(session, engine, scheduler)
        if reading.cpu != first.cpu:
            return reading
    return first


# --- the client ----------------------------------------------------------------------

async def _answer(session: aiohttp.ClientSession, url: str, prompt: list[int], tokens: int,
                  progress: list[int]) -> tuple[float, float]:
    """One streamed answer: (first chunk's arrival, last chunk's)."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": tokens, "ignore_eos": True,
            "stream": True}
    first = last = 0.0
    async with session.post(url + "/v1/completions", json=body,
                            timeout=aiohttp.ClientTimeout(total=ANSWER_TIMEOUT_SECONDS)) as r:
        if r.status != 200:
            raise RuntimeError(f"the engine answered {r.status}: {(await r.text())[:200]}")
        async for line in r.content:
            if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                continue
            last = time.monotonic()
            first = first or last
            progress[0] += 1
    return first, last


# --- the exporter --------------------------------------------------------------------

@contextlib.asynccontextmanager
async def _exporter(engine: RealEngine, feed: str) -> AsyncIterator[Exporter]:
    """An in-process exporter of the engine reading its metrics_dir (so it costs the
    engine no /metrics render), `feed` its forward_pass_metrics_ipc."""
    table = EngineConfig(name=SOLO, url=engine.url, kind="sglang",
                         metrics_dir=str(engine.metrics_dir), forward_pass_metrics_ipc=feed)
    exporter = Exporter(Config(gpu=GpuConfig(enabled=False), host=HostConfig(enabled=False),
                               engines=(table,)))
    await exporter.start()
    try:
        yield exporter
    finally:
        await exporter.close()


def _plan(exporter: Exporter) -> str:
    (source,) = (s for s in exporter.sources if isinstance(s, EngineSource))
    plan = source.stall.plan if source.stall is not None else None
    return plan.name if plan is not None else "none yet"


async def _settled_plan(exporter: Exporter, wanted: str, seconds: float = 20.0) -> str:
    deadline = time.monotonic() + seconds
    while (plan := _plan(exporter)) != wanted and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
    return plan


async def _scrape(exporter: Exporter) -> Scrape:
    """The exporter's /metrics as the doctor reads it, rendered in process."""
    at = time.monotonic()
    text = exporter.render(await exporter.snapshot()).decode()
    samples: dict = {}
    for family in parse(text, WANTED).families.values():
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return Scrape(at, samples)


# --- a mode --------------------------------------------------------------------------

@contextlib.contextmanager
def _spinners() -> Iterator[list[int]]:
    """One spinning process pinned to each core this process may use."""
    taskset = shutil.which("taskset") or "/usr/bin/taskset"
    spinners = [subprocess.Popen([taskset, "-c", str(cpu), sys.executable, "-c", SPIN])
                for cpu in sorted(os.sched_getaffinity(0))]
    try:
        yield [p.pid for p in spinners]
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait(10)


@dataclass
class Result:
    mode: str
    plan: str
    tokens: float
    client_tokens_per_second: float
    scheduler_cpu_per_token_counter: float
    scheduler_cpu_per_token_proc: float
    engine_cpu_per_token_proc: float
    doctor_share_engine: float
    own_cpu_seconds: float
    wall_seconds: float
    feed_messages: float | None = None
    doctor: str = ""


def _feed_passes(scrape: Scrape) -> float | None:
    return scrape.total("rig_engine_decode_stall_feed_passes_total", engine=SOLO)


async def _run_mode(mode: str, engine: RealEngine, feed: str, answers: int, tokens: int,
                    rng: random.Random) -> Result:
    scheduler = _scheduler_pid(engine)
    async with contextlib.AsyncExitStack() as stack:
        session = await stack.enter_async_context(aiohttp.ClientSession())
        exporter = None
        plan = "no exporter"
        if mode != "none":
            ipc = "off" if mode == "exporter, feed off" else feed
            exporter = await stack.enter_async_context(_exporter(engine, ipc))
            plan = await _settled_plan(
                exporter, "http_in_flight" if ipc == "off" else "forward_pass_feed")
        if mode == "feed on, cores busy":
            stack.enter_context(_spinners())
            await asyncio.sleep(2.0)
        await asyncio.sleep(1.0)
        scrapes = [await _scrape(exporter)] if exporter is not None else []
        before = await _flushed_reading(session, engine, scheduler)
        own, wall = time.process_time(), time.monotonic()
        progress = [0]
        halfway = answers * tokens // 2

        async def middle_scrape() -> None:
            while progress[0] < halfway:
                await asyncio.sleep(0.05)
            scrapes.append(await _scrape(exporter))

        middle = asyncio.create_task(middle_scrape()) if exporter is not None else None
        spans = [await _answer(session, engine.url, token_ids(PROMPT_TOKENS, rng), tokens,
                               progress) for _ in range(answers)]
        if middle is not None:
            await middle
            scrapes.append(await _scrape(exporter))
        own, wall = time.process_time() - own, time.monotonic() - wall
        after = await _flushed_reading(session, engine, scheduler)
    generated = after.generated - before.generated or answers * tokens
    decode_seconds = sum(last - first for first, last in spans)
    busy = (after.stages - before.stages) - (after.idle - before.idle)
    result = Result(
        mode=mode, plan=plan, tokens=generated,
        client_tokens_per_second=answers * (tokens - 1) / decode_seconds,
        scheduler_cpu_per_token_counter=(after.cpu - before.cpu) / generated,
        scheduler_cpu_per_token_proc=(after.scheduler_proc - before.scheduler_proc) / generated,
        engine_cpu_per_token_proc=(after.engine_proc - before.engine_proc) / generated,
        doctor_share_engine=(after.cpu - before.cpu) / busy if busy > 0 else float("nan"),
        own_cpu_seconds=own, wall_seconds=wall)
    if scrapes:
        first_passes, last_passes = _feed_passes(scrapes[0]), _feed_passes(scrapes[-1])
        if first_passes is not None and last_passes is not None:
            result.feed_messages = last_passes - first_passes
        check = _scheduler_cpu(Context(exporter="in-process", watch=Watch(tuple(scrapes))), SOLO)
        result.doctor = f"{check.status.name}: {check.detail}"
    return result


def _print(results: list[Result]) -> None:
    base = results[0]
    print(f"\n{'mode':22s} {'client tok/s':>12s} {'sched CPU ms/token':>18s} "
          f"{'(/proc)':>8s} {'engine ms/token':>15s} {'CPU/busy s':>10s} "
          f"{'own CPU s':>9s} {'over none':>9s} {'feed msgs':>9s}  plan")
    for r in results:
        extra = r.own_cpu_seconds / r.tokens - base.own_cpu_seconds / base.tokens
        print(f"{r.mode:22s} {r.client_tokens_per_second:>12.1f} "
              f"{r.scheduler_cpu_per_token_counter * 1e3:>18.3f} "
              f"{r.scheduler_cpu_per_token_proc * 1e3:>8.3f} "
              f"{r.engine_cpu_per_token_proc * 1e3:>15.3f} {r.doctor_share_engine:>10.2f} "
              f"{r.own_cpu_seconds:>9.2f} {extra * r.tokens:>9.2f} "
              f"{'-' if r.feed_messages is None else f'{r.feed_messages:.0f}':>9s}  {r.plan}")
    for r in results:
        if r.feed_messages and r.mode != "none":
            extra = r.own_cpu_seconds - base.own_cpu_seconds / base.tokens * r.tokens
            print(f"{r.mode}: this process's CPU over mode none's, per feed message: "
                  f"{extra / r.feed_messages * 1e6:.0f} us ({r.feed_messages:.0f} messages, "
                  f"{r.tokens:.0f} tokens, {r.wall_seconds:.1f} s)")
        if r.doctor:
            print(f"{r.mode}: the doctor's scheduler_cpu (short below "
                  f"{SCHEDULER_CPU_SHORT_RATIO:g}): {r.doctor}")


async def _measure(engine: RealEngine, feed: str, answers: int, tokens: int,
                   busy: bool) -> list[Result]:
    rng = random.Random(35)
    async with aiohttp.ClientSession() as session:  # a first answer warms the engine up
        await _answer(session, engine.url, token_ids(PROMPT_TOKENS, rng), 64, [0])
    scheduler = _scheduler_pid(engine)
    idle_cpu, idle_wall = _cpu_seconds(scheduler), time.monotonic()
    await asyncio.sleep(IDLE_SECONDS)
    idle_share = (_cpu_seconds(scheduler) - idle_cpu) / (time.monotonic() - idle_wall)
    print(f"the idle scheduler's CPU (/proc, {IDLE_SECONDS:g} s): {idle_share:.1%} of a core")
    modes = ["none", "exporter, feed off", "exporter, feed on"]
    modes += ["feed on, cores busy"] if busy else []
    results = []
    for mode in modes:
        results.append(await _run_mode(mode, engine, feed, answers, tokens, rng))
        r = results[-1]
        print(f"{mode}: {r.tokens:.0f} tokens in {r.wall_seconds:.1f} s", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--no-busy", action="store_true",
                        help="skip the mode with every core kept busy")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fpm-engine-cost-") as workdir:
        feed = f"ipc://{workdir}/fpm"
        with sglang_server(("--enable-forward-pass-metrics", "--forward-pass-metrics-ipc-name",
                            feed), Path(workdir), Path(workdir) / "prometheus-multiproc") as engine:
            results = asyncio.run(_measure(engine, feed, args.answers, args.tokens,
                                           not args.no_busy))
    print(f"SGLang 0.5.23 for the CPU, {args.answers} answers of {args.tokens} tokens "
          f"(ignore_eos) one after another, engine on cores "
          f"{sorted(os.sched_getaffinity(0))[:-1]}, this process unpinned")
    _print(results)


if __name__ == "__main__":
    main()
