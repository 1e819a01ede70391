"""The simulated SGLang engine's state: what scenarios set and the server renders.

Two kinds of load add up in what /metrics shows:
- synthetic: `running` requests that decode at `decode_batches_per_second` (and stop
  during `pause_decode`), `queued`, `token_usage`; set directly by scenarios;
- scheduled: requests in the scheduler model (`exporter/sim/engine/scheduler.py`), from the
  server's /generate and /v1/completions or from `submit`. Their batches move the
  counters the way SGLang 0.5.23 moves them per batch kind (see `TokenizerMetrics`
  and the scheduler's `Counters`), so a prefill that starves decode shows in the
  stream and in /metrics alike.

Time comes from an injectable clock (simulated seconds), so a test can drive a 47 s
decode pause in simulated time; with the default clock, `time_scale` makes simulated
time run that many times faster than real time. Scheduler-side values are per DP
group (each DP group reports them, as each scheduler does); tokenizer-side counters
are totals. Counters left at None, and missing keys of the keyed counters, are
families or children SGLang has not created yet, so they are absent from /metrics
(docs/facts/sglang.md#multiprocess-mode).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from exporter.sim.engine.scheduler import (
    Batch,
    Listener,
    Phase,
    Policy,
    Request,
    Scheduler,
    Timings,
)
from exporter.sim.engine.scheduler_time import SchedulerTime

#: SGLang 0.5.23 default buckets (observability/metrics_collector.py, read in the wheel).
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035,
               0.040, 0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0,
               6.0, 8.0)
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
#: A non-streaming request is sent to the tokenizer every 50 tokens and at its end
#: (SGLANG_FORCE_STREAM_INTERVAL, 0.5.23 environ.py / output_streamer.py).
FORCE_STREAM_INTERVAL = 50


class Fault(StrEnum):
    """How /metrics misbehaves."""

    NONE = "none"
    REFUSE = "refuse"  # close the connection without an answer: off the network
    HTTP_500 = "http_500"
    HANG = "hang"  # never answer
    SLOW_BODY = "slow_body"  # trickle the body over `slow_body_seconds`
    TRUNCATED = "truncated"  # promise a Content-Length, send half, close
    CUT_MID_LINE = "cut_mid_line"  # a complete response whose text stops mid-line
    GARBAGE = "garbage"  # UTF-8 text that is not an exposition
    NON_UTF8 = "non_utf8"
    HUGE = "huge"  # a 50 MB body
    MALFORMED = "malformed"  # broken lines inside families the exporter reads


@dataclass
class StreamScript:
    """How a streaming /generate answers: frame timing, tokens per frame, a hang."""

    first_token_seconds: float = 0.05
    #: Gap before each frame after the first; frames past the list use `default_gap_seconds`.
    gaps_seconds: list[float] = field(default_factory=list)
    default_gap_seconds: float = 0.02
    tokens_per_frame: int = 1
    #: Stop sending (without closing) after this many frames; None: finish normally.
    hang_after_frames: int | None = None


@dataclass
class Histogram:
    """A prometheus histogram's state: per-bucket counts (not cumulative), sum, count."""

    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)
    sum: float = 0.0
    count: float = 0.0

    def __post_init__(self) -> None:
        self.counts = self.counts or [0.0] * (len(self.bounds) + 1)

    def observe(self, value: float, times: float = 1.0, sum_part: float | None = None) -> None:
        index = next((i for i, bound in enumerate(self.bounds) if value <= bound),
                     len(self.bounds))
        self.counts[index] += times
        self.count += times
        self.sum += value * times if sum_part is None else sum_part

    def cumulative(self, le: float) -> float:
        return sum(n for bound, n in zip((*self.bounds, float("inf")), self.counts,
                                         strict=True) if bound <= le)


#: get_loads_duration_seconds' buckets (0.5.23 metrics_collector.py).
GET_LOADS_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0)


