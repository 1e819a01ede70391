"""The engine source `engine/<name>`: an engine's /metrics at scrape time, normalised.

It owns the engine's one aiohttp session (created in start()), reads
`/server_info` at start and then hourly for rig_engine_info, and runs the stall
tracker in the background. A body that is partly valid gives partial data and one
log line saying what was dropped; a body that cannot be used at all raises
SourceError, which the runner turns into rig_source_up 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from exporter.config import EngineConfig
from exporter.daemon.engines.exposition import parse
from exporter.daemon.engines.fetch import get_text
from exporter.daemon.engines.info import EngineInfo, fetch_info
from exporter.daemon.engines.mapping import TABLES
from exporter.daemon.engines.normalise import EngineMetrics, normalise, wanted_names
from exporter.daemon.engines.slots import Slot, parse_slots
from exporter.daemon.engines.stall.evidence import Evidence, ServerFlags
from exporter.daemon.engines.stall.feed_stalls import FeedFigures
from exporter.daemon.engines.stall.feed_watch import FeedWatch
from exporter.daemon.engines.stall.planner import Planner
from exporter.daemon.engines.stall.plans import SignalPlan
from exporter.daemon.engines.stall.readers import (
    CounterReader,
    MetricsBody,
    MetricsReader,
    MultiprocReader,
)
from exporter.daemon.engines.stall.slots import SlotsPlanner, SlotsReader
from exporter.daemon.engines.stall.tracker import StallPoller, StallState, TrackerStatus
from exporter.daemon.engines.stall.vllm import ENGINE_STEPS, StepPlanner, VllmMetricsReader
from exporter.daemon.snapshot import SourceError
from exporter.process.log_limits import Conditions
from exporter.schema import engine_source

log = logging.getLogger(__name__)

INFO_REFRESH_SECONDS = 3600.0
# An engine that was down when the exporter started is asked again this often.
INFO_RETRY_SECONDS = 60.0
INFO_TIMEOUT_SECONDS = 30.0
# The one /v1/loads probe at start: a route from 0.5.8 (docs/stall-tracker.md#signals-by-feature).
LOADS_PROBE_TIMEOUT_SECONDS = 5.0


@dataclass
class EngineReading:
    kind: str
    name: str
    metrics: EngineMetrics
    info: EngineInfo | None
    stall: StallState | None
    #: The stall tracker's poll interval in force; None while it does not track.
    stall_resolution_seconds: float | None = None
    #: The signals it reads; None while it does not track.
    stall_plan: SignalPlan | None = None
    #: llama.cpp's slots (/slots); None for other kinds or while /slots does not answer.
    slots: list[Slot] | None = None
    #: Whether the stall tracker sees, and why not; None where none runs (turned
    #: off, or an engine kind it does not read).
    stall_tracker: TrackerStatus | None = None
    #: What SGLang's forward-pass feed says beyond stalls, while it is the plan.
    feed: FeedFigures | None = None


class EngineSource:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.name = engine_source(config.name)
        self.table = TABLES[config.kind]
        self._wanted = wanted_names(self.table, self.table.rules)
        self.session: aiohttp.ClientSession | None = None
        self.stall: StallPoller[Any] | None = None
        self._stall_task: asyncio.Task[None] | None = None
        self._info: EngineInfo | None = None
        self._info_task: asyncio.Task[None] | None = None
        self._info_asked_at = -INFO_RETRY_SECONDS
        self.body = MetricsBody(self._get_metrics)
        # A body spoilt in a new way each scrape is one condition, told once an interval.
        self._conditions = Conditions(log, up="{subject}: fine again")
        self._stall_reader: CounterReader[object] | None = None
        self._feed: FeedWatch | None = None
        # llama.cpp's /slots, shared by the stall tracker and the scrapes.
        self.slots_body = MetricsBody(self._get_slots) if config.kind == "llamacpp" else None
        #: Why the tracker does not poll yet (or ever), while it does not.
        self._stall_waits = TrackerStatus(False, "no_plan",
                                          "waiting for the engine's server info")

    async def start(self) -> None:
        # One session per engine, shared by scrapes, the stall tracker and the probe.
        # Identity encoding: SGLang's /metrics gzips for clients that accept it, and
        # at 4 polls a second compressing ~500 kB would cost the engine's HTTP process
        # (and us) far more than the loopback bytes it saves.
        self.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5.0),
            connector=aiohttp.TCPConnector(limit=8),
            headers={"Accept-Encoding": "identity"},
        )
        self._refresh_info_if_due()
        if self.tracks_stalls:
            track = self._track_slots if self.config.kind == "llamacpp" else self._track
            self._stall_task = asyncio.create_task(track(),
                                                   name=f"stall tracker {self.config.name}")

    @property
    def tracks_stalls(self) -> bool:
        return self.config.stall_tracker and self.config.kind in ("sglang", "vllm", "llamacpp")

    def stall_status(self) -> TrackerStatus | None:
        if not self.tracks_stalls:
            return None
        return self.stall.status() if self.stall is not None else self._stall_waits

    async def close(self) -> None:
        for task in (self._stall_task, self._info_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._stall_reader is not None:
            self._stall_reader.close()
        if self._feed is not None:
            await self._feed.close()
        for body in (self.body, self.slots_body):
            if body is not None:
                body.close()
        if self.session is not None:
            await self.session.close()

    async def _track(self) -> None:
        """Wait for the engine's version and flags, ask /v1/loads once, choose the reader
        once and the signals from that evidence (again as more arrives), track."""
        while self._info is None:
            self._refresh_info_if_due()
            if self._info_task is not None and not self._info_task.done():
                # asyncio.wait: cancelling this wait leaves the info task to close().
                await asyncio.wait({self._info_task})
            if self._info is None:
                await asyncio.sleep(INFO_RETRY_SECONDS / 10)
        assert self.session is not None
        info = self._info
        if self.config.kind == "vllm":
            await self._track_vllm(info)
            return
        planner = Planner(self.config.name,
                          await engine_evidence(self.session, self.config.url, info))
        if planner.choice.final:
            self._stall_waits = TrackerStatus(False, "no_plan", planner.choice.note)
            return
        interval = self.config.stall_poll_interval_seconds
        if self.config.metrics_dir:
            reader: CounterReader = MultiprocReader(self.config.metrics_dir, interval)
        else:
            reader = MetricsReader(self.body, interval)
        self._stall_reader = reader
        self._feed = self._start_feed(info)
        self.stall = StallPoller(reader, planner, window_seconds=self.config.stall_window_seconds,
                                 feed=self._feed)
        log.info("engine %s: stall tracker on SGLang %s reads %s", self.config.name,
                 info.version, reader.how)
        await self.stall.run()

    def _start_feed(self, info: EngineInfo) -> FeedWatch | None:
        """Subscribe to the forward-pass feed where the engine publishes it: the
        configured base name, or the one /server_info gives
        (docs/stall-tracker.md#the-forward-pass-feed)."""
        name = self.config.name
        if self.config.forward_pass_metrics_ipc == "off":
            return None
        base = self.config.forward_pass_metrics_ipc or info.forward_pass_feed or ""
        if not base:
            if info.forward_pass_feed == "":
                log.warning("engine %s: the forward-pass feed is on but /server_info names no "
                            "endpoint (the scheduler bound a temporary file): give SGLang "
                            "--forward-pass-metrics-ipc-name ipc://PATH, or set "
                            "forward_pass_metrics_ipc", name)
            return None
        if (info.dp_size or 1) > 1:
            log.warning("engine %s: dp_size %s: the forward-pass feed is read for one data-"
                        "parallel rank only; the stall tracker keeps its counter plan",
                        name, info.dp_size)
            return None
        feed = FeedWatch(base, name, self.config.stall_window_seconds)
        feed.start()
        log.info("engine %s: stall tracker subscribes to the forward-pass feed %s",
                 name, feed.endpoint)
        return feed

    async def _track_slots(self) -> None:
        """llama.cpp: one plan, from /slots (docs/stall-tracker.md#llamacpp)."""
        assert self.slots_body is not None
        reader = SlotsReader(self.slots_body, self.config.stall_poll_interval_seconds)
        self._stall_reader = reader
        self.stall = StallPoller(reader, SlotsPlanner(self.config.name),
                                 window_seconds=self.config.stall_window_seconds)
        log.info("engine %s: stall tracker on llama.cpp reads %s", self.config.name, reader.how)
        await self.stall.run()

    async def _get_slots(self) -> str:
        if self.session is None:
            raise SourceError("engine source not started")
        return await get_text(self.session, self.config.url + "/slots")

    async def _read_slots(self) -> list[Slot] | None:
        if self.slots_body is None:
            return None
        subject = f"engine {self.config.name} /slots"
        try:
            slots = parse_slots((await self.slots_body.recent()).text)
        except SourceError as exc:
            # Started without --slots: the per-slot series and the stall tracker are
            # absent, and this says why (docs/facts/llamacpp.md#slots).
            self._conditions.failed(subject, f"{exc}: per-slot series absent")
            return None
        self._conditions.ok(subject)
        return slots

    async def _track_vllm(self, info: EngineInfo) -> None:
        """vLLM: one plan, read from /metrics (docs/stall-tracker.md#vllm)."""
        reader = VllmMetricsReader(self.body, self.config.stall_poll_interval_seconds)
        self._stall_reader = reader
        self.stall = StallPoller(reader, StepPlanner(self.config.name),
                                 window_seconds=self.config.stall_window_seconds)
        log.info("engine %s: stall tracker on vLLM %s reads %s (plan %s)", self.config.name,
                 info.version, reader.how, ENGINE_STEPS.name)
        await self.stall.run()

    async def _get_metrics(self) -> str:
        if self.session is None:
            raise SourceError("engine source not started")
        return await get_text(self.session, self.config.url + "/metrics")

    async def read_metrics_text(self) -> str:
        """A body at most a second old: the tracker's, or a fresh one
        (docs/stall-tracker.md#where-the-counters-come-from)."""
        return (await self.body.recent()).text

    async def read(self) -> EngineReading:
        self._refresh_info_if_due()
        text = await self.read_metrics_text()
        problems: list[str] = []
        text, newline, tail = text.rpartition("\n")
        if tail:
            if not newline:
                text = tail  # one line, no newline at all: parse what there is
            else:
                problems.append(f"body does not end with a newline (cut short?): "
                                f"last line dropped: {tail[:80]!r}")
        exposition = parse(text, self._wanted)
        if exposition.type_lines == 0:
            raise SourceError(f"GET {self.config.url}/metrics: no '# TYPE' line, not a "
                              f"Prometheus exposition: {text[:80]!r}")
        metrics = normalise(exposition, self.table, self._tp_size())
        if exposition.malformed:
            family, line = exposition.malformed[0]
            problems.append(f"{len(exposition.malformed)} malformed line(s) skipped, "
                            f"first in {family}: {line[:120]!r}")
        metrics.problems[:0] = problems
        self._log_problems(tuple(metrics.problems))
        stall = self.stall.state() if self.stall is not None else None
        tracking = self.stall if stall is not None else None
        feed = (self._feed.figures(time.monotonic()) if tracking is not None
                and self._feed is not None and tracking.feed_live() else None)
        return EngineReading(
            self.config.kind, self.config.name, metrics, self._info, stall,
            tracking.resolution_seconds() if tracking is not None else None,
            tracking.plan if tracking is not None else None,
            await self._read_slots(), self.stall_status(), feed)

    def _tp_size(self) -> int:
        try:
            return max(1, int(self._info.tp_size)) if self._info is not None else 1
        except ValueError:
            return 1

    def _log_problems(self, problems: tuple[str, ...]) -> None:
        subject = f"engine {self.config.name} body"
        if problems:
            self._conditions.failed(subject, "partial data: " + "; ".join(problems))
        else:
            self._conditions.ok(subject)

    def _refresh_info_if_due(self) -> None:
        if self._info_task is not None and not self._info_task.done():
            return
        age = time.monotonic() - self._info_asked_at
        if age < (INFO_RETRY_SECONDS if self._info is None else INFO_REFRESH_SECONDS):
            return
        self._info_asked_at = time.monotonic()
        self._info_task = asyncio.create_task(self._refresh_info())

    async def _refresh_info(self) -> None:
        assert self.session is not None
        try:
            async with asyncio.timeout(INFO_TIMEOUT_SECONDS):  # docs/stall-tracker.md#stopping
                self._info = await fetch_info(self.session, self.config.url, self.config.kind)
        except (SourceError, TimeoutError) as exc:
            error = str(exc) or f"no answer within {INFO_TIMEOUT_SECONDS:g} s"
            self._conditions.failed(f"engine {self.config.name} server info", error)
        else:
            self._conditions.ok(f"engine {self.config.name} server info")


def server_flags(info: EngineInfo) -> ServerFlags:
    """The flags of rig_engine_info that change what the stall tracker's signals see."""
    interval = info.decode_log_interval
    return ServerFlags(mixed_chunk=info.mixed_chunk == "true", speculative=info.speculative,
                       decode_log_interval=int(interval) if interval.isdigit() else None)


async def engine_evidence(session: aiohttp.ClientSession, base_url: str,
                          info: EngineInfo) -> Evidence:
    """What the stall tracker's choice starts from: the version and flags of
    /server_info, and whether GET /v1/loads answers (0.5.8 on; one request)."""
    url = base_url + "/v1/loads?include=core"
    loads: bool | None = True
    try:
        async with asyncio.timeout(LOADS_PROBE_TIMEOUT_SECONDS):
            await get_text(session, url)
    except SourceError as exc:
        loads = False if "HTTP 404" in str(exc) else None
    except TimeoutError:
        loads = None
    return Evidence(info.version, server_flags(info), loads_route=loads)
