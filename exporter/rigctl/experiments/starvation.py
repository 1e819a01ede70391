"""The owner's starvation experiment (docs/facts/rig.md#decode-starvation).

Agent A streams a long answer. `delay` seconds after A's first token, agent B
sends a fresh prompt of `context_tokens` random token ids (no cache hit). When
B's first token arrives the experiment stops both. A's longest gap while B
prefilled is the figure the owner measured by stopwatch: 47.23 s with SGLang's
defaults, 3.997 s with `--enable-mixed-chunk`.

None of these figures needs a token count: gaps and the TTFT run between frames.
The rates are in tokens per second where the stream counts every frame, in frames
per second otherwise (`tokens_from`, docs/rigctl.md#where-the-token-counts-come-from).
With `b_engine`, B goes to another engine: the owner's question of one TP2 engine
against two single-card ones (A on one card, B on the other).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
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
    StreamFailed,
    close_all,
    percentile,
)
from exporter.streams import TokensFrom

#: After B's first token, how long to wait for A's next one, which ends A's gap.
AFTER_B_SECONDS = 120.0


@dataclass(frozen=True)
class StarvationSettings:
    engine: str
    #: None: the engine's own (SGLang's native API for SGLang, else OpenAI's).
    api: str | None = None
    #: B's engine, where it is not A's.
    b_engine: str | None = None
    overrides: Overrides = Overrides()
    context_tokens: int = 65536
    #: A's own context; the owner's A had a 64K context too.
    a_context_tokens: int | None = None
    delay_seconds: float = 5.0
    a_max_tokens: int = 4096
    label: str = ""
    timeout_seconds: float = 900.0
    seed: int = 0


@dataclass
class StarvationResult:
    label: str
    engine: str
    api: str
    context_tokens: int
    delay_seconds: float
    a_max_gap_seconds: float | None
    a_p95_gap_seconds: float | None
    #: None unless the stream counted every frame (tokens_from "continuous_usage").
    a_tokens_per_second_before_b: float | None
    a_tokens_per_second_during_b: float | None
    b_ttft_seconds: float | None
    engine_version: str
    engine_flags: dict[str, Any] = field(default_factory=dict)
    finished_at: str = ""
    engine_kind: str = ""
    b_engine: str | None = None
    #: What the token counts came from: every frame, a final usage chunk, or nothing.
    tokens_from: TokensFrom = "frames"
    a_frames_per_second_before_b: float | None = None
    a_frames_per_second_during_b: float | None = None
    #: B's prompt as the engine counted it, where its stream said.
    b_prompt_tokens: int | None = None
    context_length_tokens: int | None = None
    #: A's prompt ids lay below this, and where that came from (a vocabulary the
    #: engine or --vocab-size gave, or the engine's /tokenize).
    token_id_limit: int | None = None
    token_ids_from: str = ""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


async def run_starvation(settings: StarvationSettings, progress: Progress = lambda _: None,
                         clock: Callable[[], float] = time.monotonic) -> StarvationResult:
    url = settings.engine.rstrip("/")
    rng = random.Random(settings.seed)
    a_context = settings.a_context_tokens or settings.context_tokens
    b_url = (settings.b_engine or url).rstrip("/")
    async with aiohttp.ClientSession(timeout=STREAM_TIMEOUT) as session:
        facts = await engine_facts(session, url, settings.overrides)
        b_facts = facts if b_url == url else await engine_facts(session, b_url,
                                                                settings.overrides)
        check_context(facts, a_context + settings.a_max_tokens, "A's context and answer")
        check_context(b_facts, settings.context_tokens + 1, "B's prompt")
        if b_url == url:
            check_pool(facts, a_context + settings.a_max_tokens + settings.context_tokens + 1,
                       "A's and B's requests together")
        api = settings.api or facts.api()
        a_limit, b_limit = facts.token_id_limit(), b_facts.token_id_limit()
        a = Stream(session, url, *generation_request(
            api, random_prompt(a_context, rng, a_limit), settings.a_max_tokens),
            clock=clock)
        b = Stream(session, b_url, *generation_request(
            settings.api or b_facts.api(),
            random_prompt(settings.context_tokens, rng, b_limit), 1), clock=clock)
        tasks: list[asyncio.Task[None]] = []
        try:
            async with asyncio.timeout(settings.timeout_seconds):
                tasks.append(asyncio.create_task(a.run(), name="agent A"))
                progress(f"A: prefilling {a_context} tokens")
                await _first_token_or_failure(a, tasks[0])
                progress(f"A: decoding; B starts in {settings.delay_seconds:g} s")
                await _sleep_or_failure(settings.delay_seconds, tasks[0])
                b_sent = clock()
                tasks.append(asyncio.create_task(b.run(), name="agent B"))
                progress(f"B: prefilling {settings.context_tokens} tokens "
                         "(about 50 s for 64K on the rig)")
                await _first_token_or_failure(b, tasks[1], *tasks[:1], progress=progress,
                                              since=b_sent, clock=clock)
                b_first = clock()
                progress("B: first token; waiting for A's next token")
                await _next_token(a, tasks[0], after=b_first)
        finally:
            await close_all(tasks)
        assert a.arrivals and b.sent_at is not None
        a_first = a.arrivals[0][0]
        # Every gap of A's that was open at some point while B waited for its first
        # token; one still open at the end counts up to then (A may never resume).
        stopped = clock()
        during = a.gaps(since=b_sent, until=float("inf"))
        if a.arrivals[-1][0] <= b_first:
            during.append(stopped - a.arrivals[-1][0])
        return StarvationResult(
            label=settings.label, engine=url, api=api,
            context_tokens=settings.context_tokens, delay_seconds=settings.delay_seconds,
            a_max_gap_seconds=max(during),
            a_p95_gap_seconds=percentile(during, 0.95),
            a_tokens_per_second_before_b=a.tokens_per_second(a_first, b_sent),
            a_tokens_per_second_during_b=a.tokens_per_second(b_sent, b_first),
            b_ttft_seconds=b.ttft,
            engine_version=facts.version, engine_flags=facts.flags,
            finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            engine_kind=facts.kind, b_engine=None if b_url == url else b_url,
            tokens_from=tokens_from(a, b),
            a_frames_per_second_before_b=a.frames_per_second(a_first, b_sent),
            a_frames_per_second_during_b=a.frames_per_second(b_sent, b_first),
            b_prompt_tokens=b.meter.prompt_tokens if b.meter is not None else None,
            context_length_tokens=facts.context_length_tokens,
            token_id_limit=a_limit, token_ids_from=facts.token_ids_from(),
        )


def tokens_from(a: Stream, b: Stream) -> TokensFrom:
    """What the run's counts came from. A is cut off once B has its first token, so a
    server that counts only at the end never counts A: B's finished stream says
    whether it does."""
    if a.tokens_from == "continuous_usage":
        return "continuous_usage"
    if "frames" == a.tokens_from == b.tokens_from:
        return "frames"
    return "final_usage"


async def _first_token_or_failure(stream: Stream, task: asyncio.Task[None],
                                  *others: asyncio.Task[None], progress: Progress | None = None,
                                  since: float = 0.0,
                                  clock: Callable[[], float] = time.monotonic) -> None:
    """Wait for the stream's first token; raise if it or another stream ends first."""
    waiter = asyncio.create_task(stream.first_token.wait())
    watched = {waiter, task, *others}
    try:
        while True:
            done, _ = await asyncio.wait(watched, timeout=5.0,
                                         return_when=asyncio.FIRST_COMPLETED)
            # The first token may arrive with the end of the stream (B asks for one
            # token): the event is set even when the stream's task finished first.
            if waiter in done or stream.first_token.is_set():
                return
            for finished in done:
                finished.result()  # raises the stream's failure
                raise StreamFailed(f"{finished.get_name()} ended before "
                                   f"{stream.path}'s first token")
            if progress is not None:
                progress(f"B: waiting for the first token, {clock() - since:.0f} s")
    finally:
        waiter.cancel()


async def _next_token(stream: Stream, task: asyncio.Task[None], after: float) -> None:
    """Until the stream has a token that arrived after `after`, it ends, or time runs out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + AFTER_B_SECONDS
    while stream.arrivals[-1][0] <= after and not task.done() and loop.time() < deadline:
        await asyncio.sleep(0.01)  # arrivals are stamped by the stream; this only stops


async def _sleep_or_failure(seconds: float, task: asyncio.Task[None]) -> None:
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if done:
        task.result()
        raise StreamFailed("agent A finished before B started: raise --a-max-tokens")