class TokenizerMetrics:
    """What SGLang's tokenizer manager records for scheduled requests (0.5.23
    tokenizer_manager.py `collect_metrics`, read in the wheel): TTFT at the first
    output event; then per event with n new tokens after `interval` seconds, the ITL
    histogram's sum grows by `interval` and the bucket of interval/n by n, for every
    token a request receives (mixed batches included); prompt, generation and cached
    tokens and the request count when a request finishes."""

    def __init__(self, engine: SimEngine) -> None:
        self.engine = engine
        self._last_event: dict[str, tuple[float, int]] = {}  # rid -> (time, tokens)

    def on_token(self, request: Request, time: float) -> None:
        n = request.generated
        if not request.stream and n % FORCE_STREAM_INTERVAL and n < request.max_new_tokens:
            return  # not sent to the tokenizer yet
        if request.stream and not request.output_due:
            return  # held back by stream_interval
        last = self._last_event.get(request.rid)
        labels = "true" if request.stream else "false"
        if last is None:
            self.engine.ttft.setdefault(labels, Histogram(TTFT_BUCKETS)).observe(
                time - request.arrival)
        else:
            interval, tokens = time - last[0], n - last[1]
            self.engine.itl_histogram().observe(interval / tokens, tokens, interval)
        self._last_event[request.rid] = (time, n)

    def on_finish(self, request: Request, time: float) -> None:
        self._last_event.pop(request.rid, None)
        engine = self.engine
        if request.phase == Phase.ABORTED:
            engine.aborted_requests = (engine.aborted_requests or 0) + 1
            return
        key = "true" if request.stream else "false"
        engine.finish_request(request.prompt_tokens, request.generated, request.stream)
        engine.finished_requests[key] = engine.finished_requests.get(key, 0) + 1
        # Per tier only with HiCache on (cached_tokens_details); else one "total".
        hicache = engine.hicache_host_total_tokens is not None
        for tier, tokens in request.cached.items():
            key = tier if hicache else "total"
            engine.cached_tokens[key] = engine.cached_tokens.get(key, 0) + tokens

    def on_batch(self, batch: Batch, scheduler: Scheduler) -> None:
        self.engine.hicache_moved(batch)


