"""The real engines of the real-engine tier (docs/testing.md#the-real-engine-tier):
vLLM for the CPU, llama.cpp's llama-server and SGLang for the CPU, each serving a tiny
random model made on the spot, on a free loopback port, in its own process group,
always stopped.

`tests/real_engines/install.sh` (or `./setup.sh --real-engines`) installs them under
the cache directory; a missing one fails the test that needs it with that command.
The models are made once per version of tests/real_engines/tiny_models.py and kept
in the cache too.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import fcntl
import hashlib
import itertools
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import AgentConfig, Config, EngineConfig, GpuConfig, HostConfig
from exporter.daemon.engines.source import EngineSource
from exporter.daemon.runtime import Exporter
from exporter.daemon.sources.host import psi_total
from exporter.process.launch import Process, free_port, wait_ready
from exporter.streams import StreamMeter

CACHE = Path(os.environ.get("RIG_TELEMETRY_CACHE", Path.home() / ".cache" / "rig-telemetry"))
VLLM_VENV = CACHE / "vllm-venv"
SGLANG_VENV = CACHE / "sglang-venv"
LLAMA_SERVER = CACHE / "bin" / "llama-server"
MODEL_MAKER = Path(__file__).resolve().parents[1] / "real_engines" / "tiny_models.py"
INSTALL_HINT = "run ./setup.sh --real-engines (tests/real_engines/install.sh)"
#: The name both engines serve their model under.
MODEL = "tiny"
CONTEXT_TOKENS = 32_768

#: vLLM's flags unless a test says otherwise: the cached prompt tokens are reported
#: only with --enable-prompt-tokens-details (vllm/entrypoints/openai/cli_args.py).
VLLM_FLAGS: tuple[str, ...] = ("--max-model-len", str(CONTEXT_TOKENS),
                               "--enable-prompt-tokens-details")
#: llama-server's: one context shared by 4 slots (-kvu, else each slot gets a quarter
#: and a 16k prompt is refused), the /metrics and /slots routes, and one thread, since
#: the tests share 2 cores (with -t 2 and a busy neighbour, decode fell to 0.8 tok/s).
LLAMA_FLAGS: tuple[str, ...] = ("-c", str(CONTEXT_TOKENS), "-np", "4", "-kvu", "-t", "1",
                                "--metrics", "--slots", "--no-webui")
#: SGLang's, on the CPU (docs/testing.md#sglang-on-the-cpu): torch's own attention
#: and linears (no AMX here), no CUDA graphs, no overlap scheduler (it needs a device
#: stream), one TP rank, and a KV pool of a set size (else it is sized from the host's
#: free RAM). Metrics on: they are what the tier reads.
SGLANG_FLAGS: tuple[str, ...] = (
    "--device", "cpu", "--attention-backend", "torch_native", "--disable-cuda-graph",
    "--disable-overlap-schedule", "--context-length", str(CONTEXT_TOKENS),
    "--max-total-tokens", "65536", "--tp", "1", "--enable-metrics")
#: vLLM is ready in 41-73 s on 2 quiet cores (a third of it compiling); give it room.
VLLM_START_SECONDS = 400.0
LLAMA_START_SECONDS = 60.0
#: SGLang on one core: 41 s cold, 21-31 s after, on a quiet box.
SGLANG_START_SECONDS = 300.0


class NotInstalled(RuntimeError):
    """A real engine the tier needs is not in the cache."""


@dataclass(frozen=True)
class RealEngine:
    """A running real engine: its base URL (no /v1), its kind and its flags."""

    kind: str  # vllm | llamacpp | sglang
    url: str
    flags: tuple[str, ...]
    process: Process
    #: SGLang's PROMETHEUS_MULTIPROC_DIR, where it was given one.
    metrics_dir: Path | None = None

    @property
    def address(self) -> str:
        return self.url.removeprefix("http://")


def vllm_python() -> Path:
    python = VLLM_VENV / "bin" / "python"
    if not python.exists():
        raise NotInstalled(f"vLLM is not installed in {VLLM_VENV}: {INSTALL_HINT}")
    return python


def sglang_python() -> Path:
    python = SGLANG_VENV / "bin" / "python"
    if not (SGLANG_VENV / "rig-sglang-cpu").is_dir():
        raise NotInstalled(f"SGLang is not installed in {SGLANG_VENV}: {INSTALL_HINT}")
    return python


def llama_server_binary() -> Path:
    if not LLAMA_SERVER.exists():
        raise NotInstalled(f"llama-server is not built at {LLAMA_SERVER}: {INSTALL_HINT}")
    return LLAMA_SERVER


def tiny_model(kind: str) -> Path:
    """The tiny model for `kind` ("vllm": a directory; "gguf": a file), made by the
    engines' venv the first time, then reused while tiny_models.py is unchanged. A lock
    keeps two test processes from making it at once."""
    version = hashlib.sha256(MODEL_MAKER.read_bytes()).hexdigest()[:12]
    models = CACHE / "models"
    models.mkdir(parents=True, exist_ok=True)
    target = models / (f"tiny-{version}.gguf" if kind == "gguf" else f"tiny-vllm-{version}")
    with open(models / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            with tempfile.TemporaryDirectory(dir=models) as scratch:
                made = Path(scratch) / target.name
                subprocess.run([str(vllm_python()), str(MODEL_MAKER), kind, str(made)],
                               check=True, env=_engine_env(), capture_output=True, timeout=300)
                made.rename(target)
    return target


def _engine_env() -> dict[str, str]:
    """Nothing from a hub (there is none here), vLLM's compile cache and scratch files
    under the cache rather than ~/.cache/vllm and /tmp, and its log unbuffered."""
    tmp = CACHE / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CACHE_ROOT": str(CACHE / "vllm-cache"), "TMPDIR": str(tmp),
            # The KV cache, in GiB: 2 holds 524,288 tokens of the tiny model.
            "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            # Its log lines reach the file as they are written, for a test to read.
            "PYTHONUNBUFFERED": "1"}


def _env_argv(env: dict[str, str]) -> list[str]:
    """`env K=V ... `: Process inherits this process's environment, so the engine's
    own variables go on its command line."""
    changed = [f"{k}={v}" for k, v in env.items() if os.environ.get(k) != v]
    return [shutil.which("env") or "/usr/bin/env", *changed]


@contextlib.contextmanager
def vllm_server(flags: Sequence[str] = (), log_dir: Path | None = None) -> Iterator[RealEngine]:
    """`vllm serve` on the tiny model with VLLM_FLAGS then `flags` (a later flag wins),
    until /v1/models answers."""
    vllm = vllm_python().parent / "vllm"
    model = tiny_model("vllm")
    port = free_port()
    every = (*VLLM_FLAGS, *flags)
    argv = [*_env_argv(_engine_env()), str(vllm), "serve", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--served-model-name", MODEL, *every]
    with _started("vllm", argv, log_dir, port, every, "/v1/models",
                  VLLM_START_SECONDS) as engine:
        yield engine


@contextlib.contextmanager
def sglang_server(flags: Sequence[str] = (), log_dir: Path | None = None,
                  metrics_dir: Path | None = None) -> Iterator[RealEngine]:
    """SGLang's launch_server on the tiny model (the vLLM tier's: safetensors and its
    tokenizer serve as they are) with SGLANG_FLAGS then `flags`, until /health
    answers; with `metrics_dir`, its prometheus_client writes its samples there
    (PROMETHEUS_MULTIPROC_DIR), as on the rig."""
    python = sglang_python()
    model = tiny_model("vllm")
    port = free_port()
    every = (*SGLANG_FLAGS, *flags)
    env = {**_engine_env(),
           # Without it SGLang's is_cpu() is False (srt/utils/common.py).
           "SGLANG_USE_CPU_ENGINE": "1",
           # One thread: the engine gets one core of two (_confined_to_engine_cpus).
           "OMP_NUM_THREADS": "1"}
    if metrics_dir is not None:
        metrics_dir.mkdir(parents=True, exist_ok=True)
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    argv = [*_env_argv(env), str(python), "-m", "sglang.launch_server", "--model-path",
            str(model), "--served-model-name", MODEL, "--host", "127.0.0.1", "--port",
            str(port), *every]
    with _started("sglang", argv, log_dir, port, every, "/health",
                  SGLANG_START_SECONDS, metrics_dir) as engine:
        yield engine


@contextlib.contextmanager
def llama_server(flags: Sequence[str] = (), log_dir: Path | None = None) -> Iterator[RealEngine]:
    """`llama-server` on the tiny GGUF with LLAMA_FLAGS then `flags` (a later flag
    wins, so `("-b", "512")` or `("-t", "2")` vary a run), until /health answers."""
    binary = llama_server_binary()
    model = tiny_model("gguf")
    port = free_port()
    every = (*LLAMA_FLAGS, *flags)
    argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-a", MODEL, *every]
    with _started("llamacpp", argv, log_dir, port, every, "/health",
                  LLAMA_START_SECONDS) as engine:
        yield engine


def _confined_to_engine_cpus() -> list[str]:
    """`taskset -c CPUS`: the engine gets every core this process may use but the
    last, which stays free for the test's own process (its clients, tap and exporter).
    On this machine's kernel, vLLM busy on both of 2 cores (its worker on one, its
    engine core's wait loop on the other) left every other process no CPU at all for
    up to 39 s, at nice 10 as at 0: the client and the tracker then measured nothing
    (docs/testing.md#the-observers-core)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return []
    return [shutil.which("taskset") or "/usr/bin/taskset", "-c",
            ",".join(str(cpu) for cpu in cpus[:-1])]


@contextlib.contextmanager
def _started(kind: str, argv: list[str], log_dir: Path | None, port: int,
             flags: tuple[str, ...], ready_path: str, timeout: float,
             metrics_dir: Path | None = None) -> Iterator[RealEngine]:
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix=f"rig-{kind}-"))
    with Process(kind, [*_confined_to_engine_cpus(), *argv],
                 log_dir / f"{kind}-{port}.log") as process:
        url = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        wait_ready(url + ready_path, process, timeout)
        print(f"\n{kind} ready in {time.monotonic() - started:.1f} s")
        yield RealEngine(kind, url, flags, process, metrics_dir)


