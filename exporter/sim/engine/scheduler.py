"""A model of SGLang's scheduler in simulated time: one running batch, chunked prefill,
and the policies that decide whether a long prefill starves decode.

API (for scenarios, `rigctl bench`, the e2e tests):

    from exporter.sim.engine.scheduler import Policy, Scheduler
    sched = Scheduler(Policy.named("n=1"), start=0.0)  # Policy(max_consecutive_prefill_batches=1)
    a = sched.submit(65536, max_new_tokens=4000, cached={"device": 65535}, at=0.0)
    b = sched.submit(65536, max_new_tokens=1, at=5.0)  # a fresh 64K prompt
    sched.run_until(60.0)                               # every batch that ends by t=60
    a.longest_gap(), b.ttft, a.token_times              # simulated seconds
    sched.counters.decode_batches                       # what /metrics reports
    sched.next_event_time()                             # when something next happens

Through the simulated engine and its server (the usual way):

    state = SimEngine(policy=Policy.named("n=4"), time_scale=20)  # or clock=fake_clock
    request = state.submit(65536, 1)        # no client; or POST /generate, /v1/completions
    state.set_policy(...), state.pause_decode(s), state.wedged = True, state.restart()
    state.add_listener(listener)            # on_token / on_finish / on_batch, kept on restart

Time is simulated: the caller says how far to run, so a 50 s prefill costs no real
time; `SimEngine` runs the scheduler up to its clock whenever it is read. Listeners
hear every token as it is emitted (`on_token(request, time)`), every finished or
aborted request (`on_finish`) and every batch (`on_batch`), in time order. Policies
by name: `default`, `mixed-chunk`, `n=<N>`, `interval=<k>`. Finished requests stay
in `Scheduler.requests` (the newest `KEEP_FINISHED`).

The mechanics follow SGLang 0.5.23 (read in the wheel, `managers/scheduler.py`):
- prefill first: a waiting prompt runs before the next decode batch, all its chunks
  back to back (`get_next_batch_to_run`);
- a prefill batch carries one chunk of `chunked_prefill_size` tokens per prefilling
  request; the batch that prefills a prompt's last chunk samples its first token;
- `--enable-mixed-chunk`: every prefill batch also carries one decode row per running
  request (`mix_with_running`), its chunk budget cut by the running batch size; the
  batch goes through the prefill result path, so it counts as a prefill pass;
- `max_consecutive_prefill_batches` N (PR #32775, unmerged; the owner ran it): after
  N pure prefill batches, one decode batch runs; mixed batches do not count;
- `prefill_decode_interval` k (PR #35017): k decode rounds after each prefill batch.

Timings (`Timings`) are fitted to the owner's measurements (docs/facts/rig.md); each
field says which. The fit reproduces the starvation table within 10 % (see
tests/sim/test_scheduler.py and the report of bench/bench_sim_calibration.py).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

TIERS = ("device", "host", "storage")  # SGLang's cache_source values: L1, L2, L3
#: Finished or aborted requests kept in `Scheduler.requests` for inspection.
KEEP_FINISHED = 256
#: The text of one generated token, as the simulated server writes it.
OUTPUT_TEXT = " tok"


class BatchKind(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"
    MIXED = "mixed"


@dataclass(frozen=True)
class Policy:
    """The scheduler flags that decide how prefill and decode interleave."""

    #: 4096: with it the owner's N table is one chunk per prefill batch (N=1: 4.04 s,
    #: about the last 4K chunk of a 64K prompt) and N=16 is the whole prompt (47.05 s).
    chunked_prefill_size: int = 4096
    max_consecutive_prefill_batches: int = 0  # 0: off (SGLang's default)
    enable_mixed_chunk: bool = False
    prefill_decode_interval: int = 0  # 0: off
    max_running_requests: int = 4  # up to 4 running (docs/facts/rig.md)

    @classmethod
    def named(cls, name: str, **changes: int | bool) -> Policy:
        """`default`, `mixed-chunk`, `n=<N>` (consecutive prefill batches) or
        `interval=<k>` (decode rounds after each prefill batch)."""
        key, _, number = name.strip().lower().partition("=")
        if key == "default" and not number:
            return cls(**changes)  # type: ignore[arg-type]
        if key in ("mixed-chunk", "mixed") and not number:
            return cls(enable_mixed_chunk=True, **changes)  # type: ignore[arg-type]
        if key in ("n", "interval") and number.isdigit():
            flag = ("max_consecutive_prefill_batches" if key == "n"
                    else "prefill_decode_interval")
            return cls(**{flag: int(number), **changes})  # type: ignore[arg-type]
        raise ValueError(f"unknown policy {name!r}: use default, mixed-chunk, n=<N> "
                         "or interval=<k>")

    @property
    def name(self) -> str:
        if self.enable_mixed_chunk:
            return "mixed-chunk"
        if self.max_consecutive_prefill_batches:
            return f"n={self.max_consecutive_prefill_batches}"
        if self.prefill_decode_interval:
            return f"interval={self.prefill_decode_interval}"
        return "default"


@dataclass(frozen=True)
class Timings:
    """Batch durations, fitted to docs/facts/rig.md (SGLang TP2 on 2x RX 7900 XTX)."""

    # Prefill of tokens [o, o+n) costs a*n + b*((o+n)^2 - o^2): a linear part and the
    # attention over the context so far. Fitted to the cold TTFTs 20.00 s (32K),
    # 48.26 s (64K), 121.49 s (120K), 243.81 s (192K) and the starvation table.
    prefill_seconds_per_token: float = 4.7e-4
    prefill_seconds_per_token_squared: float = 3.6e-9
    prefill_batch_overhead_seconds: float = 0.02
    #: A batch with k prefilling requests costs its longest chunk times
    #: 1 + penalty*(k-1): 2/3/4 concurrent 64K prefills finished in 48.2/48.3/48.5 s.
    prefill_concurrency_penalty: float = 0.002
    #: Before a prompt reaches the scheduler (tokenizer, transfer, KV allocation):
    #: B's TTFT (about 49.4 s) exceeds A's longest gap (47.23 s) by about 2 s, and a
    #: 64K cold TTFT (48.26 s) exceeds the prefill; 2.3 s per 64K uncached tokens.
    admission_seconds_per_uncached_token: float = 2.3 / 65536
    #: Cache hits still cost their load: L1 hit TTFT 0.431 s (64K), 0.711 s (120K),
    #: 1.055 s (192K); L2 restores cost a further 115 / 185 / 351 ms.
    hit_base_seconds: float = 0.12
    device_hit_seconds_per_token: float = 4.76e-6
    host_hit_seconds_per_token: float = 4.76e-6 + 1.8e-6
    storage_hit_seconds_per_token: float = 4.76e-6 + 6.0e-6  # NVMe Gen3: a guess, no figure
    # A decode step: base + per extra request + per token of context in the batch.
    # 1x32K: 99.0 tok/s, 1x64K: 88.8 tok/s, 2x104K: 105.9 tok/s, 3x64K: 143.0 tok/s.
    decode_step_base_seconds: float = 8.94e-3
    decode_step_per_extra_request_seconds: float = 2.47e-3
    decode_step_seconds_per_context_token: float = 3.54e-8
    #: Prefill and admission last this many times longer: a compressed rig stretches
    #: them by its time scale over its stall scale, so that a prefill that starves
    #: decode compresses like any other stall (`SimRig.prefills_stall`).
    prefill_stretch: float = 1.0

    def prefill_chunk_seconds(self, offset: int, tokens: int) -> float:
        end = offset + tokens
        return self.prefill_stretch * (
            self.prefill_seconds_per_token * tokens
            + self.prefill_seconds_per_token_squared * (end * end - offset * offset))

    def admission_seconds(self, uncached_tokens: int) -> float:
        return (self.prefill_stretch * uncached_tokens
                * self.admission_seconds_per_uncached_token)

    def decode_step_seconds(self, batch_size: int, context_tokens: int) -> float:
        return (self.decode_step_base_seconds
                + self.decode_step_per_extra_request_seconds * max(0, batch_size - 1)
                + self.decode_step_seconds_per_context_token * context_tokens)

    def hit_seconds(self, cached: dict[str, int]) -> float:
        if not any(cached.values()):
            return 0.0
        return (self.hit_base_seconds
                + self.device_hit_seconds_per_token * cached.get("device", 0)
                + self.host_hit_seconds_per_token * cached.get("host", 0)
                + self.storage_hit_seconds_per_token * cached.get("storage", 0))


def validate_request(prompt_tokens: int, max_new_tokens: int,
                     cached: dict[str, int] | None) -> dict[str, int]:
    """The cache hits by tier of a request the scheduler accepts; ValueError if not."""
    if prompt_tokens < 1 or max_new_tokens < 1:
        raise ValueError("prompt_tokens and max_new_tokens must be at least 1")
    hits = dict(cached or {})
    if set(hits) - set(TIERS):
        raise ValueError(f"cache tiers are {', '.join(TIERS)}")
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in hits.values()):
        raise ValueError("cached tokens are whole numbers >= 0")
    if sum(hits.values()) >= prompt_tokens:
        raise ValueError("at least one prompt token must be uncached")
    return {tier: n for tier, n in hits.items() if n}


class Phase(StrEnum):
    ADMITTING = "admitting"  # tokenizer side, not yet in the scheduler's queue
    WAITING = "waiting"
    PREFILLING = "prefilling"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass(eq=False)
class Request:
    rid: str
    prompt_tokens: int
    max_new_tokens: int
    arrival: float
    cached: dict[str, int] = field(default_factory=dict)  # tier -> tokens hit
    stream: bool = True
    #: The prompt's text, for the prefix cache (None: a prompt of token ids).
    key: str | None = None
    #: SGLang's stream_interval: after the first token, a streamed request is sent
    #: its tokens once this many are unsent, and at its end.
    stream_interval: int = 1
    sent_tokens: int = 0
    #: Whether the token just emitted goes out to the client now (`stream_interval`).
    output_due: bool = False
    phase: Phase = Phase.ADMITTING
    admitted_at: float = 0.0
    prefilled: int = 0  # of `prefill_target`, counting the cached prefix
    prefill_target: int = 0
    generated: int = 0
    retractions: int = 0
    token_times: list[float] = field(default_factory=list)
    finished_at: float | None = None

    @property
    def cached_tokens(self) -> int:
        return sum(self.cached.values())

    @property
    def kv_tokens(self) -> int:
        """KV slots the request holds in the device pool."""
        if self.phase == Phase.PREFILLING:
            return self.prefilled
        return self.prompt_tokens + self.generated if self.phase == Phase.RUNNING else 0

    @property
    def done(self) -> bool:
        return self.phase in (Phase.FINISHED, Phase.ABORTED)

    @property
    def ttft(self) -> float | None:
        return self.token_times[0] - self.arrival if self.token_times else None

    def gaps(self) -> list[float]:
        return [b - a for a, b in itertools.pairwise(self.token_times)]

    def longest_gap(self, since: float = float("-inf")) -> float:
        """The longest wait between two tokens, counting only gaps that end after `since`."""
        return max((b - a for a, b in itertools.pairwise(self.token_times) if b > since),
                   default=0.0)


@dataclass
class CachedPrompt:
    """A finished prompt and its output, left in the device pool until evicted."""

    key: str | None  # its text; None: it can be evicted, never matched
    tokens: int


def shared_prefix(a: str, b: str) -> int:
    """Characters two prompts share from their start (binary search on slices: the
    comparisons run in C, a 196K-token prompt is some 800,000 characters)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


