"""The stream probe `probe/<name>`: one short streaming generation, timed frame by frame.

SGLang gets its native `/generate`; any other engine `/v1/completions`
(`exporter/daemon/engines/generation.py`). The gaps and the TTFT run between frames;
the token count is whatever the stream gives (`tokens_from`).

It is what a client sees (docs/metrics.md#stream-probe): the time to the first token, every gap
between frames that carry tokens, the longest gap and the decode rate, timed by
the same `exporter.streams` code as the tap and the bench.

One probe at a time per engine, each under a hard deadline. A probe that misses it
fails with the reason logged; its max gap then includes the gap still open at the
deadline, because that is how long a client waited without a token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from exporter.config import EngineConfig
from exporter.daemon.engines.generation import api_for, generation_request
from exporter.daemon.engines.source import EngineSource
from exporter.daemon.snapshot import SourceError
from exporter.process.log_limits import Conditions
from exporter.schema import probe_source
from exporter.streams import Histogram, StreamMeter, TokensFrom

log = logging.getLogger(__name__)

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
    #: As the stream counted them; None where it never did (see tokens_from).
    tokens: int | None
    decode_tokens_per_second: float | None
    #: Frames that carried tokens.
    frames: int = 0
    tokens_from: TokensFrom = "continuous_usage"


@dataclass(frozen=True)
class ProbeReading:
    kind: str
    name: str
    last: ProbeResult | None
    gap_buckets: tuple[tuple[str, float], ...]
    gap_sum: float


def probe_prompt(configured: str) -> str:
    """The configured prompt, or the default behind a prefix no other request shares,
    so the probe neither rides nor pollutes the radix cache (docs/metrics.md#stream-probe)."""
    return configured or f"[rig probe {uuid.uuid4().hex}] {DEFAULT_PROMPT}"


def probe_request(config: EngineConfig, api: str | None = None) -> tuple[str, dict[str, object]]:
    """The route and body of one probe: SGLang's native /generate; on vLLM, which has
    no /generate (404), and on any other engine, the OpenAI completions route, whose
    model may be left out (the one served), with ignore_eos and the usage asked for
    (exporter/daemon/engines/generation.py, docs/metrics.md#stream-probe)."""
    return generation_request(api or api_for(config.kind), probe_prompt(config.probe_prompt),
                              config.probe_max_new_tokens)


class StreamProbe:
    def __init__(self, session: Callable[[], aiohttp.ClientSession | None], config: EngineConfig,
                 clock: Callable[[], float] = time.monotonic, api: str | None = None) -> None:
        self._session = session
        self.config = config
        self.api = api or api_for(config.kind)
        self.clock = clock
        self.gaps = Histogram()
        self.last: ProbeResult | None = None
        self._lock = asyncio.Lock()
        self._conditions = Conditions(log, down="{subject} failed: {message}")

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
                subject = f"probe {self.config.name}"
                if result.success:
                    self._conditions.ok(subject)
                else:
                    self._conditions.failed(subject, result.reason)
            await asyncio.sleep(self.config.probe_interval_seconds)

    async def _measure(self) -> ProbeResult:
        meter = StreamMeter(self.clock())
        deadline = self.config.probe_timeout_seconds
        try:
            async with asyncio.timeout(deadline):
                await self._stream(meter)
        except TimeoutError:
            return _result(meter, False, f"no end of stream within {deadline:g} s "
                                         f"({meter.timer.tokens or 0} tokens so far)", self.clock())
        except (aiohttp.ClientError, SourceError) as exc:
            return _result(meter, False, f"{type(exc).__name__}: {exc}", None)
        if meter.unrecognised:
            return _result(meter, False, f"frame of no known shape: "
                                         f"{meter.first_unrecognised!r}", None)
        if meter.error is not None:
            return _result(meter, False, f"error frame: {meter.error}", None)
        if not meter.done:
            return _result(meter, False, "stream ended without [DONE]", None)
        if not meter.timer.frames:
            return _result(meter, False, "stream ended with no tokens", None)
        return _result(meter, True, "", None)

    async def _stream(self, meter: StreamMeter) -> None:
        session = self._session()
        if session is None:
            raise SourceError("engine session not started")
        path, body = probe_request(self.config, self.api)
        async with session.post(self.config.url + path, json=body) as response:
            if response.status != 200:
                head = (await response.content.read(200)).decode("utf-8", "replace")
                raise SourceError(f"HTTP {response.status} {head!r}")
            async for chunk in response.content.iter_any():
                meter.feed(chunk, self.clock())
                if meter.done:
                    return


def _result(meter: StreamMeter, success: bool, reason: str,
            deadline_at: float | None) -> ProbeResult:
    """The probe's view of its stream; on a missed deadline the gap then open counts."""
    timing = meter.timer.timing(open_until=deadline_at)
    return ProbeResult(
        success=success,
        reason=reason,
        ttft_seconds=timing.ttft_seconds,
        gaps_seconds=timing.gaps_seconds,
        max_gap_seconds=timing.max_gap_seconds,
        tokens=timing.tokens,
        decode_tokens_per_second=timing.decode_tokens_per_second,
        frames=timing.frames,
        tokens_from=timing.tokens_from,
    )


class ProbeSource:
    """`probe/<name>`: the probe's schedule, and its latest result at scrape time."""

    def __init__(self, engine: EngineSource) -> None:
        self.engine = engine
        self.name = probe_source(engine.config.name)
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
