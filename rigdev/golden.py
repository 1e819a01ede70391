"""The golden expositions: the exporter's whole /metrics, one per engine kind, committed
under tests/golden/ so that a change to what the exporter exports shows as a diff.

Each is rendered by a real exporter (exporter.daemon.runtime.Exporter, served by the
real web app on 127.0.0.1) reading only committed inputs:

- the cards: the two-card sysfs tree tests/fixtures/sys;
- the host: the real /proc capture tests/fixtures/proc;
- one engine `main`, served on a loopback port with the simulator's app
  (exporter/sim/engine/serving.py), whose /metrics and identity routes answer the
  committed captures (tests/fixtures/engine, tests/fixtures/llamacpp) and whose
  generation route streams a fixed script, so the stall tracker and the stream probe
  run as on a rig;
- a stream tap in front of it with one agent, and no traffic through it.

The exporter is scraped once every source it has has answered: the engine's server
info, the stall tracker's second reading and the probe's first result. What still
changes from one render to the next is masked, so that a render is the same bytes
every time (`MASKED`): the values of the families that time something on the wall
clock (the probe, a source's read time, the stall tracker's stall under way, which
grows on an engine whose counters never move), written `NaN`, and the package's
version in rig_build_info, written `VERSION`. Every name, label and the other values
stay as served.

    .venv/bin/python -m rigdev.golden --write     # render and write tests/golden/
    .venv/bin/python -m rigdev.golden --check     # render and diff against them
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import json
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from exporter.config import AgentConfig, Config, EngineConfig, GpuConfig, HostConfig
from exporter.daemon.engines.probe import ProbeReading
from exporter.daemon.engines.source import EngineReading
from exporter.daemon.runtime import Exporter
from exporter.daemon.snapshot import Snapshot
from exporter.daemon.web.app import make_app
from exporter.process.launch import free_port
from exporter.sim.engine import generation
from exporter.sim.engine.serving import Serving
from exporter.sim.engine.state import SimEngine, StreamScript

ROOT = Path(__file__).resolve().parents[1]
GOLDEN_DIR = ROOT / "tests" / "golden"
FIXTURES = ROOT / "tests" / "fixtures"
KINDS = ("sglang", "vllm", "llamacpp")
COMMAND = ".venv/bin/python -m rigdev.golden --write"
#: How long a render waits for every source's first full answer.
READY_TIMEOUT_SECONDS = 20.0

#: Families whose sample values are masked (written NaN), and why each changes.
MASKED = {
    "rig_source_scrape_duration_seconds": "how long the read took",
    "rig_engine_decode_stall_seconds": "a stall under way grows with the wall clock",
    "rig_engine_decode_stall_max_seconds": "the same stall, its maximum",
    "rig_engine_decode_stall_upper_seconds": "the same stall, its upper bound",
    "rig_engine_decode_stall_max_upper_seconds": "the same stall, its upper bound's maximum",
    "rig_engine_decode_stalled_seconds_total": "the same stall, added up",
    "rig_engine_decode_stall_resolution_seconds": "the poll interval the tracker achieved",
    "rig_engine_decode_stall_max_blind_seconds": "the tracker's longest span between readings",
    "rig_probe_ttft_seconds": "timed on the wall clock",
    "rig_probe_max_token_gap_seconds": "timed on the wall clock",
    "rig_probe_decode_tokens_per_second": "timed on the wall clock",
    "rig_probe_token_gap_seconds": "timed on the wall clock",
    "rig_probe_last_run_timestamp_seconds": "the wall clock",
}
_VERSION = re.compile(r'^(rig_build_info\{.*version=")[^"]*(")', re.M)


@dataclass(frozen=True)
class EngineBodies:
    """What the fixture engine of one kind answers, route by route (GET)."""

    metrics: Path
    #: route -> JSON text
    json_routes: dict[str, str]
    #: The route the probe streams from (exporter/daemon/engines/generation.py).
    generation_route: str


def _sglang_info() -> dict[str, str]:
    # The simulator's /server_info (its defaults: SGLang 0.5.23, TP 2, HiCache), and
    # /v1/loads, which the stall tracker asks once (0.5.8 on).
    state = SimEngine()
    return {"/server_info": json.dumps(state.server_info()),
            "/v1/loads": json.dumps({"version": state.version, "loads": state.loads()})}


def bodies(kind: str) -> EngineBodies:
    engine = FIXTURES / "engine"
    if kind == "sglang":
        return EngineBodies(engine / "sglang-0.5.23-metrics.txt", _sglang_info(), "/generate")
    if kind == "vllm":
        # vLLM has no /server_info: /version and /v1/models (info.py). The capture's
        # release and model (its model_name label).
        models = {"object": "list", "data": [{"id": "Qwen3.8-27B-W4A16",
                                              "max_model_len": 32768}]}
        return EngineBodies(engine / "vllm-0.33.0-metrics.txt",
                            {"/version": json.dumps({"version": "0.33.0"}),
                             "/v1/models": json.dumps(models)}, "/v1/completions")
    if kind == "llamacpp":
        # Three captures of one moment: a 12,288-token prefill in slot 3.
        llamacpp = FIXTURES / "llamacpp"
        return EngineBodies(llamacpp / "during_metrics.txt",
                            {"/props": (llamacpp / "during_props.txt").read_text(),
                             "/slots": (llamacpp / "during_slots.txt").read_text()},
                            "/v1/completions")
    raise ValueError(f"unknown engine kind {kind!r}; known: {', '.join(KINDS)}")


class FixtureEngine(Serving):
    """An engine that answers its captures, and streams a fixed script to the probe."""

    def __init__(self, served: EngineBodies) -> None:
        super().__init__(SimEngine(stream=StreamScript()))
        self.app.router.add_get("/metrics", _answer(served.metrics.read_text(), "text/plain"))
        for route, text in served.json_routes.items():
            self.app.router.add_get(route, _answer(text, "application/json"))
        if served.generation_route == "/generate":
            self.app.router.add_post("/generate", self.generate)
        else:
            self.app.router.add_post(served.generation_route, self.completions)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        return await generation.generate(self.hub, request, await generation.read_json(request))


def _answer(text: str, content_type: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=text, content_type=content_type)
    return handler


def config_for(kind: str, url: str) -> Config:
    engine = EngineConfig(
        name="main", url=url, kind=kind, probe_interval_seconds=0.5,
        probe_timeout_seconds=10.0, probe_max_new_tokens=4,
        tap_listen_address=f"127.0.0.1:{free_port()}",
        agents=(AgentConfig(name="coder", user="coder"),))
    return Config(engines=(engine,),
                  gpu=GpuConfig(backend="sysfs", sysfs_root=str(FIXTURES / "sys"),
                                reading_max_age_seconds=0),
                  host=HostConfig(proc_root=str(FIXTURES / "proc")))


def _ready(snapshot: Snapshot) -> bool:
    if any(result.error is not None for result in snapshot.results):
        return False
    readings = list(snapshot.readings())
    engines = [r for r in readings if isinstance(r, EngineReading)]
    probes = [r for r in readings if isinstance(r, ProbeReading)]
    # The tracker's blind span needs its second reading.
    return (bool(engines) and all(e.info is not None and e.stall is not None
                                  and e.stall.max_recent_blind_seconds is not None
                                  for e in engines)
            and bool(probes) and all(p.last is not None for p in probes))


@contextlib.asynccontextmanager
async def _served(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def render(kind: str, attempts: int = 3) -> str:
    """The masked /metrics of an exporter in front of one engine of `kind`. A render
    whose tap lost its port to another process is tried again on another."""
    for attempt in range(attempts):
        try:
            return await _render_once(kind)
        except TimeoutError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


async def _render_once(kind: str) -> str:
    engine = FixtureEngine(bodies(kind))
    await engine.start()
    try:
        exporter = Exporter(config_for(kind, engine.url))
        # The web app starts the exporter's sources and closes them (web/app.py).
        async with _served(make_app(exporter)) as url, aiohttp.ClientSession() as session:
            async with asyncio.timeout(READY_TIMEOUT_SECONDS):
                while not _ready(await exporter.snapshot()):
                    await asyncio.sleep(0.1)
            async with session.get(url + "/metrics") as response:
                response.raise_for_status()
                text = await response.text()
    finally:
        await engine.stop()
    return mask(text)


def mask(text: str) -> str:
    """`text` with what changes between renders masked (see the module docstring)."""
    lines = []
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        if not line.startswith("#") and (name in MASKED or family in MASKED):
            line = line.rsplit(" ", 1)[0] + " NaN"
        lines.append(line)
    masked = "\n".join(lines) + "\n"
    return _VERSION.sub(r"\1VERSION\2", masked)


def header(kind: str) -> str:
    return (f"# The exporter's /metrics in front of one {kind} engine (rigdev/golden.py).\n"
            f"# Regenerate: {COMMAND}\n"
            f"# Masked: the values of {', '.join(sorted(MASKED))} (NaN);"
            " rig_build_info's version (VERSION).\n")


def path_for(kind: str) -> Path:
    return GOLDEN_DIR / f"exposition-{kind}.txt"


async def render_all(kinds: Iterable[str] = KINDS) -> dict[str, str]:
    kinds = tuple(kinds)
    texts = await asyncio.gather(*(render(kind) for kind in kinds))
    return {kind: header(kind) + text for kind, text in zip(kinds, texts, strict=True)}


def diff(kind: str, rendered: str) -> str:
    """A unified diff from the committed golden to `rendered`; "" when they agree."""
    path = path_for(kind)
    committed = path.read_text() if path.exists() else ""
    return "".join(difflib.unified_diff(
        committed.splitlines(keepends=True), rendered.splitlines(keepends=True),
        fromfile=f"tests/golden/{path.name} (committed)", tofile=f"{kind} (rendered now)"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rigdev.golden", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="write tests/golden/*.txt")
    action.add_argument("--check", action="store_true", help="diff against them, exit 1 on change")
    parser.add_argument("kinds", nargs="*", metavar="KIND",
                        help=f"engine kinds (default: {' '.join(KINDS)})")
    args = parser.parse_args(argv)
    if unknown := set(args.kinds) - set(KINDS):
        parser.error(f"unknown engine kind {', '.join(sorted(unknown))}; known: {', '.join(KINDS)}")
    rendered = asyncio.run(render_all(args.kinds or KINDS))
    changed = 0
    for kind, text in rendered.items():
        if args.write:
            GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
            path_for(kind).write_text(text)
            print(f"wrote tests/golden/{path_for(kind).name} ({len(text.encode())} bytes)")
        elif change := diff(kind, text):
            changed += 1
            sys.stdout.write(change)
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
