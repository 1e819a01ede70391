"""The stream probe `probe/<name>`: one short streaming /generate, timed frame by frame.

It is what a client sees (DESIGN §3.1): the time to the first token, every gap
between frames that carry tokens, the longest gap and the decode rate. SGLang's
stream is SSE, `data: {json}` per frame and `data: [DONE]` at the end, with a
cumulative `meta_info.completion_tokens` (reference/sglang-metrics.md §7.3), so a
frame's token count is the difference from the one before.

One probe at a time per engine, each under a hard deadline. A probe that misses it
fails with the reason logged; its max gap then includes the gap still open at the
deadline, because that is how long a client waited without a token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from exporter.config import EngineConfig
from exporter.engines.source import EngineSource
from exporter.sources.base import SourceError

log = logging.getLogger(__name__)

# rig_probe_token_gap_seconds buckets, 10 ms to 120 s (DESIGN §2): a healthy gap is
# tens of ms, a mixed-chunk stutter ~4 s, a 64K-prefill starvation ~47 s (rig-facts.md).
GAP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
DEFAULT_PROMPT = "Count from one to one hundred in English words, separated by commas."


class ProbeBusy(Exception):
    """A probe is already running on this engine."""


@dataclass(frozen=True)
class ProbeResult:
    success: bool
    reason: str  # why it failed; "" on success
    ttft_seconds: float | None
    gaps_seconds: tuple[float, ...]
    max_gap_seconds: float | None
    tokens: int
    decode_tokens_per_second: float | None


@dataclass
class GapHistogram:
    """Every gap every probe saw, as cumulative Prometheus buckets (bounded: fixed size)."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(GAP_BUCKETS) + 1))
    sum: float = 0.0

    def observe(self, seconds: float) -> None:
        self.sum += seconds
        for i, bound in enumerate(GAP_BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1
        self.counts[-1] += 1  # +Inf

    def buckets(self) -> list[tuple[str, float]]:
        bounds = [repr(b) for b in GAP_BUCKETS] + ["+Inf"]
        return [(bound, float(count)) for bound, count in zip(bounds, self.counts, strict=True)]


@dataclass(frozen=True)
class ProbeReading:
    kind: str
    name: str
    last: ProbeResult | None
    gap_buckets: tuple[tuple[str, float], ...]
    gap_sum: float


def probe_prompt(configured: str) -> str:
    """The configured prompt, or the default behind a prefix no other request shares,
    so the probe neither rides nor pollutes the radix cache (reference §7.3)."""
    return configured or f"[rig probe {uuid.uuid4().hex}] {DEFAULT_PROMPT}"


class StreamProbe:
    def __init__(self, session: Callable[[], aiohttp.ClientSession | None], config: EngineConfig,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._session = session
        self.config = config
        self.clock = clock
        self.gaps = GapHistogram()
        self.last: ProbeResult | None = None
        self._lock = asyncio.Lock()

    async def probe_once(self) -> ProbeResult:
        if self._lock.locked():
            raise ProbeBusy(f"a probe is already running on {self.config.name}")
        async with self._lock:
            result = await self._measure()
        self.last = result
        for gap in result.gaps_seconds:
            self.gaps.observe(gap)
        return result

    async def run(self) -> None:
        """The schedule: a probe every interval, failures logged (a probe run by
        hand through probe_once, as rigctl does, reports its own result)."""
        while True:
            with contextlib.suppress(ProbeBusy):  # someone ran one by hand (rigctl probe)
                result = await self.probe_once()
                if not result.success:
                    log.warning("probe %s failed: %s", self.config.name, result.reason)
            await asyncio.sleep(self.config.probe_interval_seconds)

    async def _measure(self) -> ProbeResult:
        frames = _Frames(self.clock())
        deadline = self.config.probe_timeout_seconds
        try:
            async with asyncio.timeout(deadline):
                await self._stream(frames)
        except TimeoutError:
            return frames.result(False, f"no end of stream within {deadline:g} s "
                                        f"({frames.tokens} tokens so far)", self.clock())
        except (aiohttp.ClientError, SourceError, ValueError) as exc:
            return frames.result(False, f"{type(exc).__name__}: {exc}", None)
        if not frames.done:
            return frames.result(False, "stream ended without [DONE]", None)
        if frames.tokens == 0:
            return frames.result(False, "stream ended with no tokens", None)
        return frames.result(True, "", None)

    async def _stream(self, frames: _Frames) -> None:
        session = self._session()
        if session is None:
            raise SourceError("engine session not started")
        body = {
            "text": probe_prompt(self.config.probe_prompt),
            "sampling_params": {"max_new_tokens": self.config.probe_max_new_tokens,
                                "ignore_eos": True, "temperature": 0},
            "stream": True,
        }
        async with session.post(self.config.url + "/generate", json=body) as response:
            if response.status != 200:
                head = (await response.content.read(200)).decode("utf-8", "replace")
                raise SourceError(f"HTTP {response.status} {head!r}")
            async for raw in response.content:
                now = self.clock()
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    frames.done = True
                    return
                frame = json.loads(payload)
                meta = frame.get("meta_info") if isinstance(frame, dict) else None
                if not isinstance(meta, dict):
                    raise ValueError(f"frame without meta_info: {payload[:80]!r}")
                frames.add(now, int(meta.get("completion_tokens", 0)))


@dataclass
class _Frames:
    """The token-bearing frames of one stream: arrival times and cumulative tokens."""

    started: float
    times: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    done: bool = False

    @property
    def tokens(self) -> int:
        return self.counts[-1] if self.counts else 0

    def add(self, now: float, completion_tokens: int) -> None:
        if completion_tokens > self.tokens:  # a frame with no new token ends no gap
            self.times.append(now)
            self.counts.append(completion_tokens)

    def result(self, success: bool, reason: str, deadline_at: float | None) -> ProbeResult:
        gaps = tuple(b - a for a, b in zip(self.times, self.times[1:], strict=False))
        open_gap = [deadline_at - self.times[-1]] if deadline_at is not None and self.times else []
        rate = None
        if len(self.times) > 1 and self.times[-1] > self.times[0]:
            # Decode only: the tokens after the first frame over the time they took.
            rate = (self.counts[-1] - self.counts[0]) / (self.times[-1] - self.times[0])
        return ProbeResult(
            success=success,
            reason=reason,
            ttft_seconds=self.times[0] - self.started if self.times else None,
            gaps_seconds=gaps,
            max_gap_seconds=max([*gaps, *open_gap], default=None),
            tokens=self.tokens,
            decode_tokens_per_second=rate,
        )


class ProbeSource:
    """`probe/<name>`: the probe's schedule, and its latest result at scrape time."""

    def __init__(self, engine: EngineSource) -> None:
        self.engine = engine
        self.name = f"probe/{engine.config.name}"
        self.probe = StreamProbe(lambda: engine.session, engine.config)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # Started after the engine source, whose session it uses (runtime order).
        self._task = asyncio.create_task(self.probe.run(),
                                         name=f"stream probe {self.engine.config.name}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def read(self) -> ProbeReading:
        if self._task is not None and self._task.done() and not self._task.cancelled():
            raise SourceError(f"probe task stopped: {self._task.exception()!r}")
        probe = self.probe
        return ProbeReading(self.engine.config.kind, self.engine.config.name, probe.last,
                            tuple(probe.gaps.buckets()), probe.gaps.sum)
