"""Play an SGLang release's decode-related metrics through prometheus_client's multiprocess
files, and serve /metrics the way SGLang does.

What it reproduces, per release (read in the wheels; exporter/engines/stall/plans.py):
- four writer processes (tokenizer/HTTP, scheduler TP0 and TP1, detokenizer) writing
  to one PROMETHEUS_MULTIPROC_DIR, as real prometheus_client mmap files. The
  processes are simulated in one process by giving each its own file identity
  (prometheus_client's `MultiProcessValue(process_identifier)`), so timelines can run
  on a simulated clock;
- the decode pass counter (0.5.7 on) moving only for pure decode batches: a mixed
  batch (`--enable-mixed-chunk`) counts as a prefill pass;
- the tokenizer's inter-token-latency histogram counting every streamed token;
- `num_running_reqs` refreshed on a prefill batch, every 40 decode batches, and when
  idle every 30 s, or at once from 0.5.16 (`gauge_stale`);
- `http_requests_active` (0.5.10 on) counting streams until they end;
- `/metrics`: `generate_latest` over a `MultiProcessCollector`, synchronously in the
  server's event loop (SGLang mounts prometheus_client's `make_asgi_app`);
- a hang: /metrics does not answer until the hang ends.

It is a model of the release's metric behaviour, not of its scheduler's timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import values as prometheus_values
from prometheus_client.multiprocess import MultiProcessCollector

from exporter.engines.stall.plans import parse_version

MODEL = "Qwen3.8-27B-W4A16"
ITL_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0,
               10.0, 20.0, 40.0, 80.0)
#: SGLang's decode_log_interval default: gauges refresh every 40 decode batches.
DECODE_LOG_INTERVAL = 40
#: The idle refresh of the scheduler gauges before 0.5.16.
IDLE_REFRESH_SECONDS = 30.0


@dataclass
class ReleaseFeatures:
    decode_counter: bool
    http_active: bool
    gauge_stale_fix: bool
    server_info_path: str

    @classmethod
    def of(cls, version: str) -> ReleaseFeatures:
        parsed = parse_version(version) or (0, 0, 0)
        return cls(decode_counter=parsed >= (0, 5, 7), http_active=parsed >= (0, 5, 10),
                   gauge_stale_fix=parsed >= (0, 5, 16),
                   server_info_path="/server_info" if parsed >= (0, 5, 6)
                   else "/get_server_info")


class _Processes:
    """One prometheus_client file identity per simulated SGLang process."""

    def __init__(self, directory: str, pids: dict[str, int] | None = None) -> None:
        self.directory = directory
        self._classes: dict[str, type] = {}
        self._pids = pids or {"tokenizer": 101, "tp0": 102, "tp1": 103, "detokenizer": 104}

    @contextlib.contextmanager
    def acting_as(self, process: str) -> Iterator[None]:
        """Values created inside belong to `process`'s files."""
        value_class = self._classes.get(process)
        if value_class is None:
            pid = self._pids[process]
            value_class = self._classes[process] = prometheus_values.MultiProcessValue(
                lambda: pid)
        saved_class = prometheus_values.ValueClass
        saved_env = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        prometheus_values.ValueClass = value_class
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = self.directory
        try:
            yield
        finally:
            prometheus_values.ValueClass = saved_class
            if saved_env is None:
                os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
            else:
                os.environ["PROMETHEUS_MULTIPROC_DIR"] = saved_env


