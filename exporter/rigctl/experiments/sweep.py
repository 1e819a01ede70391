"""Latency against concurrency, as the expert in the owner's thread asked for.

For each concurrency c, c streams start together, each on its own fresh prompt of
`context_tokens` random token ids, each asking for `max_new_tokens`. Reported per
c: the p50 and p99 inter-token latency over every gap of every stream, the
longest gap, the median and worst TTFT, the aggregate prefill rate (prompt tokens
over the time until the last first token) and the aggregate decode rate (the sum
of each stream's tokens after its first over the time they took).

The decode rate is in tokens only where the streams count every frame; the frame
rate is always given, and a final usage chunk gives each stream's total
(`tokens_from`, docs/rigctl.md#where-the-token-counts-come-from).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from exporter.daemon.engines.generation import generation_request
from exporter.rigctl.experiments.engine import (
    Overrides,
    check_context,
    check_pool,
    engine_facts,
    random_prompt,
)
from exporter.rigctl.experiments.stream import (
    STREAM_TIMEOUT,
    Progress,
    Stream,
    close_all,
    percentile,
)
from exporter.streams import TokensFrom

_POOREST_FIRST: tuple[TokensFrom, ...] = ("frames", "final_usage", "continuous_usage")


@dataclass(frozen=True)
class SweepSettings:
    engine: str
    #: None: the engine's own (SGLang's native API for SGLang, else OpenAI's).
    api: str | None = None
    overrides: Overrides = Overrides()
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
    #: None unless every stream counted every frame (tokens_from "continuous_usage").
    decode_tokens_per_second: float | None
    tokens_from: TokensFrom = "frames"
    decode_frames_per_second: float | None = None
    #: Every stream's generated tokens, where every stream counted them.
    completion_tokens: int | None = None


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
    engine_kind: str = ""
    context_length_tokens: int | None = None
    tokens_from: TokensFrom = "frames"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


async def run_sweep(settings: SweepSettings, progress: Progress = lambda _: None,
                    clock: Callable[[], float] = time.monotonic) -> SweepResult:
    url = settings.engine.rstrip("/")
    rng = random.Random(settings.seed)
    connector = aiohttp.TCPConnector(limit=max(settings.concurrency) + 1)
    async with aiohttp.ClientSession(timeout=STREAM_TIMEOUT, connector=connector) as session:
        facts = await engine_facts(session, url, settings.overrides)
        check_context(facts, settings.context_tokens + settings.max_new_tokens,
                      "a stream's prompt and answer")
        check_pool(facts, max(settings.concurrency)
                   * (settings.context_tokens + settings.max_new_tokens),
                   "the largest concurrency's prompts and answers")
        api = settings.api or facts.api()
        limit = facts.token_id_limit()
        points = []
        for concurrency in settings.concurrency:
            progress(f"concurrency {concurrency}: {concurrency} streams of "
                     f"{settings.context_tokens} + {settings.max_new_tokens} tokens")
            streams = [Stream(session, url, *generation_request(
                api, random_prompt(settings.context_tokens, rng, limit),
                settings.max_new_tokens), clock=clock) for _ in range(concurrency)]
            await _run_all(streams, settings.timeout_seconds)
            points.append(_point(concurrency, streams, settings.context_tokens))
    return SweepResult(settings.label, url, api, settings.context_tokens,
                       settings.max_new_tokens, points, facts.version, facts.flags,
                       facts.kind, facts.context_length_tokens,
                       _poorest(point.tokens_from for point in points))


async def _run_all(streams: list[Stream], timeout_seconds: float) -> None:
    tasks = [asyncio.create_task(stream.run()) for stream in streams]
    try:
        async with asyncio.timeout(timeout_seconds):
            await asyncio.gather(*tasks)
    finally:
        await close_all(tasks)


def _point(concurrency: int, streams: list[Stream], context_tokens: int) -> SweepPoint:
    gaps = [gap for stream in streams for gap in stream.gaps()]
    ttfts = [s.ttft for s in streams if s.ttft is not None]
    started = min(s.sent_at for s in streams if s.sent_at is not None)
    last_first = max((s.arrivals[0][0] for s in streams if s.arrivals), default=None)
    decoding = [s for s in streams
                if len(s.arrivals) > 1 and s.arrivals[-1][0] > s.arrivals[0][0]]
    frames = [(s.arrivals[-1][1] - s.arrivals[0][1]) / (s.arrivals[-1][0] - s.arrivals[0][0])
              for s in decoding]
    counted = _poorest(s.tokens_from for s in streams)
    decode = None
    if counted == "continuous_usage" and decoding:
        decode = sum(((s.arrivals[-1][2] or 0) - (s.arrivals[0][2] or 0))
                     / (s.arrivals[-1][0] - s.arrivals[0][0]) for s in decoding)
    totals = [s.tokens for s in streams]
    return SweepPoint(
        concurrency=concurrency,
        itl_p50_seconds=percentile(gaps, 0.50),
        itl_p99_seconds=percentile(gaps, 0.99),
        max_gap_seconds=max(gaps, default=None),
        ttft_p50_seconds=statistics.median(ttfts) if ttfts else None,
        ttft_max_seconds=max(ttfts, default=None),
        prefill_tokens_per_second=(concurrency * context_tokens / (last_first - started)
                                   if last_first is not None and last_first > started else None),
        decode_tokens_per_second=decode,
        tokens_from=counted,
        decode_frames_per_second=sum(frames) if frames else None,
        completion_tokens=(sum(t for t in totals if t is not None)
                           if totals and None not in totals else None),
    )


def _poorest(counts: Iterable[TokensFrom]) -> TokensFrom:
    """The poorest of the streams' counts: a rate in tokens needs every stream's."""
    kinds = set(counts)
    return next(kind for kind in _POOREST_FIRST if kind in kinds or kind == "continuous_usage")