#: The engine name the in-process exporters of the tier's tests give their engine.
SOLO = "solo"


#: The solo exporter's stall window: a whole test of the tier (its pytest timeout), so
#: that the stall a client felt early in the scenario is still the tracker's longest
#: when the test reads it; with the rules' 60 s, a slow box let it age out unread.
SOLO_STALL_WINDOW_SECONDS = 900.0


@dataclass(frozen=True)
class Solo:
    """An in-process exporter of one engine, and its tap's URL."""

    exporter: Exporter
    url: str

    async def scrape(self) -> dict[str, float]:
        """A scrape's samples of the engine (`solo_series`)."""
        return solo_series(self.exporter.render(await self.exporter.snapshot()).decode())

    def stalls(self) -> list[tuple[float, float, float]]:
        """The stalls the tracker has finished, (ended at, lower, upper) on
        time.monotonic(): read from the tracker itself, at no cost to the engine."""
        (engine,) = (s for s in self.exporter.sources if isinstance(s, EngineSource))
        assert engine.stall is not None, "the stall tracker has not started"
        return engine.stall.tracker.recent(time.monotonic())


@contextlib.asynccontextmanager
async def solo_exporter(engine: RealEngine, kind: str,
                        metrics_dir: Path | None = None) -> AsyncIterator[Solo]:
    """An in-process exporter of `engine` alone (no GPU, no host), running, with a tap
    naming agents alpha (`X-Agent: a`) and beta (`X-Agent: b`); closed after. With
    `metrics_dir` (SGLang's), its stall tracker reads the engine's files."""
    tap = f"127.0.0.1:{free_port()}"
    table = EngineConfig(name=SOLO, url=engine.url, kind=kind, tap_listen_address=tap,
                         stall_window_seconds=SOLO_STALL_WINDOW_SECONDS,
                         metrics_dir=str(metrics_dir) if metrics_dir is not None else "",
                         agents=(AgentConfig("alpha", header_name="X-Agent", header_value="a"),
                                 AgentConfig("beta", header_name="X-Agent", header_value="b")))
    exporter = Exporter(Config(gpu=GpuConfig(enabled=False), host=HostConfig(enabled=False),
                               engines=(table,)))
    await exporter.start()
    try:
        yield Solo(exporter, f"http://{tap}")
    finally:
        await exporter.close()