#: A prompt given as text counts one token per this many characters (no tokenizer).
CHARS_PER_TOKEN = 4
#: Shorter shared prefixes are no hit here (the stream probe's tag, a chat preamble):
#: the model's hit time has a fixed part fitted to long sessions (`hit_base_seconds`).
MIN_HIT_TOKENS = 64


@dataclass
class Batch:
    kind: BatchKind
    start: float
    end: float
    chunks: list[tuple[Request, int]]  # (request, tokens of its prompt in this batch)
    decoding: list[Request]  # requests that get one token at the end


@dataclass
class Counters:
    """Scheduler-side counters, as the release code moves them per batch kind
    (0.5.23 `batch_result_processor.py`, `metrics_reporter.py`)."""

    decode_batches: int = 0  # cuda_graph_passes_total{mode="decode_*"}: decode path only
    prefill_batches: int = 0  # {mode="prefill_*"}: report_prefill_stats (prefill and mixed)
    mixed_batches: int = 0  # included in prefill_batches
    prefill_compute_tokens: int = 0  # realtime_tokens_total{mode="prefill_compute"}
    prefill_cache_tokens: int = 0  # {mode="prefill_cache"}
    decode_tokens: int = 0  # {mode="decode"}: decode batches only, not mixed rows
    prefill_busy_seconds: float = 0.0  # /v1/loads total_prefill_busy_us
    #: /v1/loads decode_moments: steps, sum bs, sum step us, sum bs^2, sum bs*us, tokens
    decode_moments: list[float] = field(default_factory=lambda: [0.0] * 6)
    retracted_requests: int = 0
    evicted_tokens: int = 0


