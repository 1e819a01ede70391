"""SGLang's forward-pass feed: one ZMQ subscription to the scheduler's per-pass messages.

What the scheduler sends (SGLang 0.5.23 `srt/observability/forward_pass_metrics.py`,
`_FpmPublisherThread._run`; docs/stall-tracker.md#the-forward-pass-feed): with
`--enable-forward-pass-metrics --forward-pass-metrics-ipc-name ipc://PATH`, the
scheduler of attention-TP rank 0 on the last pipeline stage binds a PUB socket at
`PATH.<dp_rank>` (`scheduler_components/metrics_reporter.py` `_init_fpm`) and sends,
from a publisher thread, one three-part message per forward pass: an empty topic, the
sequence number as 8 bytes big-endian, and the `ForwardPassMetrics` struct encoded by
msgspec's msgpack encoder, which writes a map keyed by field name. While the
scheduler is idle an all-zero heartbeat (`wall_time` 0) comes once a second; while a
pass runs, nothing comes. A message lost (the publisher's queue of 10,000 full, a send
that would block, the subscriber's high-water mark) leaves a gap in the sequence.

This module decodes and receives; the stall judgement is `feed_stalls.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable

import msgspec
import zmq
import zmq.asyncio

from exporter.process.log_limits import Conditions

log = logging.getLogger(__name__)

#: The schema version the fields below were read from (`FPM_VERSION`).
FEED_VERSION = 1
#: The kinds of pass, as `rig_engine_decode_stall_feed_passes_total{pass_kind}` says them.
PASS_KINDS = ("prefill", "decode", "mixed", "idle")


class ScheduledRequests(msgspec.Struct, frozen=True):
    """The requests the pass ran (the wheel's `ScheduledRequestMetrics`; the fields
    the tracker does not use are left to msgspec to skip)."""

    num_prefill_requests: int = 0
    sum_prefill_tokens: int = 0
    num_decode_requests: int = 0


class QueuedRequests(msgspec.Struct, frozen=True):
    num_prefill_requests: int = 0
    num_decode_requests: int = 0


class ForwardPass(msgspec.Struct, frozen=True):
    """One message's payload, by field name: a map, whatever the field order."""

    version: int = 0
    dp_rank: int = 0
    counter_id: int = 0
    #: The pass's device time, first kernel start to last end, in seconds.
    wall_time: float = 0.0
    scheduled_requests: ScheduledRequests = ScheduledRequests()
    queued_requests: QueuedRequests = QueuedRequests()

    @property
    def kind(self) -> str:
        return pass_kind(self.scheduled_requests.num_prefill_requests,
                         self.scheduled_requests.num_decode_requests)

    @property
    def device_seconds(self) -> float:
        """The device time, or 0 where it is not a finite non-negative number: it is
        only ever a lower bound (`feed_stalls.py`), so 0 hides, never invents."""
        wall = self.wall_time
        return wall if math.isfinite(wall) and wall > 0 else 0.0


def pass_kind(prefill_requests: int, decode_requests: int) -> str:
    if prefill_requests > 0:
        return "mixed" if decode_requests > 0 else "prefill"
    return "decode" if decode_requests > 0 else "idle"


_DECODER = msgspec.msgpack.Decoder(ForwardPass)


class FeedError(ValueError):
    """A message that is not the feed's: its frames or payload are wrong."""


def decode_message(frames: list[bytes]) -> tuple[int, ForwardPass]:
    """(sequence number, payload) of one multipart message."""
    if len(frames) != 3:
        raise FeedError(f"{len(frames)} frames, expected 3 (topic, sequence, payload)")
    topic, seq, payload = frames
    if topic or len(seq) != 8:
        raise FeedError("not an empty topic and an 8-byte sequence number")
    try:
        message = _DECODER.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise FeedError(f"payload: {exc}") from None
    if message.version != FEED_VERSION:
        raise FeedError(f"schema version {message.version}, expected {FEED_VERSION}")
    return int.from_bytes(seq, "big"), message


def rank_endpoint(base: str, dp_rank: int = 0) -> str:
    """Where the scheduler of `dp_rank` publishes: the base name given to SGLang
    and `.<dp_rank>` (`_init_fpm`)."""
    return f"{base}.{dp_rank}"


#: Called with (received at, sequence number, pass, drained before): `drained before`
#: is when the socket was last found empty before this message was taken.
OnPass = Callable[[float, int, ForwardPass, float], None]


class FeedSubscriber:
    """One SUB socket on one endpoint; every message goes to `on_pass` as it is taken.

    It notes when it last found the socket empty: a pass whose message had not come
    by then ended after it, as far as the publisher keeps up (its thread sends each
    pass's message as the pass's timing is ready). That time is to a message what the
    ask is to a poll (docs/stall-tracker.md#honest-bounds).
    """

    def __init__(self, endpoint: str, on_pass: OnPass, engine: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoint = endpoint
        self.on_pass = on_pass
        self.clock = clock
        self.received = 0
        self.malformed = 0
        self._context = zmq.asyncio.Context()
        self._socket = self._context.socket(zmq.SUB)
        self._socket.setsockopt(zmq.SUBSCRIBE, b"")
        self._socket.setsockopt(zmq.LINGER, 0)
        # Connecting never fails on a path not bound yet: ZMQ retries until SGLang binds.
        self._socket.connect(endpoint)
        self.drained_at = clock()
        self._conditions = Conditions(log, up="{subject}: messages readable again")
        self._subject = f"engine {engine}: forward-pass feed {endpoint}"

    def pending(self) -> bool:
        """A message is waiting to be taken."""
        return bool(self._socket.getsockopt(zmq.EVENTS) & zmq.POLLIN)

    def note_drained(self) -> float:
        """Nothing is waiting now: say so, and return when the socket was last empty."""
        if not self.pending():
            self.drained_at = self.clock()
        return self.drained_at

    async def run(self) -> None:
        while True:
            if not self.pending():
                self.drained_at = self.clock()
            frames = await self._socket.recv_multipart()
            received = self.clock()
            try:
                seq, message = decode_message(frames)
            except FeedError as exc:
                # Skipped, told once an interval; its number is missing from the
                # sequence, so the next message shows the gap.
                self.malformed += 1
                self._conditions.failed(self._subject, str(exc))
                continue
            self._conditions.ok(self._subject)
            self.received += 1
            self.on_pass(received, seq, message, self.drained_at)

    def close(self) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self._socket.close(linger=0)
            self._context.term()


async def cancel_quietly(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