#: The test's own event loop standing still this long is noted, with every thread's
#: stack as faulthandler's watchdog thread saw it (it writes without the loop or the
#: GIL): a client and a tap that stand still measure nothing.
LOOP_STILL_SECONDS = 1.0


class Timeline:
    """When a scenario's events happened, on time.monotonic() from its start, and the
    longest pause between a stream's chunks: the line a tier test prints, so that a
    failure on another machine says what happened when. While `watching()`, it also
    notes when the test's own process stood still, and whether the whole process or
    only its event loop did (docs/testing.md#when-the-test-itself-stands-still)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.events: dict[str, float] = {}
        self.arrivals: dict[str, list[float]] = {}
        #: (from, seconds) on the timeline: the event loop's ticks, and a plain
        #: thread's, that came LOOP_STILL_SECONDS or more late.
        self.loop_still: list[tuple[float, float]] = []
        self.thread_still: list[tuple[float, float]] = []
        #: What faulthandler wrote while watching: every thread's stack, each time the
        #: loop had stood still for twice LOOP_STILL_SECONDS.
        self.stacks = ""
        self._pressure = _pressure_stalled_seconds()

    def mark(self, event: str) -> None:
        self.events[event] = time.monotonic() - self.start

    def arrived(self, stream: str) -> None:
        self.arrivals.setdefault(stream, []).append(time.monotonic() - self.start)

    def longest_pause(self, stream: str) -> tuple[float, float]:
        """The longest time between two of the stream's chunks: (from, to)."""
        times = self.arrivals.get(stream, [])
        return max(itertools.pairwise(times), key=lambda pair: pair[1] - pair[0],
                   default=(0.0, 0.0))

    def stood_still_within(self, begin: float, end: float) -> list[tuple[float, float]]:
        """The loop's standstills that overlap (begin, end): a pause measured across
        one may be the test's own, not the engine's."""
        return [(at, late) for at, late in self.loop_still if at < end and at + late > begin]

    @contextlib.asynccontextmanager
    async def watching(self, tick: float = 0.25) -> AsyncIterator[None]:
        """Watch the event loop (a task) and the process (a thread) tick while the
        scenario runs."""
        stop = threading.Event()

        def note(still: list[tuple[float, float]], before: float) -> None:
            late = time.monotonic() - before - tick
            if late >= LOOP_STILL_SECONDS:
                still.append((before - self.start, late))

        def thread_watch() -> None:
            before = time.monotonic()
            while not stop.wait(tick):
                note(self.thread_still, before)
                before = time.monotonic()

        async def loop_watch(stacks: IO[str]) -> None:
            while True:
                before = time.monotonic()
                faulthandler.dump_traceback_later(LOOP_STILL_SECONDS * 2, file=stacks)
                await asyncio.sleep(tick)
                note(self.loop_still, before)

        thread = threading.Thread(target=thread_watch, name="timeline-watch", daemon=True)
        with tempfile.TemporaryFile("w+") as stacks:
            thread.start()
            task = asyncio.create_task(loop_watch(stacks))
            try:
                yield
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                faulthandler.cancel_dump_traceback_later()
                stop.set()
                thread.join()
                stacks.seek(0)
                self.stacks = stacks.read()

    def describe(self, stream: str, stalls: list[tuple[float, float, float]]) -> str:
        events = ", ".join(f"{name} {at:.2f}" for name, at in self.events.items())
        paused_from, paused_to = self.longest_pause(stream)
        seen = ", ".join(f"[{low:.2f}, {high:.2f}] s ending {ended - self.start:.2f}"
                         for ended, low, high in stalls) or "none"
        lines = [f"at s from the start: {events}; {stream}'s longest pause between chunks "
                 f"{paused_from:.2f}-{paused_to:.2f}; the tracker's stalls: {seen}"]
        for name, still in (("event loop", self.loop_still), ("thread", self.thread_still)):
            if still:
                lines.append(f"the test's own {name} stood still: " + ", ".join(
                    f"{late:.2f} s from {at:.2f}" for at, late in still))
        now = _pressure_stalled_seconds()
        stalled = {kind: now[kind] - before for kind, before in self._pressure.items()
                   if kind in now}
        lines.append("the box's pressure stall (some tasks waiting) since the start: " + (
            ", ".join(f"{kind} {seconds:.1f} s" for kind, seconds in stalled.items())
            or "not reported by this kernel"))
        if self.stacks:
            lines.append("every thread's stack when the loop had stood still for "
                         f"{LOOP_STILL_SECONDS * 2:g} s:\n{self.stacks}")
        return "\n".join(lines)


