"""One streamed request from the client's side: when each token arrived.

The frames are read by `exporter.streams.StreamMeter`, the code the probe and the
tap use. Cancelling the task that runs `Stream.run` closes the connection, which
is how SGLang and vLLM learn to abort the generation.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable

import aiohttp

from exporter.streams import StreamMeter


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
        #: (arrival time, tokens so far) for every frame that carried tokens.
        self.arrivals: list[tuple[float, int]] = []
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
                    if meter.timer.tokens is None:  # a frame may carry several tokens
                        raise StreamFailed(f"{self.path}: the stream does not count its "
                                           "tokens (stream_options.continuous_usage_stats)")
                    self.arrivals.append((now, meter.timer.tokens))
                    self.first_token.set()
                if meter.done:
                    return

    @property
    def ttft(self) -> float | None:
        if not self.arrivals or self.sent_at is None:
            return None
        return self.arrivals[0][0] - self.sent_at

    def gaps(self, since: float = float("-inf"), until: float = float("inf")) -> list[float]:
        """Gaps between token frames that ended within [since, until]."""
        return [b[0] - a[0] for a, b in zip(self.arrivals, self.arrivals[1:], strict=False)
                if since <= b[0] <= until]

    def tokens_per_second(self, since: float, until: float) -> float | None:
        """Tokens that arrived within [since, until] over its length."""
        inside = [tokens for at, tokens in self.arrivals if since <= at <= until]
        before = [tokens for at, tokens in self.arrivals if at < since]
        if until <= since or not inside:
            return 0.0 if until > since else None
        return (inside[-1] - (before[-1] if before else 0)) / (until - since)


def percentile(values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]
