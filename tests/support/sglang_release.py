"""Play an SGLang release's decode-related metrics through prometheus_client's multiprocess
files, and serve /metrics the way SGLang does.

What it reproduces, per release (read in the wheels; exporter/daemon/engines/stall/plans.py):
- four writer processes (tokenizer/HTTP, scheduler TP0 and TP1, detokenizer) writing
  to one PROMETHEUS_MULTIPROC_DIR, as real prometheus_client mmap files. The
  processes are simulated in one process by giving each its own file identity
  (prometheus_client's `MultiProcessValue(process_identifier)`), so timelines can run
  on a simulated clock;
- each request in the running batch: its output length, a step's tokens (several
  under speculative decoding), the step at which it finishes, whether it streams;
- a decode step as `process_batch_result_decode` runs it: the decode pass counter
  (0.5.7 on), then `stream_output` (a streaming request every step, a non-streaming
  one when `len(output_ids) % 50 == 0` or at its end; the tokenizer's inter-token
  histogram grows by the tokens sent, `num_requests_total` by the requests finished),
  then, every `decode_log_interval` steps, the decode log: `num_running_reqs =
  len(batch.reqs)`, which still counts the step's finished requests, and a freshly
  measured `gen_throughput`; only then do finished requests leave the batch;
- a prefill batch's log (`num_running_reqs` = the running batch without the new
  requests, `gen_throughput` rewritten unchanged); a mixed batch
  (`--enable-mixed-chunk`) counts as a prefill pass and gives each running request
  one token;
- the idle log every 30 s before 0.5.16 (`num_running_reqs` and `gen_throughput` 0),
  at once from 0.5.16 (`gauge_stale`);
- `http_requests_active` (0.5.8 on) on every route the server answers: until a
  stream ends from 0.5.10, until the response headers before (so a streaming request
  drops out at once);
- evidence families: `realtime_tokens_total` (0.5.7 on), `full_token_usage` (0.5.10
  on), the `/v1/loads` route (0.5.8 on), `/server_info` (0.5.6 on);
- `/metrics`: `generate_latest` over a `MultiProcessCollector`, synchronously in the
  server's event loop (SGLang mounts prometheus_client's `make_asgi_app`);
- a hang: /metrics does not answer and the tokenizer's events wait until it ends.

It is a model of the release's metric behaviour, not of its scheduler's timing. The
version it reports can differ from the release it behaves as (`reported_version`): a
source-tree build.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import values as prometheus_values
from prometheus_client.multiprocess import MultiProcessCollector

from exporter.daemon.engines.stall.evidence import read_version

MODEL = "Qwen3.8-27B-W4A16"
ITL_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0,
               10.0, 20.0, 40.0, 80.0)
#: The idle refresh of the scheduler gauges before 0.5.16.
IDLE_REFRESH_SECONDS = 30.0
#: A non-streaming request reaches the tokenizer when its length is a multiple of this.
FORCE_STREAM_INTERVAL = 50
GENERATION_ROUTE = "/v1/chat/completions"


@dataclass
class ReleaseFeatures:
    decode_counter: bool
    http_active: bool
    http_counts_streams: bool
    full_token_usage: bool
    loads_route: bool
    gauge_stale_fix: bool
    server_info_path: str

    @classmethod
    def of(cls, version: str) -> ReleaseFeatures:
        parsed = read_version(version).exact or (0, 0, 0)
        return cls(decode_counter=parsed >= (0, 5, 7), http_active=parsed >= (0, 5, 8),
                   http_counts_streams=parsed >= (0, 5, 10),
                   full_token_usage=parsed >= (0, 5, 10), loads_route=parsed >= (0, 5, 8),
                   gauge_stale_fix=parsed >= (0, 5, 16),
                   server_info_path="/server_info" if parsed >= (0, 5, 6)
                   else "/get_server_info")


class _Processes:
    """One prometheus_client file identity per simulated SGLang process."""

    def __init__(self, directory: str, pids: dict[str, int] | None = None) -> None:
        self.directory = directory
        self._classes: dict[str, type] = {}
        # The tokenizer's files carry this test's own pid: a running process, as the
        # stall tracker asks of a metrics_dir (the other pids are made up).
        self._pids = pids or {"tokenizer": os.getpid(), "tp0": 102, "tp1": 103,
                              "detokenizer": 104}

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
class PlayedRequest:
    stream: bool
    #: The decode step (the playback's step count) at which it finishes; None: at finish_all.
    finish_at: int | None = None
    #: len(output_ids): the prefill's first token.
    output: int = 1
    #: Tokens the tokenizer has had (the first, at the prefill, is TTFT, not ITL).
    sent: int = 1
    finished: bool = False


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
    decode_log_interval: int = 40
    #: What /server_info says; by default the release's own version.
    reported_version: str = ""
    #: Tokens a speculative step may accept (drawn in turn, seeded); () = no speculation.
    speculative_tokens: tuple[int, ...] = ()
    seed: int = 0
    #: The pid each simulated process writes its files as (tokenizer, tp0, tp1,
    #: detokenizer); by default made-up ones.
    pids: dict[str, int] | None = None
    features: ReleaseFeatures = field(init=False)

    def __post_init__(self) -> None:
        self.features = ReleaseFeatures.of(self.version)
        self.reported_version = self.reported_version or self.version
        if not self.directory:
            self._tmp = tempfile.TemporaryDirectory(prefix="sglang-prom-")
            self.directory = self._tmp.name
        self._processes = _Processes(self.directory, self.pids)
        self._metrics: dict[str, object] = {}
        self._declare()
        self._random = random.Random(self.seed)
        self._at = self.clock()
        self._batch_credit = 0.0
        self._prefill_credit = 0.0
        #: The scheduler's forward_ct_decode: decode steps so far.
        self.decode_steps = 0
        self.running: list[PlayedRequest] = []
        self._prefill_until = -math.inf  # a long prefill under way until then
        self.hang_until = -math.inf  # /metrics and the tokenizer stop until then
        self._at_step = self._at
        self._queued: list[tuple[int, int]] = []  # tokenizer events waiting: (tokens, done)
        self._logged_at = self._at
        self._gauge_value = 0.0
        self._gen_throughput = 0.0
        self._tokens_since_log = 0
        self._log_tic = time.perf_counter()
        self._http: dict[str, int] = {}
        self._log_stats(0.0)

    # -- scenario verbs -----------------------------------------------------------
    def start_requests(self, streaming: int = 0, non_streaming: int = 0,
                       finish_after: list[int] | None = None) -> None:
        """Admit requests in one prefill batch; `finish_after[i]`: request i (streaming
        ones first) finishes that many decode steps from now, else at finish_all()."""
        self.sync()
        kinds = [True] * streaming + [False] * non_streaming
        finish_after = finish_after or []
        new = [PlayedRequest(stream, self.decode_steps + finish_after[i]
                             if i < len(finish_after) else None)
               for i, stream in enumerate(kinds)]
        for request in new:
            self._http_enter(GENERATION_ROUTE)
            if request.stream and not self.features.http_counts_streams:
                self._http_exit(GENERATION_ROUTE)  # the middleware let go at the headers
        self._prefill_batch()  # admitting them is a prefill batch, then they decode
        self.running += new

    def finish_all(self) -> None:
        """Every running request finishes at the next decode step."""
        self.sync()
        for request in self.running:
            request.finish_at = self.decode_steps + 1

    def long_prefill(self, seconds: float, new_request: bool = True) -> None:
        """A long prompt is prefilled; without mixed chunk decode waits for it."""
        self.sync()
        if new_request:
            self._http_enter(GENERATION_ROUTE)
        self._prefill_until = self.clock() + seconds

    def hang(self, seconds: float) -> None:
        """The HTTP/tokenizer process stops (a blocked event loop): /metrics does not
        answer and outputs wait in its queue; the scheduler decodes on."""
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
        if t > self.hang_until and self._queued:
            self._tokenizer_receives(0, 0)
        prefilling = t <= self._prefill_until
        if prefilling:
            self._prefill_credit += dt * self.prefill_batches_per_second
            while self._prefill_credit >= 1:
                self._prefill_credit -= 1
                self._prefill_batch()
                if self.mixed_chunk and self.running:
                    # A mixed batch: each running request gets one token, through the
                    # prefill path (no decode pass, no decode log).
                    self._step(lambda: 1)
                    self._leave_finished()
            if not self.mixed_chunk:
                return
        if self.running and not prefilling:
            self._batch_credit += dt * self.decode_batches_per_second
            while self._batch_credit >= 1 and self.running:
                self._batch_credit -= 1
                self._decode_step()
        stale = self._gauge_value != 0 or self._gen_throughput != 0
        if not self.running and not prefilling and stale and (
                self.features.gauge_stale_fix or t - self._logged_at >= IDLE_REFRESH_SECONDS):
            self._gen_throughput = 0.0
            self._log_stats(0.0, t)

    def _decode_step(self) -> None:
        self.decode_steps += 1
        if self.features.decode_counter:
            self._scheduler_inc("cuda_graph_passes_total", mode="decode_cuda_graph")
        self._step(self._step_tokens)
        if self.decode_steps % self.decode_log_interval == 0:
            # log_decode_stats runs after stream_output: len(batch.reqs) still counts
            # the requests that finished in this step.
            now = time.perf_counter()
            self._gen_throughput = self._tokens_since_log / max(now - self._log_tic, 1e-9)
            self._log_tic = now
            if self.features.decode_counter:
                self._scheduler_inc("realtime_tokens_total", self._tokens_since_log,
                                    mode="decode")
            self._tokens_since_log = 0
            self._log_stats(float(len(self.running)))
        self._leave_finished()

    def _step(self, tokens_per_request: Callable[[], int]) -> None:
        """One step's tokens for each running request, then stream_output."""
        sent = done = 0
        for request in self.running:
            tokens = tokens_per_request()
            request.output += tokens
            self._tokens_since_log += tokens
            request.finished = request.finish_at is not None and self.decode_steps >= (
                request.finish_at)
            if (request.finished or request.stream
                    or request.output % FORCE_STREAM_INTERVAL == 0):
                sent += request.output - request.sent
                request.sent = request.output
            if request.finished:
                done += 1
                if not request.stream or self.features.http_counts_streams:
                    self._http_exit(GENERATION_ROUTE)
        self._tokenizer_receives(sent, done)

    def _step_tokens(self) -> int:
        return self._random.choice(self.speculative_tokens) if self.speculative_tokens else 1

    def _leave_finished(self) -> None:
        self.running = [r for r in self.running if not r.finished]

    def _tokenizer_receives(self, tokens: int, done: int) -> None:
        if self._at_step <= self.hang_until:  # the tokenizer is stuck: outputs queue up
            self._queued.append((tokens, done))
            return
        for queued_tokens, queued_done in self._queued:
            tokens, done = tokens + queued_tokens, done + queued_done
        self._queued.clear()
        with self._processes.acting_as("tokenizer"):
            if tokens:
                # As observe_inter_token_latency does: one bucket grows by the tokens.
                histogram = self._m("inter_token_latency_seconds").labels(model_name=MODEL)
                histogram._sum.inc(0.03 * tokens)
                histogram._buckets[ITL_BUCKETS.index(0.04)].inc(tokens)
            if done:
                self._m("num_requests_total").labels(model_name=MODEL).inc(done)

    def _prefill_batch(self) -> None:
        if self.features.decode_counter:
            self._scheduler_inc("cuda_graph_passes_total", mode="prefill_cuda_graph")
            self._scheduler_inc("realtime_tokens_total", 8192, mode="prefill_compute")
        self._log_stats(float(len(self.running)))

    def _log_stats(self, running: float, at: float | None = None) -> None:
        """metrics_collector.log_stats: every scheduler gauge written, each rank."""
        self._gauge_value = running
        self._logged_at = self.clock() if at is None else at
        for rank in self._ranks():
            with self._processes.acting_as(rank):
                labels = self._scheduler_labels(rank)
                self._m("num_running_reqs").labels(**labels).set(running)
                self._m("gen_throughput").labels(**labels).set(self._gen_throughput)
                if self.features.full_token_usage:
                    self._m("full_token_usage").labels(**labels).set(0.5)

    def _scheduler_inc(self, name: str, amount: float = 1.0, **extra: str) -> None:
        for rank in self._ranks():
            with self._processes.acting_as(rank):
                self._m(name).labels(**self._scheduler_labels(rank), **extra).inc(amount)

    def _http_enter(self, route: str) -> None:
        self._http_set(route, self._http.get(route, 0) + 1)

    def _http_exit(self, route: str) -> None:
        self._http_set(route, max(0, self._http.get(route, 0) - 1))

    def _http_set(self, route: str, value: int) -> None:
        self._http[route] = value
        if self.features.http_active:
            with self._processes.acting_as("tokenizer"):
                self._m("http_requests_active").labels(endpoint=route, method="POST"
                                                       if route == GENERATION_ROUTE
                                                       else "GET").set(value)

    def _ranks(self) -> list[str]:
        return [f"tp{rank}" for rank in range(self.tp_size)]

    def _scheduler_labels(self, rank: str) -> dict[str, str]:
        return {"model_name": MODEL, "engine_type": "unified", "tp_rank": rank[2:]}

    def _declare(self) -> None:
        scheduler = ["model_name", "engine_type", "tp_rank"]

        def gauge(name: str, doc: str, labels: list[str] = scheduler,
                  mode: str = "mostrecent") -> Gauge:
            return Gauge(f"sglang:{name}", doc, labels, registry=None,
                         multiprocess_mode=mode)

        self._metrics = {
            "num_running_reqs": gauge("num_running_reqs", "The number of running requests."),
            "gen_throughput": gauge("gen_throughput", "The generation throughput (token/s)."),
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
            self._metrics["realtime_tokens_total"] = Counter(
                "sglang:realtime_tokens", "Total number of tokens processed.",
                [*scheduler, "mode"], registry=None)
        if self.features.http_active:
            self._metrics["http_requests_active"] = gauge(
                "http_requests_active", "Number of currently active HTTP requests",
                ["endpoint", "method"], "livesum")
        if self.features.full_token_usage:
            self._metrics["full_token_usage"] = gauge("full_token_usage",
                                                      "The full token usage.")

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
        return {"version": self.reported_version, "served_model_name": MODEL,
                "tp_size": self.tp_size, "enable_mixed_chunk": self.mixed_chunk,
                "speculative_algorithm": "EAGLE" if self.speculative_tokens else None,
                "decode_log_interval": self.decode_log_interval}

    def loads(self) -> dict[str, object]:
        """GET /v1/loads: the `core` fields (0.5.8 `entrypoints/v1_loads.py`)."""
        running = len(self.running)
        return {"version": self.reported_version, "dp_rank_count": 1,
                "loads": [{"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": 0}],
                "aggregate": {"total_running_reqs": running}}

    def close(self) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            tmp.cleanup()


class ReleaseServer:
    """/metrics, /server_info (or /get_server_info), /v1/loads (0.5.8 on) and /health on
    a loopback port, each counted in http_requests_active as SGLang's middleware does.

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
        #: Requests per path, the /v1/loads probe's among them.
        self.requests: dict[str, int] = {}
        app = web.Application(middlewares=[self._count])
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get(playback.features.server_info_path, self.server_info)
        if playback.features.loads_route:
            app.router.add_get("/v1/loads", self.loads)
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

    @web.middleware
    async def _count(self, request: web.Request, handler):  # noqa: ANN001, ANN202
        self.requests[request.path] = self.requests.get(request.path, 0) + 1
        self.playback._http_enter(request.path)
        try:
            return await handler(request)
        finally:
            self.playback._http_exit(request.path)

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

    async def loads(self, request: web.Request) -> web.Response:
        return web.json_response(self.playback.loads())

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="")
