"""Where the stall tracker gets its counters: one small reader per way of reading.

Each reader returns a reading of what its engine shows (SGLang's and vLLM's
`Counters`, llama.cpp's slots in `slots.py`) and says how often it may be asked (its
resolution); the tracker's state machine does not know which one it has. Chosen once at start
(docs/stall-tracker.md#where-the-counters-come-from), cheapest first:

- `MultiprocReader`: SGLang's prometheus_client files under `metrics_dir`. No engine
  work at all; tens of microseconds here.
- `MetricsReader`: `GET /metrics`, spaced so that the engine's time rendering for
  this exporter stays at or under 2 % of wall time. SGLang renders synchronously in
  the event loop that streams tokens (24-45 ms for the 0.5.23 family set on a 2-core
  box, docs/facts/sglang.md#the-cost-of-reading-metrics), so every render delays every stream.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from exporter.daemon.engines.exposition import Sample, parse
from exporter.daemon.engines.normalise import combine_ranks
from exporter.daemon.engines.routes import GENERATION_ENDPOINTS
from exporter.daemon.engines.stall.multiproc_files import FileSample, MultiprocDir
from exporter.daemon.engines.stall.plans import Counters
from exporter.daemon.snapshot import SourceError
from exporter.process.in_flight import InFlight

PREFIXES = ("sglang:", "sglang_")
#: The polls' spacing targets this share of wall time spent rendering for the
#: exporter, a little under the 2 % the exporter allows the engine: the tracker takes a body a
#: scrape fetched as its next poll, so scrapes add renders only when they come
#: faster than the tracker's polls.
TRACKER_BUDGET = 0.018
#: Scrapes reuse a body the tracker fetched this recently.
BODY_REUSE_SECONDS = 1.0
#: A fetch still unanswered after this is given up, and the next one asks anew: a
#: connection lost without a reset must not hold every later reading for good.
FETCH_GIVE_UP_SECONDS = 30.0


class TrackerBlind(SourceError):
    """The reader read, and found nothing to track from: the stall series must go
    absent rather than read 0 (docs/stall-tracker.md#when-the-tracker-cannot-see).
    `cause` is one of CAUSES, the label of rig_engine_decode_stall_tracker_up."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


#: Why a tracker cannot see, as rig_engine_decode_stall_tracker_up's `cause` says it.
CAUSES = {
    "no_plan": "no signal plan can be trusted yet, or ever, for this engine",
    "unreadable": "metrics_dir cannot be listed or read",
    "no_files": "metrics_dir holds no prometheus_client file",
    "no_live_process": "metrics_dir holds only files of processes that are not running",
    "files_without_counters": "metrics_dir's files hold no num_running_reqs",
    "no_running_gauge": "the counters read hold no num_running_reqs",
    "no_slots": "llama-server's /slots gives no slots (started without --slots, or down)",
}


#: What a reading holds: Counters (SGLang, vLLM) or llama.cpp's slots.
Shown = TypeVar("Shown")
Shown_co = TypeVar("Shown_co", covariant=True)


@dataclass(frozen=True)
class CounterReading(Generic[Shown]):
    """What the engine showed, and when it was asked for and answered: it describes
    the engine at some moment in between (docs/stall-tracker.md#honest-bounds). A
    reused body keeps the times of its own fetch."""

    counters: Shown
    asked_at: float
    answered_at: float


class CounterReader(Protocol[Shown_co]):
    #: How this reader reads, for the log line at start.
    how: str
    #: Where it reads, for the line that says it cannot see.
    where: str

    async def read(self) -> CounterReading[Shown_co]:
        """What the engine shows now; raises SourceError when it cannot be read, and
        TrackerBlind when it reads but shows nothing to track from. Each reading
        describes a moment after the previous reading's."""
        ...

    def resolution_seconds(self, standing_still: bool = False) -> float:
        """The poll interval in force, asked after every poll; `standing_still`: no
        token has moved since the last poll while requests are in flight (a reader
        that paces itself by the engine's cost may take note)."""
        ...

    def close(self) -> None: ...


def counters_from(samples: dict[str, list[Sample]]) -> Counters:
    """Counters from samples keyed by unprefixed sample name (see `_FAMILIES`)."""

    def total(name: str, keep: Callable[[Sample], bool] = lambda s: True) -> float | None:
        chosen = [s for s in samples.get(name, ()) if keep(s)]
        return combine_ranks(chosen) if chosen else None

    return Counters(
        decode_passes=total("cuda_graph_passes_total",
                            lambda s: s.labels.get("mode", "").startswith("decode_")),
        streamed_tokens=total("inter_token_latency_seconds_count"),
        running=total("num_running_reqs", lambda s: s.labels.get("priority", "") == ""),
        http_active=total("http_requests_active",
                          lambda s: GENERATION_ENDPOINTS.fullmatch(
                              s.labels.get("endpoint", "")) is not None),
        finished=total("num_requests_total"),
        gen_throughput=total("gen_throughput"),
        families=frozenset(_FAMILY_OF[name] for name, found in samples.items()
                           if found and name in _FAMILY_OF),
    )


# family name on the TYPE line -> the sample names the tracker takes from it; the
# last three are evidence of the release's features (evidence.FAMILY_FLOORS).
_FAMILIES = {
    "cuda_graph_passes_total": ("cuda_graph_passes_total",),
    "inter_token_latency_seconds": ("inter_token_latency_seconds_count",),
    "num_running_reqs": ("num_running_reqs",),
    "http_requests_active": ("http_requests_active",),
    "num_requests_total": ("num_requests_total",),
    "gen_throughput": ("gen_throughput",),
    "realtime_tokens_total": ("realtime_tokens_total",),
    "full_token_usage": ("full_token_usage",),
}
_FAMILY_OF = {sample: family for family, names in _FAMILIES.items() for sample in names}


def _unprefixed(name: str) -> str | None:
    for prefix in PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return None


class RenderPacer:
    """Spaces /metrics reads so that render time / wall time stays within a budget.

    The time to the whole body, measured here, is an upper bound of the engine's
    render time (it adds loopback transfer). The median of the last few is used: one
    answer that waited out a hung event loop says nothing about rendering, and must
    not blind the tracker for minutes (2 s / 0.018 would be a 111 s interval).
    Renders made while `learning` is off (decode standing still) are not kept: no
    token waits on them, and a whole stall of them, slow on a box short of CPU, would
    space the polls after it a minute or more apart.
    """

    def __init__(self, floor_seconds: float, budget: float = TRACKER_BUDGET,
                 history: int = 8) -> None:
        self.floor_seconds = floor_seconds
        self.budget = budget
        self._recent: deque[float] = deque(maxlen=history)
        self.learning = True

    def record(self, render_seconds: float) -> None:
        if self.learning:
            self._recent.append(render_seconds)

    def interval_seconds(self) -> float:
        if not self._recent:
            return self.floor_seconds
        return max(self.floor_seconds, statistics.median(self._recent) / self.budget)


@dataclass(frozen=True)
class FetchedBody:
    """A /metrics body and when it was asked for and answered (the reader's clock)."""

    text: str
    asked_at: float
    answered_at: float


class MetricsBody:
    """The engine's /metrics body, shared by the tracker and Prometheus' scrapes.

    At most one fetch is in flight: a reader that wants a fresh body while one is
    asked for waits for that one. A reader that gives up waiting (the poller's 2 s,
    a scrape's deadline) leaves the fetch running for the next. Cancelling it instead
    left an engine that answered slowly one abandoned request per poll, and SGLang
    renders each of them in the loop that streams tokens once that loop is free
    again (uvicorn starts the app when a request's headers arrive, whether or not its
    client is still there, and prometheus_client's app renders before it reads
    anything: docs/stall-tracker.md#the-state-machine): a 47 s hang polled every 2.25 s
    would end in some twenty renders at once.
    """

    def __init__(self, fetch: Callable[[], Awaitable[str]],
                 clock: Callable[[], float] = time.monotonic,
                 timer: Callable[[], float] = time.perf_counter) -> None:
        self._fetch = fetch
        self.clock = clock
        #: Times each fetch (a simulated engine's render time in tests).
        self.timer = timer
        self._latest: FetchedBody | None = None
        self._fetching = InFlight(self._fetch_one)
        #: Called with the seconds each fetch took.
        self.on_fetch: Callable[[float], None] | None = None
        self.fetches = 0

    async def fresh(self) -> FetchedBody:
        """A body asked for now, or by the fetch already in flight (which was asked
        for after every body answered before it). Its failure reaches whoever waits."""
        return await self._fetching()

    def close(self) -> None:
        """Give up the fetch in flight, if any (the exporter is stopping)."""
        self._fetching.cancel()

    async def _fetch_one(self) -> FetchedBody:
        asked_at, started = self.clock(), self.timer()
        async with asyncio.timeout(FETCH_GIVE_UP_SECONDS):
            text = await self._fetch()
        took = self.timer() - started
        self.fetches += 1
        fetched = self._latest = FetchedBody(text, asked_at, self.clock())
        if self.on_fetch is not None:
            self.on_fetch(took)
        return fetched

    async def recent(self, max_age_seconds: float = BODY_REUSE_SECONDS,
                     after: FetchedBody | None = None) -> FetchedBody:
        """A body answered within max_age_seconds, or a fresh one; with `after`, only
        a body other than it that was asked for once it was answered."""
        latest = self._latest
        if (latest is not None and self.clock() - latest.answered_at < max_age_seconds
                and (after is None or (latest is not after
                                       and latest.asked_at >= after.answered_at))):
            return latest
        return await self.fresh()


class MetricsReader:
    how = "/metrics under a 2 % engine-render budget"
    where = "the engine's /metrics"
    #: The in-flight gauge without which nothing reads as a stall, and when it appears.
    running_gauge = "num_running_reqs"
    running_gauge_note = " (SGLang writes it at its first batch, or within 30 s when idle)"

    def __init__(self, body: MetricsBody, floor_seconds: float) -> None:
        self.body = body
        self.pacer = RenderPacer(floor_seconds)
        body.on_fetch = self.pacer.record
        self._last: FetchedBody | None = None
        self._wanted = frozenset(prefix + family for family in _FAMILIES
                                 for prefix in PREFIXES)

    async def read(self) -> CounterReading[Counters]:
        # A body a scrape fetched since the last poll serves as this poll: the engine
        # renders for the tracker or for Prometheus, not for both (their renders
        # together stay within the budget). Only a body asked for after the last
        # reading was answered: never the same body twice (it would read as decode
        # standing still), and never one that describes an earlier moment.
        fetched = self._last = await self.body.recent(self.pacer.interval_seconds(),
                                                      after=self._last)
        counters = self._counters(fetched.text)
        if counters.running is None:
            raise TrackerBlind("no_running_gauge", f"{self.where} holds no "
                               f"{self.running_gauge}{self.running_gauge_note}")
        return CounterReading(counters, fetched.asked_at, fetched.answered_at)

    def _counters(self, text: str) -> Counters:
        exposition = parse(text, self._wanted)
        if exposition.type_lines == 0:
            raise SourceError("/metrics: not a Prometheus exposition")
        samples: dict[str, list[Sample]] = defaultdict(list)
        for family_name, family in exposition.families.items():
            base = _unprefixed(family_name)
            keep = _FAMILIES.get(base or "", ())
            for sample in family.samples:
                sample_name = _unprefixed(sample.name)
                if sample_name in keep:
                    samples[sample_name].append(sample)
        return counters_from(samples)

    def resolution_seconds(self, standing_still: bool = False) -> float:
        # While decode stands still no token is waiting to be delivered, so a render
        # delays none: poll at the floor, and the stall's end is known that closely
        # (docs/stall-tracker.md#honest-bounds). Nor do those renders count toward
        # the budget's spacing once decode moves again.
        self.pacer.learning = not standing_still
        return self.pacer.floor_seconds if standing_still else self.pacer.interval_seconds()

    def close(self) -> None:
        pass


class MultiprocReader:
    """Reads the counters from SGLang's multiprocess files, merging them as
    prometheus_client's MultiProcessCollector does: counters and histogram buckets
    add up over processes, `mostrecent` gauges keep the newest write, `livesum`
    gauges add up.

    A `live*` gauge counts live processes only: prometheus_client's
    `mark_process_dead` deletes a dead pid's live* files, which SGLang never calls.
    So a directory reused across restarts keeps a killed engine's in-flight count
    (`http_requests_active`, livesum) beside the new engine's; those files of pids
    that no longer run are left out (docs/stall-tracker.md#where-the-counters-come-from)."""

    # The files hold a histogram's buckets; merge_files adds them up into its _count.
    _SAMPLE_NAMES = frozenset(
        prefix + (name[:-len("_count")] + "_bucket" if name.endswith("_count") else name)
        for prefix in PREFIXES for name in _FAMILY_OF)

    def __init__(self, metrics_dir: str, interval_seconds: float,
                 clock: Callable[[], float] = time.monotonic,
                 alive: Callable[[str], bool] | None = None) -> None:
        self.how = f"SGLang's multiprocess files in {metrics_dir}"
        self.where = f"metrics_dir {metrics_dir}"
        self.files = MultiprocDir(metrics_dir, self._SAMPLE_NAMES)
        self.interval_seconds = interval_seconds
        self.clock = clock
        #: Whether a file's pid runs (a test's playback writes under made-up pids).
        self.alive = alive or process_alive

    async def read(self) -> CounterReading[Counters]:
        asked_at = self.clock()
        path = self.files.path
        try:
            found = self.files.read()
        except OSError as exc:
            raise TrackerBlind("unreadable", f"cannot read metrics_dir {path}: "
                                             f"{exc.strerror or exc}") from exc
        answered_at = self.clock()
        if not self.files.names:
            raise TrackerBlind("no_files", f"metrics_dir {path} holds no .db file, nor does "
                               "a tmp* directory in it: SGLang writes where its "
                               "PROMETHEUS_MULTIPROC_DIR points")
        pids = sorted({name[:-3].rpartition("_")[2] for name in self.files.names})
        if not any(self.alive(pid) for pid in pids):
            raise TrackerBlind("no_live_process", f"metrics_dir {path} holds "
                               f"{len(self.files.names)} .db files of pids {', '.join(pids)}, "
                               "none of them running here: an engine that has stopped, or "
                               "one in another pid namespace")
        dead = {pid for pid in pids if not self.alive(pid)}
        if dead:
            found = [s for s in found if not (s.kind.startswith("gauge_live") and s.pid in dead)]
        counters = counters_from(merge_files(found))
        if counters.running is None:
            raise TrackerBlind("files_without_counters", f"metrics_dir {path} holds "
                               f"{len(self.files.names)} .db files of pids {', '.join(pids)}, "
                               "none with num_running_reqs: not SGLang's scheduler files, or "
                               "a scheduler that has not written it yet (its first batch)")
        # The values are read one pread each, between these two times.
        return CounterReading(counters, asked_at, answered_at)

    def resolution_seconds(self, standing_still: bool = False) -> float:
        return self.interval_seconds

    def close(self) -> None:
        self.files.close()


def process_alive(pid: str) -> bool:
    """The pid runs in this pid namespace."""
    try:
        os.kill(int(pid), 0)
    except PermissionError:
        return True  # another user's process
    except (ValueError, OSError):
        return False
    return True


def merge_files(found: Iterable[FileSample]) -> dict[str, list[Sample]]:
    """Per unprefixed sample name, one Sample per label set, merged over processes."""
    merged: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, float]] = {}
    for sample in found:
        name = _unprefixed(sample.name)
        if name is None:
            continue
        labels = dict(sample.labels)
        if name.endswith("_bucket"):
            # The _count of a histogram is the sum of its (non-cumulative) buckets.
            name, labels = name[:-len("_bucket")] + "_count", {
                k: v for k, v in labels.items() if k != "le"}
        if sample.kind == "gauge_all":
            labels["pid"] = sample.pid
        key = (name, tuple(sorted(labels.items())))
        previous = merged.get(key)
        if sample.kind == "gauge_mostrecent":
            if previous is None or sample.timestamp >= previous[1]:
                merged[key] = (sample.value, sample.timestamp)
        else:
            merged[key] = ((previous[0] if previous else 0.0) + sample.value, 0.0)
    samples: dict[str, list[Sample]] = defaultdict(list)
    for (name, labels), (value, _) in merged.items():
        samples[name].append(Sample(name, dict(labels), value))
    return samples