@dataclass
class ReleasePlayback:
    """The metric side of one SGLang release, driven on a clock."""

    version: str
    clock: Callable[[], float] = time.monotonic
    directory: str = ""
    mixed_chunk: bool = False
    tp_size: int = 2
    decode_batches_per_second: float = 30.0
    prefill_batches_per_second: float = 2.0
    #: Streaming requests that are decoding.
    streaming: int = 0
    #: Requests in the running batch that do not stream.
    non_streaming: int = 0
    #: The pid each simulated process writes its files as (tokenizer, tp0, tp1,
    #: detokenizer); by default made-up ones.
    pids: dict[str, int] | None = None
    features: ReleaseFeatures = field(init=False)

    def __post_init__(self) -> None:
        self.features = ReleaseFeatures.of(self.version)
        if not self.directory:
            self._tmp = tempfile.TemporaryDirectory(prefix="sglang-prom-")
            self.directory = self._tmp.name
        self._processes = _Processes(self.directory, self.pids)
        self._metrics: dict[str, object] = {}
        self._declare()
        self._at = self.clock()
        self._batch_credit = 0.0
        self._prefill_credit = 0.0
        self._decode_batches = 0
        self._prefill_until = -math.inf  # a long prefill under way until then
        self.hang_until = -math.inf  # /metrics does not answer until then
        self._at_step = self._at
        self._queued_tokens = 0
        self._gauge_refreshed_at = self._at
        self._gauge_value = 0.0
        self._http_active = 0
        self._publish_gauge(0.0)

    # -- scenario verbs -----------------------------------------------------------
    def start_requests(self, streaming: int = 0, non_streaming: int = 0) -> None:
        self.sync()
        self.streaming += streaming
        self.non_streaming += non_streaming
        self._set_http_active(self._http_active + streaming + non_streaming)
        self._prefill_batch()  # admitting them is a prefill batch

    def finish_all(self) -> None:
        """Every running request finishes: the tokenizer counts them, the gauge stays."""
        self.sync()
        done = self.streaming + self.non_streaming
        self.streaming = self.non_streaming = 0
        with self._processes.acting_as("tokenizer"):
            self._m("num_requests_total").labels(model_name=MODEL).inc(done)
        self._set_http_active(max(0, self._http_active - done))

    def long_prefill(self, seconds: float, new_request: bool = True) -> None:
        """A long prompt is prefilled; without mixed chunk decode waits for it."""
        self.sync()
        if new_request:
            self._set_http_active(self._http_active + 1)
        self._prefill_until = self.clock() + seconds

    def hang(self, seconds: float) -> None:
        """The HTTP/tokenizer process stops (a blocked event loop): /metrics does not
        answer and streamed tokens wait in its queue; the scheduler decodes on."""
        self.sync()
        self.hang_until = self.clock() + seconds

    # -- the model ------------------------------------------------------------------
    def sync(self) -> None:
        """Play the batches that ran since the last call."""
        now = self.clock()
        elapsed, self._at = now - self._at, now
        step = 0.05
        t = now - elapsed
        while elapsed > 1e-9:
            dt = min(step, elapsed)
            t += dt
            elapsed -= dt
            self._at_step = t
            self._advance(t, dt)

    def _advance(self, t: float, dt: float) -> None:
        running = self.streaming + self.non_streaming
        prefilling = t <= self._prefill_until
        if prefilling:
            self._prefill_credit += dt * self.prefill_batches_per_second
            while self._prefill_credit >= 1:
                self._prefill_credit -= 1
                self._prefill_batch()
                if self.mixed_chunk and running:
                    # A mixed batch: decode tokens ride along, through the prefill path.
                    self._stream_tokens(self.streaming)
            if not self.mixed_chunk:
                return
        if running and not prefilling:
            self._batch_credit += dt * self.decode_batches_per_second
            while self._batch_credit >= 1:
                self._batch_credit -= 1
                self._decode_batch(running)
        if running == 0 and not prefilling:
            idle_for = t - self._gauge_refreshed_at
            if self._gauge_value != 0 and (self.features.gauge_stale_fix
                                           or idle_for >= IDLE_REFRESH_SECONDS):
                self._publish_gauge(0.0, t)

    def _decode_batch(self, running: int) -> None:
        self._decode_batches += 1
        if self.features.decode_counter:
            for rank in self._ranks():
                with self._processes.acting_as(rank):
                    self._m("cuda_graph_passes_total").labels(
                        **self._scheduler_labels(rank), mode="decode_cuda_graph").inc()
        self._stream_tokens(self.streaming)
        if self._decode_batches % DECODE_LOG_INTERVAL == 0:
            self._publish_gauge(float(running))

    def _prefill_batch(self) -> None:
        if self.features.decode_counter:
            for rank in self._ranks():
                with self._processes.acting_as(rank):
                    self._m("cuda_graph_passes_total").labels(
                        **self._scheduler_labels(rank), mode="prefill_cuda_graph").inc()
        self._publish_gauge(float(self.streaming + self.non_streaming))

    def _stream_tokens(self, tokens: int) -> None:
        if tokens <= 0:
            return
        if self._at_step <= self.hang_until:  # the tokenizer is stuck: they queue up
            self._queued_tokens += tokens
            return
        tokens += self._queued_tokens
        self._queued_tokens = 0
        with self._processes.acting_as("tokenizer"):
            # As observe_inter_token_latency does: a bucket grows by the new tokens.
            histogram = self._m("inter_token_latency_seconds").labels(model_name=MODEL)
            for _ in range(tokens):
                histogram.observe(0.03)

    def _publish_gauge(self, value: float, at: float | None = None) -> None:
        self._gauge_value = value
        self._gauge_refreshed_at = self.clock() if at is None else at
        for rank in self._ranks():
            with self._processes.acting_as(rank):
                self._m("num_running_reqs").labels(**self._scheduler_labels(rank)).set(value)

    def _set_http_active(self, value: int) -> None:
        self._http_active = value
        if self.features.http_active:
            with self._processes.acting_as("tokenizer"):
                self._m("http_requests_active").labels(
                    endpoint="/v1/chat/completions", method="POST").set(value)

    def _ranks(self) -> list[str]:
        return [f"tp{rank}" for rank in range(self.tp_size)]

    def _scheduler_labels(self, rank: str) -> dict[str, str]:
        return {"model_name": MODEL, "engine_type": "unified", "tp_rank": rank[2:]}

    def _declare(self) -> None:
        scheduler = ["model_name", "engine_type", "tp_rank"]
        self._metrics = {
            "num_running_reqs": Gauge("sglang:num_running_reqs", "The number of running "
                                      "requests.", scheduler, registry=None,
                                      multiprocess_mode="mostrecent"),
            "inter_token_latency_seconds": Histogram(
                "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in "
                "seconds.", ["model_name"], buckets=ITL_BUCKETS, registry=None),
            "num_requests_total": Counter("sglang:num_requests", "Number of requests "
                                          "processed.", ["model_name"], registry=None),
        }
        if self.features.decode_counter:
            self._metrics["cuda_graph_passes_total"] = Counter(
                "sglang:cuda_graph_passes", "Number of forward passes by mode.",
                [*scheduler, "mode"], registry=None)
        if self.features.http_active:
            self._metrics["http_requests_active"] = Gauge(
                "sglang:http_requests_active", "Number of active HTTP requests",
                ["endpoint", "method"], registry=None, multiprocess_mode="livesum")

    def _m(self, name: str):  # noqa: ANN202 - a prometheus_client metric
        return self._metrics[name]

    # -- what the server answers ------------------------------------------------------
    def render(self) -> bytes:
        """One /metrics body, as SGLang's mounted asgi app renders it."""
        self.sync()
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self.directory)
        return generate_latest(registry)

    def server_info(self) -> dict[str, object]:
        return {"version": self.version, "served_model_name": MODEL, "tp_size": self.tp_size,
                "enable_mixed_chunk": self.mixed_chunk}

    def close(self) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            tmp.cleanup()