def _pressure_stalled_seconds() -> dict[str, float]:
    """The kernel's pressure stall totals (/proc/pressure/*, `some` line), in seconds:
    how long some task waited for a core, for memory or for I/O."""
    totals: dict[str, float] = {}
    for kind in ("cpu", "memory", "io"):
        with contextlib.suppress(OSError, IndexError):
            some = Path("/proc/pressure", kind).read_bytes().splitlines()[0]
            if (seconds := psi_total(some)) is not None:
                totals[kind] = seconds
    return totals


def agent_session() -> aiohttp.ClientSession:
    """The agents' client session, with no deadline of its own: aiohttp's default gives
    a connect 30 s and a request 300 s, and a busy box once took longer to accept B's
    connection. The test's timeout bounds it, as an agent's patience would."""
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))


async def agent_stream(session: aiohttp.ClientSession, url: str, agent: str, body: dict,
                       timeline: Timeline | None = None,
                       until: asyncio.Event | None = None) -> StreamMeter:
    """One agent's stream (`url` is the route through the tap), timed on the client's
    side and, with `timeline`, each chunk's arrival noted; with `until`, the client hangs
    up once it is set (the engine then releases the request)."""
    meter = StreamMeter(time.monotonic())
    async with session.post(url, json={**body, "stream": True},
                            headers={"X-Agent": agent}) as response:
        assert response.status == 200, await response.text()
        async for chunk in response.content.iter_any():
            meter.feed(chunk, time.monotonic())
            if timeline is not None:
                timeline.arrived(agent)
            if until is not None and until.is_set():
                break
    assert (meter.done or until is not None) and meter.unrecognised == 0
    return meter


def token_ids(count: int, rng: random.Random) -> list[int]:
    """A prompt of `count` token ids of the tiny models' vocabulary, away from the
    special ones at its ends."""
    return [rng.randrange(300, 3900) for _ in range(count)]


def solo_series(text: str) -> dict[str, float]:
    """The solo engine's samples by name, with the labels that tell them apart
    (slot, agent, tier, outcome) in brackets."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("engine") != SOLO:
                continue
            extra = [f"{k}={v}" for k, v in sorted(sample.labels.items())
                     if k in ("slot", "agent", "tier", "outcome")]
            values[sample.name + (f"[{','.join(extra)}]" if extra else "")] = sample.value
    return values