@dataclass
class SimEngine:
    clock: Callable[[], float] = time.monotonic
    version: str = "0.5.23"
    model: str = "Qwen3.8-27B-W4A16"
    tp_size: int = 2
    dp_size: int = 1
    #: Older servers have only /get_server_info.
    legacy_info_only: bool = False
    hicache_storage: str | None = None  # e.g. "file": L3 families appear

    queued: int = 0
    token_usage: float = 0.0
    max_total_num_tokens: int = 219005
    #: The model's context length (/server_info `context_length`, /v1/models
    #: `max_model_len`): 196,608 on the rig
    #: (docs/facts/rig.md#hardware-and-software). A request without a token limit
    #: may generate up to it (SGLang's `init_req_max_new_tokens`).
    context_len: int = 196_608
    #: The model's vocabulary (Qwen3's 151,936 embedding rows): /tokenize gives ids
    #: below it.
    vocab_size: int = 151_936
    #: `--stream-interval`: tokens per frame after the first, unless a request says.
    stream_interval: int = 1
    #: `--enable-cache-report`: OpenAI usage carries prompt_tokens_details.cached_tokens.
    enable_cache_report: bool = False
    prefill_batches: int = 0
    prompt_tokens: dict[str, float] = field(default_factory=dict)  # by is_streaming
    generation_tokens: dict[str, float] = field(default_factory=dict)  # by is_streaming
    cached_tokens: dict[str, float] = field(default_factory=dict)  # by cache_source
    hicache_host_used_tokens: float | None = None
    hicache_host_total_tokens: float | None = None
    evicted_tokens: float | None = None
    loaded_back_tokens: float | None = None
    backed_up_tokens: float | None = None
    storage_prefetched_tokens: float | None = None
    storage_written_tokens: float | None = None
    retracted_requests: float | None = None
    #: HiCache tokens destroyed without a host backup, by reason (0.5.23
    #: hicache_dropped_tokens_total; absent until the first): L2 full under write-back.
    dropped_tokens: dict[str, float] = field(default_factory=dict)
    #: L3 prefetch tokens that did not become usable, by reason (pre-seeded at 0).
    prefetch_unfulfilled_tokens: dict[str, float] = field(default_factory=dict)
    load_back_seconds: Histogram | None = None
    backup_seconds: Histogram | None = None
    #: CPU-seconds the schedulers get per busy second (scheduler_time.py).
    scheduler_cpu_share: float = 0.97
    #: Speculative decoding over the last decode log interval; 0 with it off, as
    #: SGLang writes both (scheduler_components/metrics_reporter.py).
    spec_accept_length: float = 0.0
    spec_accept_rate: float = 0.0

    fault: Fault = Fault.NONE
    slow_body_seconds: float = 30.0
    cut_at_fraction: float = 0.6  # where CUT_MID_LINE stops the body
    #: None: /generate and /v1/completions are served by the scheduler model; a
    #: StreamScript: they follow the script instead (frame timing, a hang).
    stream: StreamScript | None = None
    policy: Policy = field(default_factory=Policy)
    timings: Timings = field(default_factory=Timings)
    #: Simulated seconds per real second, for the default clock.
    time_scale: float = 1.0
    #: Tokenizer-side families driven by scheduled requests (absent until observed).
    ttft: dict[str, Histogram] = field(default_factory=dict)  # by is_streaming
    itl: Histogram | None = None
    #: The tokenizer's time serving GET /v1/loads (0.5.23 entrypoints/v1_loads.py,
    #: metrics_collector.py `get_loads_duration_seconds`); absent until the first call.
    get_loads: Histogram | None = None
    finished_requests: dict[str, float] = field(default_factory=dict)  # by is_streaming
    aborted_requests: float | None = None

    def __post_init__(self) -> None:
        if self.time_scale <= 0:
            raise ValueError("time_scale must be positive")
        if self.clock is time.monotonic and self.time_scale != 1.0:
            self.clock = ScaledClock(self.time_scale)
        self._running = 0
        self._decode_rate = 30.0
        self._decode_batches = 0.0
        self._advanced_to = self.clock()
        self._itl_from = self._advanced_to  # the last synthetic token's time
        self._paused_until = float("-inf")
        self._listeners: list[Listener] = []
        self.scheduler_time = SchedulerTime()
        self._new_scheduler()

    def _new_scheduler(self) -> None:
        self.scheduler = Scheduler(self.policy, self.timings, start=self.clock(),
                                   kv_capacity_tokens=self.max_total_num_tokens)
        self.scheduler.add_listener(TokenizerMetrics(self))
        for listener in self._listeners:
            self.scheduler.add_listener(listener)

    def add_listener(self, listener: Listener) -> None:
        """Hear every scheduled token, finish and batch; kept across restarts."""
        self._listeners.append(listener)
        self.scheduler.add_listener(listener)

    @property
    def wedged(self) -> bool:
        """A wedged scheduler runs no batch and publishes nothing, while HTTP answers."""
        return self.scheduler.frozen

    @wedged.setter
    def wedged(self, value: bool) -> None:
        self._advance()
        self.scheduler.frozen = value

    # Scheduled requests.

    def submit(self, prompt_tokens: int, max_new_tokens: int | None,
               cached: dict[str, int] | None = None, stream: bool = True,
               key: str | None = None, stream_interval: int | None = None) -> Request:
        """A request reaches the engine now; its tokens come as the scheduler emits them.
        `max_new_tokens` None: no limit but the context length. `key`: the prompt's
        text, which finds its cached prefix (`Scheduler.submit`)."""
        self._advance()
        limit = self.context_len - prompt_tokens - 1
        wanted = limit if max_new_tokens is None else min(max_new_tokens, limit)
        return self.scheduler.submit(prompt_tokens, max(1, wanted), cached=cached,
                                     stream=stream, key=key,
                                     stream_interval=stream_interval or self.stream_interval)

    def abort(self, rid: str) -> bool:
        self._advance()
        return self.scheduler.abort(rid)

    def set_policy(self, policy: Policy) -> None:
        """A new scheduler flag set; it applies from the next batch."""
        self._advance()
        self.policy = policy
        self.scheduler.policy = policy

    def set_timings(self, timings: Timings) -> None:
        """New batch durations (a prefill stretch); they apply from the next batch."""
        self._advance()
        self.timings = timings
        self.scheduler.timings = timings

    def advance(self) -> None:
        """Bring the scheduler and the synthetic decode up to the clock's now."""
        self._advance()

    def itl_histogram(self) -> Histogram:
        if self.itl is None:
            self.itl = Histogram(ITL_BUCKETS)
        return self.itl

    def hicache_moved(self, batch: Batch) -> None:
        """HiCache traffic of a prefill batch, when HiCache is on: L2 hits are loaded
        back, L3 hits prefetched, and freshly computed KV is backed up to L2 (and
        written to L3) under the default write_through policy."""
        if self.hicache_host_total_tokens is None or not batch.chunks:
            return
        for request, tokens in batch.chunks:
            if request.prefilled - tokens == request.cached_tokens:  # its first chunk
                host = request.cached.get("host", 0)
                self.loaded_back_tokens = _plus(self.loaded_back_tokens, host)
                if host:
                    self._copy_seconds("load_back_seconds").observe(
                        host * KV_BYTES_PER_TOKEN_PER_RANK / HOST_COPY_BYTES_PER_SECOND)
                if self.hicache_storage:
                    self.storage_prefetched_tokens = _plus(
                        self.storage_prefetched_tokens, request.cached.get("storage", 0))
            self.backed_up_tokens = _plus(self.backed_up_tokens, tokens)
            self._copy_seconds("backup_seconds").observe(
                tokens * KV_BYTES_PER_TOKEN_PER_RANK / HOST_COPY_BYTES_PER_SECOND)
            if self.hicache_storage:
                self.storage_written_tokens = _plus(self.storage_written_tokens, tokens)
            used = (self.hicache_host_used_tokens or 0) + tokens
            self.hicache_host_used_tokens = min(used, self.hicache_host_total_tokens)

    def _copy_seconds(self, name: str) -> Histogram:
        histogram = getattr(self, name)
        if histogram is None:
            histogram = Histogram(COPY_SECONDS_BUCKETS)
            setattr(self, name, histogram)
        return histogram

    def hicache_bytes(self, tokens: float | None) -> float | None:
        """One rank's bytes for tokens moved: each rank copies its own KV shard."""
        return None if tokens is None else tokens * KV_BYTES_PER_TOKEN_PER_RANK

    def storage_prefetch_hits(self) -> float | None:
        """Hit tokens L3 queries returned: those prefetched and those that were not."""
        if not self.hicache_storage:
            return None
        return (self.storage_prefetched_tokens or 0.0) + sum(
            self.prefetch_unfulfilled_tokens.values())

    def prefetch_unfulfilled(self) -> dict[str, float]:
        if not self.hicache_storage:
            return {}
        return {reason: self.prefetch_unfulfilled_tokens.get(reason, 0.0)
                for reason in PREFETCH_UNFULFILLED_REASONS}

    # What /metrics shows: synthetic load plus the scheduler's.

    def num_running_reqs(self) -> int:
        self._advance()
        return self._running + self.scheduler.reported_running

    def num_queue_reqs(self) -> int:
        self._advance()
        return self.queued + self.scheduler.reported_queued

    def kv_usage(self) -> float:
        self._advance()
        used = self.scheduler.kv_used_tokens() / max(1, self.max_total_num_tokens)
        return min(1.0, self.token_usage + used)

    def prefill_passes(self) -> int | None:
        self._advance()
        return (self.prefill_batches + self.scheduler.counters.prefill_batches) or None

    def realtime_tokens(self, mode: str) -> float | None:
        """realtime_tokens_total by mode; absent until the first batch reports."""
        self._advance()
        c = self.scheduler.counters
        synthetic = int(self._decode_batches) * 1.0 if mode == "decode" else 0.0
        value = {"prefill_compute": c.prefill_compute_tokens,
                 "prefill_cache": c.prefill_cache_tokens,
                 "decode": c.decode_tokens}.get(mode, 0) + synthetic
        touched = c.prefill_batches if mode.startswith("prefill") else (
            c.decode_batches + int(self._decode_batches))
        return value if touched else None

    def retracted(self) -> float | None:
        self._advance()
        retracted = self.scheduler.counters.retracted_requests
        if self.retracted_requests is None and not retracted:
            return None
        return (self.retracted_requests or 0) + retracted

    def evicted(self) -> float | None:
        self._advance()
        evicted = self.scheduler.counters.evicted_tokens
        if self.evicted_tokens is None and not evicted:
            return None
        return (self.evicted_tokens or 0) + evicted

    def loads(self) -> list[dict[str, object]]:
        """GET /v1/loads?include=core, one entry per DP rank (0.5.23 LoadSnapshot's
        core fields). `timestamp` is when the scheduler last published."""
        self._advance()
        s = self.scheduler
        c = s.counters
        published = time.time() - (self.clock() - s.loads_published_at) / self.time_scale
        core = {
            "timestamp": published,
            "num_running_reqs": self._running + len(s.running),
            "num_waiting_reqs": self.queued + len(s.waiting),
            "num_used_tokens": s.kv_used_tokens(),
            "num_total_tokens": s.kv_used_tokens(),
            "max_total_num_tokens": self.max_total_num_tokens,
            "max_running_requests": self.policy.max_running_requests,
            "token_usage": round(self.kv_usage(), 4),
            "total_prefill_uncached_tokens": c.prefill_compute_tokens,
            "total_prefill_busy_us": int(c.prefill_busy_seconds * 1e6),
            "decode_moments": list(c.decode_moments) if c.decode_moments[0] else None,
        }
        return [{"dp_rank": rank, **core} for rank in range(self.dp_size)]

    # Decode progress integrates over time, so changes go through methods that
    # first bring it up to now.

    @property
    def running(self) -> int:
        return self._running

    @running.setter
    def running(self, value: int) -> None:
        self._advance()
        self._running = value

    @property
    def decode_batches_per_second(self) -> float:
        return self._decode_rate

    @decode_batches_per_second.setter
    def decode_batches_per_second(self, value: float) -> None:
        self._advance()
        self._decode_rate = value

    def pause_decode(self, seconds: float) -> None:
        """No decode batch for `seconds` from now (a long prefill holding the GPU)."""
        self._advance()
        self._paused_until = self.clock() + seconds
        self.scheduler.pause_decode(self._paused_until)

    def decode_batches(self) -> int | None:
        """The decode-batch counter; None until the first decode batch (family absent)."""
        self._advance()
        total = int(self._decode_batches) + self.scheduler.counters.decode_batches
        return total if total >= 1 else None

    def restart(self) -> None:
        """The engine restarts: every request is dropped and every counter is gone
        until touched again."""
        self._advance()
        self.scheduler.abort_all()
        self._new_scheduler()
        self._decode_batches = 0.0
        self._paused_until = float("-inf")
        self.prefill_batches = 0
        self.ttft.clear()
        self.itl = None
        self.finished_requests.clear()
        self.aborted_requests = None
        for keyed in (self.prompt_tokens, self.generation_tokens, self.cached_tokens):
            keyed.clear()
        for name in ("evicted_tokens", "loaded_back_tokens", "backed_up_tokens",
                     "storage_prefetched_tokens", "storage_written_tokens",
                     "retracted_requests", "load_back_seconds", "backup_seconds"):
            setattr(self, name, None)
        self.dropped_tokens.clear()
        self.prefetch_unfulfilled_tokens.clear()
        self.scheduler_time = SchedulerTime(self.scheduler_cpu_share)

    def finish_request(self, prompt_tokens: int, generated_tokens: int,
                       streaming: bool = True) -> None:
        key = "true" if streaming else "false"
        self.prompt_tokens[key] = self.prompt_tokens.get(key, 0) + prompt_tokens
        self.generation_tokens[key] = self.generation_tokens.get(key, 0) + generated_tokens

    def server_info(self) -> dict[str, object]:
        """The fields of SGLang's /server_info the exporter reads
        (docs/facts/sglang.md#versions-and-server-info)."""
        return {
            "model_path": f"/models/{self.model}",
            "served_model_name": self.model,
            "tp_size": self.tp_size,
            "dp_size": self.dp_size,
            "enable_hierarchical_cache": self.hicache_host_total_tokens is not None,
            "hicache_storage_backend": self.hicache_storage,
            "enable_mixed_chunk": self.policy.enable_mixed_chunk,
            "chunked_prefill_size": self.policy.chunked_prefill_size,
            # Not a flag of any release: the owner's build (PR #32775); 0 when off.
            "max_consecutive_prefill_batches": self.policy.max_consecutive_prefill_batches,
            "prefill_decode_interval": self.policy.prefill_decode_interval,
            "max_running_requests": self.policy.max_running_requests,
            "max_total_num_tokens": self.max_total_num_tokens,
            # The rig's --context-length (SGLang lists every server argument).
            "context_length": self.context_len,
            "schedule_policy": "fcfs",
            "decode_log_interval": 40,
            "internal_states": [{}] * self.dp_size,
            "version": self.version,
        }

    def scheduler_busy(self) -> bool:
        """The scheduler has work: requests running, prefilling or waiting."""
        s = self.scheduler
        return bool(self._running > 0 or self.queued > 0 or s.running or s.prefilling
                    or s.admitting or s.waiting)

    def _advance(self) -> None:
        now = self.clock()
        self.scheduler_time.cpu_share = self.scheduler_cpu_share
        self.scheduler_time.spend(now - self._advanced_to, self.scheduler_busy())
        self.scheduler.run_until(now)
        start, self._advanced_to = self._advanced_to, now
        if now <= start or self._running <= 0:
            self._itl_from = now
            return
        active = now - max(start, min(now, self._paused_until))
        before = int(self._decode_batches)
        self._decode_batches += self._decode_rate * max(0.0, active)
        batches = int(self._decode_batches) - before
        if batches > 0:
            # Each synthetic request gets one token per decode batch; the time since
            # the last one is spread over the batches (so a pause lands in the
            # histogram as many ordinary-looking gaps, as SGLang's does:
            # docs/facts/sglang.md#inter-token-latency-histogram).
            elapsed, self._itl_from = now - self._itl_from, now
            self.itl_histogram().observe(elapsed / batches, batches * self._running,
                                         elapsed * self._running)


