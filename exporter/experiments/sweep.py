"""Latency against concurrency, as the expert in the owner's thread asked for.

For each concurrency c, c streams start together, each on its own fresh prompt of
`context_tokens` random token ids, each asking for `max_new_tokens`. Reported per
c: the p50 and p99 inter-token latency over every gap of every stream, the
longest gap, the median and worst TTFT, the aggregate prefill rate (prompt tokens
over the time until the last first token) and the aggregate decode rate (the sum
of each stream's tokens after its first over the time they took).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from exporter.experiments.engine import check_context, engine_facts, random_prompt, stream_request
from exporter.experiments.stream import Stream, StreamFailed, percentile

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SweepSettings:
    engine: str
    api: str = "sglang"
    concurrency: tuple[int, ...] = (1, 2, 4, 8)
    context_tokens: int = 4096
    max_new_tokens: int = 256
    label: str = ""
    timeout_seconds: float = 900.0
    seed: int = 0


@dataclass
class SweepPoint:
    concurrency: int
    itl_p50_seconds: float | None
    itl_p99_seconds: float | None
    max_gap_seconds: float | None
    ttft_p50_seconds: float | None
    ttft_max_seconds: float | None
    prefill_tokens_per_second: float | None
    decode_tokens_per_second: float | None


@dataclass
class SweepResult:
    label: str
    engine: str
    api: str
    context_tokens: int
    max_new_tokens: int
    points: list[SweepPoint]
    engine_version: str
    engine_flags: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


async def run_sweep(settings: SweepSettings, progress: Progress = lambda _: None,
                    clock: Callable[[], float] = time.monotonic) -> SweepResult:
    url = settings.engine.rstrip("/")
    rng = random.Random(settings.seed)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    connector = aiohttp.TCPConnector(limit=max(settings.concurrency) + 1)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        facts = await engine_facts(session, url)
        check_context(facts, max(settings.concurrency)
                      * (settings.context_tokens + settings.max_new_tokens),
                      "the largest concurrency's prompts and answers")
        points = []
        for concurrency in settings.concurrency:
            progress(f"concurrency {concurrency}: {concurrency} streams of "
                     f"{settings.context_tokens} + {settings.max_new_tokens} tokens")
            streams = [Stream(session, url, *stream_request(
                settings.api, random_prompt(settings.context_tokens, rng),
                settings.max_new_tokens), clock=clock) for _ in range(concurrency)]
            await _run_all(streams, settings.timeout_seconds)
            points.append(_point(concurrency, streams, settings.context_tokens))
    return SweepResult(settings.label, url, settings.api, settings.context_tokens,
                       settings.max_new_tokens, points, facts.version, facts.flags)


async def _run_all(streams: list[Stream], timeout_seconds: float) -> None:
    tasks = [asyncio.create_task(stream.run()) for stream in streams]
    try:
        async with asyncio.timeout(timeout_seconds):
            await asyncio.gather(*tasks)
    finally:
        for task in tasks:  # on any failure or Ctrl-C: close every stream, so the engine aborts
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, StreamFailed, aiohttp.ClientError):
                await task


def _point(concurrency: int, streams: list[Stream], context_tokens: int) -> SweepPoint:
    gaps = [gap for stream in streams for gap in stream.gaps()]
    ttfts = [s.ttft for s in streams if s.ttft is not None]
    started = min(s.sent_at for s in streams if s.sent_at is not None)
    last_first = max((s.arrivals[0][0] for s in streams if s.arrivals), default=None)
    decode = [
        (s.arrivals[-1][1] - s.arrivals[0][1]) / (s.arrivals[-1][0] - s.arrivals[0][0])
        for s in streams if len(s.arrivals) > 1 and s.arrivals[-1][0] > s.arrivals[0][0]
    ]
    return SweepPoint(
        concurrency=concurrency,
        itl_p50_seconds=percentile(gaps, 0.50),
        itl_p99_seconds=percentile(gaps, 0.99),
        max_gap_seconds=max(gaps, default=None),
        ttft_p50_seconds=statistics.median(ttfts) if ttfts else None,
        ttft_max_seconds=max(ttfts, default=None),
        prefill_tokens_per_second=(concurrency * context_tokens / (last_first - started)
                                   if last_first is not None and last_first > started else None),
        decode_tokens_per_second=sum(decode) if decode else None,
    )