class Listener(Protocol):
    def on_token(self, request: Request, time: float) -> None: ...
    def on_finish(self, request: Request, time: float) -> None: ...
    def on_batch(self, batch: Batch, scheduler: Scheduler) -> None: ...


class Scheduler:
    def __init__(self, policy: Policy | None = None, timings: Timings | None = None,
                 start: float = 0.0, kv_capacity_tokens: int = 219005) -> None:
        self.policy = policy or Policy()
        self.timings = timings or Timings()
        #: Device KV pool (219,005 tokens at HiCache size 16, docs/facts/rig.md#kv-capacity).
        self.kv_capacity_tokens = kv_capacity_tokens
        self.now = start
        self.counters = Counters()
        self.requests: dict[str, Request] = {}
        self.admitting: list[Request] = []
        self.waiting: deque[Request] = deque()
        self.prefilling: list[Request] = []
        self.running: list[Request] = []
        #: Finished prompts left in the radix cache (evictable), oldest first.
        self.evictable: deque[CachedPrompt] = deque()
        self.batch: Batch | None = None
        self.decode_paused_until = float("-inf")
        #: Wedged: no batch ends or starts and nothing is published; time passes.
        self.frozen = False
        self._listeners: list[Listener] = []
        self._ids = itertools.count(1)
        self._done: deque[str] = deque()  # finished rids, oldest first, to forget
        self._consecutive_prefills = 0
        self._decode_owed = 0
        #: Gauges as the scheduler last reported them: on each prefill batch, every
        #: `decode_log_interval` (40) decode batches, and when idle (0.5.16+).
        self.reported_running = 0
        self.reported_queued = 0
        self.decode_log_interval = 40
        #: When /v1/loads last published: each prefill batch, every 15 decode steps,
        #: every 50 ms idle (0.5.23 load_snapshot.py,
        #: docs/facts/sglang.md#v1loads).
        self.loads_published_at = start

    # -- requests ---------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def submit(self, prompt_tokens: int, max_new_tokens: int, at: float | None = None,
               cached: dict[str, int] | None = None, stream: bool = True,
               rid: str | None = None, key: str | None = None,
               stream_interval: int = 1) -> Request:
        """A request reaches the engine at `at` (default: now). `cached` says how many
        of its prompt tokens hit each tier; without it, a prompt with a `key` (its
        text) hits the device pool for the prefix it shares with a finished prompt
        still cached there. At least one token is always computed."""
        if cached is None and key is not None:
            cached = self._match(key, prompt_tokens)
        hits = validate_request(prompt_tokens, max_new_tokens, cached)
        arrival = self.now if at is None else max(at, self.now)
        request = Request(rid or f"sim-{next(self._ids)}", prompt_tokens, max_new_tokens,
                          arrival, hits, stream, key, max(1, stream_interval))
        uncached = prompt_tokens - request.cached_tokens
        request.admitted_at = arrival + self.timings.admission_seconds(uncached)
        request.prefilled = request.cached_tokens
        request.prefill_target = prompt_tokens
        self.requests[request.rid] = request
        self.admitting.append(request)
        self.admitting.sort(key=lambda r: r.admitted_at)
        return request

    def remember(self, key: str, tokens: int) -> None:
        """A prompt earlier turns left in the device pool (a scenario's history)."""
        self._evict_for(tokens)
        self.evictable.append(CachedPrompt(key, tokens))

    def cached_prompt_tokens(self) -> int:
        return sum(entry.tokens for entry in self.evictable)

    def _match(self, key: str, prompt_tokens: int) -> dict[str, int]:
        """The longest cached prefix of `key`, taken out of the evictable set (the
        request now holds it); SGLang matches at page granularity, this per prompt."""
        best, shared = None, 0
        for entry in self.evictable:
            if entry.key is not None:
                length = shared_prefix(entry.key, key) // CHARS_PER_TOKEN
                if length >= MIN_HIT_TOKENS and length > shared:
                    best, shared = entry, length
        if best is None:
            return {}
        self.evictable.remove(best)
        return {"device": min(shared, prompt_tokens - 1)}

    def abort(self, rid: str) -> bool:
        """The client went away: the request leaves the scheduler (its KV is freed)."""
        request = self.requests.get(rid)
        if request is None or request.done:
            return False
        for queue in (self.admitting, self.prefilling, self.running):
            if request in queue:
                queue.remove(request)
        if request in self.waiting:
            self.waiting.remove(request)
        request.phase = Phase.ABORTED
        request.finished_at = self.now
        self._finished(request)
        return True

    def abort_all(self) -> None:
        for rid in [r.rid for r in self.requests.values() if not r.done]:
            self.abort(rid)

    def pause_decode(self, until: float) -> None:
        """No decode (or mixed) batch starts before `until`: the GPU is held elsewhere."""
        self.decode_paused_until = max(self.decode_paused_until, until)

    @property
    def active(self) -> list[Request]:
        return [r for r in self.requests.values() if not r.done]

    def kv_used_tokens(self) -> int:
        return sum(r.kv_tokens for r in itertools.chain(self.prefilling, self.running))

    # -- time -------------------------------------------------------------------

    def next_event_time(self) -> float | None:
        """When the state next changes by itself: the batch in flight ends, a prompt
        reaches the queue, or a decode pause ends."""
        if self.frozen:
            return None
        if self.batch is not None:
            return self.batch.end
        times = [r.admitted_at for r in self.admitting]
        if self.running and self.decode_paused_until > self.now:
            times.append(self.decode_paused_until)
        return min(times, default=None)

    def run_until(self, time: float) -> None:
        """Process every batch that ends by `time`; start the next ones."""
        if self.frozen:
            if self.batch is not None and time > self.now:
                self.batch.end += time - self.now  # the batch in flight ends late
            self.now = max(self.now, time)
            return
        while True:
            if self.batch is None:
                self._start_batch()
            if self.batch is not None and self.batch.end <= time:
                self.now = self.batch.end
                self._finish_batch()
                continue
            if self.batch is None:
                wake = self.next_event_time()
                if wake is not None and wake <= time and wake > self.now:
                    self.now = wake
                    continue
                if time > self.now:
                    self.now = time
                    self._report_gauges()  # the idle path refreshes the gauges
                    self.loads_published_at = time
                return
            self.now = max(self.now, time)
            return

    def run_until_true(self, condition: Callable[[], bool], limit: float = 1e6) -> None:
        """Run event by event until `condition()` holds; an error if it never can."""
        end = self.now + limit
        while not condition():
            wake = self.next_event_time()
            if wake is None or wake > end:
                raise RuntimeError("the scheduler went idle before the condition held")
            self.run_until(wake)

    # -- batches ----------------------------------------------------------------

    def _admit(self) -> None:
        while self.admitting and self.admitting[0].admitted_at <= self.now:
            request = self.admitting.pop(0)
            request.phase = Phase.WAITING
            self.waiting.append(request)
        # FCFS into the prefill set while the running batch and the KV pool have room.
        while self.waiting and len(self.prefilling) + len(self.running) < (
                self.policy.max_running_requests):
            head = self.waiting[0]
            if self.kv_used_tokens() + head.prefill_target > self.kv_capacity_tokens:
                break
            self.waiting.popleft()
            head.phase = Phase.PREFILLING
            self._evict_for(head.prefill_target - head.prefilled)
            self.prefilling.append(head)

    def _evict_for(self, tokens: int) -> None:
        """Make room in the device pool by evicting finished prompts, oldest first."""
        free = (self.kv_capacity_tokens - self.kv_used_tokens()
                - self.cached_prompt_tokens())
        while free < tokens and self.evictable:
            evicted = self.evictable.popleft().tokens
            self.counters.evicted_tokens += evicted
            free += evicted

    def _start_batch(self) -> None:
        self._admit()
        policy = self.policy
        decodable = bool(self.running) and self.now >= self.decode_paused_until
        limit = policy.max_consecutive_prefill_batches
        decode_due = decodable and (
            self._decode_owed > 0 or (limit > 0 and self._consecutive_prefills >= limit))
        if self.prefilling and not decode_due:
            mixed = policy.enable_mixed_chunk and decodable
            self._start_prefill(mixed)
        elif decodable:
            self._start_decode()

    def _start_prefill(self, mixed: bool) -> None:
        budget = self.policy.chunked_prefill_size
        decoding = list(self.running) if mixed else []
        if mixed:
            budget = max(1, budget - len(decoding))  # SGLang: the chunk budget minus running bs
        t = self.timings
        chunks: list[tuple[Request, int]] = []
        costs: list[float] = []
        hits = 0.0
        for request in self.prefilling:
            tokens = min(budget, request.prefill_target - request.prefilled)
            chunks.append((request, tokens))
            costs.append(t.prefill_chunk_seconds(request.prefilled, tokens))
            if request.prefilled == request.cached_tokens and not request.retractions:
                hits += t.hit_seconds(request.cached)
        seconds = (t.prefill_batch_overhead_seconds + hits
                   + max(costs) * (1 + t.prefill_concurrency_penalty * (len(chunks) - 1)))
        if decoding:
            seconds += t.decode_step_seconds(len(decoding), self._context(decoding))
        kind = BatchKind.MIXED if decoding else BatchKind.PREFILL
        self.batch = Batch(kind, self.now, self.now + seconds, chunks, decoding)

    def _start_decode(self) -> None:
        self._retract_if_full()
        seconds = self.timings.decode_step_seconds(len(self.running),
                                                   self._context(self.running))
        self.batch = Batch(BatchKind.DECODE, self.now, self.now + seconds, [],
                           list(self.running))

    def _retract_if_full(self) -> None:
        """Out of KV for the next token: the newest running request goes back to the
        queue and will recompute its prompt and output (SGLang's retraction)."""
        while (len(self.running) > 1
               and self.kv_used_tokens() + len(self.running) > self.kv_capacity_tokens):
            victim = self.running.pop()
            victim.phase = Phase.WAITING
            victim.retractions += 1
            victim.prefill_target = victim.prompt_tokens + victim.generated
            victim.prefilled = 0
            self.waiting.appendleft(victim)
            self.counters.retracted_requests += 1

    @staticmethod
    def _context(requests: Iterable[Request]) -> int:
        return sum(r.prompt_tokens + r.generated for r in requests)

    def _finish_batch(self) -> None:
        batch, self.batch = self.batch, None
        assert batch is not None
        c = self.counters
        if batch.kind == BatchKind.DECODE:
            c.decode_batches += 1
            live = [r for r in batch.decoding if r.phase == Phase.RUNNING]
            c.decode_tokens += len(live)
            step_us = (batch.end - batch.start) * 1e6
            for i, value in enumerate((1, len(live), step_us, len(live) ** 2,
                                       len(live) * step_us, len(live))):
                c.decode_moments[i] += value
            self._consecutive_prefills = 0
            self._decode_owed = max(0, self._decode_owed - 1)
            if c.decode_batches % self.decode_log_interval == 0:
                self._report_gauges()
            if c.decode_batches % 15 == 0:
                self.loads_published_at = batch.end
            for request in live:
                self._emit(request, batch.end)
        else:
            c.prefill_batches += 1
            c.mixed_batches += batch.kind == BatchKind.MIXED
            c.prefill_busy_seconds += batch.end - batch.start
            if batch.kind == BatchKind.PREFILL:
                self._consecutive_prefills += 1
            self._decode_owed = self.policy.prefill_decode_interval
            for request in [r for r in batch.decoding if r.phase == Phase.RUNNING]:
                self._emit(request, batch.end)
            for request, tokens in batch.chunks:
                if request.phase != Phase.PREFILLING:
                    continue  # aborted while its chunk ran
                if request.prefilled == request.cached_tokens and not request.retractions:
                    c.prefill_cache_tokens += request.cached_tokens
                c.prefill_compute_tokens += tokens
                request.prefilled += tokens
                if request.prefilled >= request.prefill_target:
                    self.prefilling.remove(request)
                    request.phase = Phase.RUNNING
                    self.running.append(request)
                    if not request.retractions:
                        self._emit(request, batch.end)  # the prefill samples token one
            self._report_gauges()
            self.loads_published_at = batch.end
        for listener in self._listeners:
            listener.on_batch(batch, self)

    def _emit(self, request: Request, time: float) -> None:
        request.generated += 1
        request.token_times.append(time)
        last = request.generated >= request.max_new_tokens
        # SGLang's output_streamer: the first token at once, then whenever
        # stream_interval tokens are unsent, and the last.
        request.output_due = (request.stream_interval == 1 or last
                              or request.sent_tokens == 0
                              or request.generated - request.sent_tokens
                              >= request.stream_interval)
        if request.output_due:
            request.sent_tokens = request.generated
        for listener in self._listeners:
            listener.on_token(request, time)
        if last:
            self.running.remove(request)
            request.phase = Phase.FINISHED
            request.finished_at = time
            key = (None if request.key is None
                   else request.key + OUTPUT_TEXT * request.generated)
            self.evictable.append(CachedPrompt(key, request.prompt_tokens + request.generated))
            self._finished(request)

    def _finished(self, request: Request) -> None:
        for listener in self._listeners:
            listener.on_finish(request, request.finished_at or self.now)
        self._done.append(request.rid)
        while len(self._done) > KEEP_FINISHED:  # a long demo must not grow without bound
            self.requests.pop(self._done.popleft(), None)

    def _report_gauges(self) -> None:
        self.reported_running = len(self.running)
        self.reported_queued = len(self.waiting)
