"""One streamed request from the client's side: when each token-bearing frame arrived.

The frames are read by `exporter.streams.StreamMeter`, the code the probe and the
tap use; what it says about the token count (`tokens_from`) decides whether a rate
is in tokens or in frames. Gaps and TTFT need no count: they run between frames.
Cancelling the task that runs `Stream.run` closes the connection, which is how
SGLang, vLLM and llama.cpp learn to abort the generation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import Callable

import aiohttp

from exporter.streams import StreamMeter, TokensFrom

#: Where an experiment says how far it has come (rigctl bench prints it to stderr).
Progress = Callable[[str], None]
#: No total deadline: a 64K prefill runs for about 50 s and each experiment keeps its
#: own timeout; only the connect is bounded.
STREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10)


class StreamFailed(Exception):
    pass


class Stream:
    def __init__(self, session: aiohttp.ClientSession, url: str, path: str, body: dict,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.session, self.url, self.path = session, url, path
        # Encoded now, not inside the timed request: a 64K-token prompt takes ~80 ms.
        self.payload = json.dumps(body).encode()
        self.clock = clock
        self.sent_at: float | None = None
        self.meter: StreamMeter | None = None
        #: (arrival time, frames so far, tokens so far where the stream had counted
        #: them) for every frame that carried tokens.
        self.arrivals: list[tuple[float, int, int | None]] = []
        self.first_token = asyncio.Event()

    async def run(self) -> None:
        self.sent_at = self.clock()
        meter = self.meter = StreamMeter(self.sent_at)
        async with self.session.post(self.url + self.path, data=self.payload,
                                     headers={"Content-Type": "application/json"}) as response:
            if response.status != 200:
                head = (await response.content.read(300)).decode("utf-8", "replace")
                raise StreamFailed(f"{self.path}: HTTP {response.status}: {head.strip()}")
            async for chunk in response.content.iter_any():
                now = self.clock()
                before = meter.timer.frames
                meter.feed(chunk, now)
                if meter.error is not None:
                    raise StreamFailed(f"{self.path}: error frame: {meter.error}")
                if meter.timer.frames > before:
                    self.arrivals.append((now, meter.timer.frames, meter.timer.tokens))
                    self.first_token.set()
                if meter.done:
                    return

    @property
    def ttft(self) -> float | None:
        if not self.arrivals or self.sent_at is None:
            return None
        return self.arrivals[0][0] - self.sent_at

    @property
    def tokens_from(self) -> TokensFrom:
        return "frames" if self.meter is None else self.meter.timer.tokens_from

    @property
    def tokens(self) -> int | None:
        """The tokens generated, as the stream counted them (None where it never did)."""
        return None if self.meter is None else self.meter.timer.tokens

    def gaps(self, since: float = float("-inf"), until: float = float("inf")) -> list[float]:
        """Gaps between token frames that ended within [since, until]."""
        return [b[0] - a[0] for a, b in zip(self.arrivals, self.arrivals[1:], strict=False)
                if since <= b[0] <= until]

    def tokens_per_second(self, since: float, until: float) -> float | None:
        """Tokens that arrived within [since, until] over its length; None unless the
        stream counted every frame (a frame may carry several tokens)."""
        if self.tokens_from != "continuous_usage":
            return None
        return self._rate(since, until, 2)

    def frames_per_second(self, since: float, until: float) -> float | None:
        """Token-bearing frames that arrived within [since, until] over its length."""
        return self._rate(since, until, 1)

    def _rate(self, since: float, until: float, column: int) -> float | None:
        if until <= since:
            return None
        inside = [arrival[column] for arrival in self.arrivals if since <= arrival[0] <= until]
        before = [arrival[column] for arrival in self.arrivals if arrival[0] < since]
        if not inside:
            return 0.0
        return (inside[-1] - (before[-1] if before else 0)) / (until - since)


async def close_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel every stream's task and wait for it to end: closing the streams, on any
    failure or Ctrl-C, is what makes the engine abort the generations."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, StreamFailed, aiohttp.ClientError):
            await task


def percentile(values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]