class ReleaseServer:
    """/metrics, /server_info (or /get_server_info) and /health on a loopback port.

    While the playback hangs, /metrics waits: on a simulated clock the wait is the
    clock moving on to the hang's end (at most `patience_seconds`, the client's
    timeout, after which the request fails as if abandoned)."""

    def __init__(self, playback: ReleasePlayback, patience_seconds: float = 2.0,
                 advance: Callable[[float], None] | None = None,
                 answer_delay_seconds: float = 0.0,
                 render_cost_seconds: float = 0.0) -> None:
        self.playback = playback
        #: On a simulated clock: how long each render holds the engine's event loop
        #: (the clock moves on by it), e.g. 0.03 s for the 0.5.23 family set.
        self.render_cost_seconds = render_cost_seconds
        #: Real time each /metrics answer waits before rendering (a loaded engine).
        self.answer_delay_seconds = answer_delay_seconds
        self.patience_seconds = patience_seconds
        self.advance = advance
        self.renders = 0
        self.render_seconds = 0.0
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get(playback.features.server_info_path, self.server_info)
        app.router.add_get("/health", self.health)
        self._runner = web.AppRunner(app, access_log=None)
        self.url = ""

    async def start(self) -> str:
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        waiting = self.playback.hang_until - self.playback.clock()
        if waiting > 0:
            if self.advance is None:
                raise web.HTTPServiceUnavailable(text="hung")
            self.advance(min(waiting, self.patience_seconds))
            if waiting > self.patience_seconds:
                raise web.HTTPServiceUnavailable(text="no answer in the client's patience")
        if self.answer_delay_seconds:
            await asyncio.sleep(self.answer_delay_seconds)
        started = time.perf_counter()
        body = self.playback.render()  # synchronously, in the event loop: as SGLang does
        if self.advance is not None and self.render_cost_seconds:
            self.advance(self.render_cost_seconds)
        self.render_seconds += time.perf_counter() - started
        self.renders += 1
        return web.Response(body=body, content_type="text/plain")

    async def server_info(self, request: web.Request) -> web.Response:
        return web.json_response(self.playback.server_info())

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="")