#: Bytes one TP rank copies per token between GPU and host: the capture's
#: load_back_bytes_total over load_back_tokens_total (and backup's), 131,072.
KV_BYTES_PER_TOKEN_PER_RANK = 131_072
#: The capture's bytes over its copies' seconds: about 22 GB/s host to device.
HOST_COPY_BYTES_PER_SECOND = 22e9
#: The bounds of both copy histograms in the capture, merged.
COPY_SECONDS_BUCKETS = (0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009,
                        0.01, 0.02, 0.03, 0.04, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
                        30.0, 60.0)
#: 0.5.23's pre-seeded reasons of storage_prefetch_unfulfilled_tokens_total.
PREFETCH_UNFULFILLED_REASONS = (
    "below_threshold", "host_capacity", "device_capacity", "device_covered",
    "storage_transfer", "deadline", "anchor_lost", "aux_window_trim", "device_overlap",
    "cache_admission_shortfall", "dropped")


def _plus(value: float | None, amount: float) -> float | None:
    return value if not amount and value is None else (value or 0) + amount


class ScaledClock:
    """Simulated seconds that run `scale` times faster than time.monotonic, elastic:
    a stretch of more than `max_step` real seconds between two readings (the process
    was not scheduled, on a loaded machine) adds only `max_step`. The simulation then
    waits for the server rather than jumping ahead of frames it has not written yet,
    which would shorten the gaps a client measures. SimServer reads it every 20 ms;
    a caller without a server must read it at least every `max_step` seconds."""

    def __init__(self, scale: float, max_step: float = 0.05) -> None:
        self.scale = scale
        self.max_step = max_step
        self._real = time.monotonic()
        self._simulated = self._real

    def __call__(self) -> float:
        real = time.monotonic()
        self._simulated += min(real - self._real, self.max_step) * self.scale
        self._real = real
        return self._simulated
