"""The stall tracker on llama.cpp: decode progress and requests in flight from `/slots`.

llama.cpp's /metrics cannot tell decode progress (docs/facts/llamacpp.md#metrics):
`tokens_predicted_total` moves only when a request finishes, and `n_decode_total`
moves for every batch, prompt chunks included, so it keeps moving through the very
prefill that stops decode. `/slots` (`--slots`) gives each slot's `n_decoded`, its
request's generated tokens so far, live, and answers between two batches: within a
batch's time during a long prefill (docs/facts/llamacpp.md#slots).

- Decode progress: the tokens every slot's task has decoded, added up as they grow.
  A slot that takes a new task starts its count again; the increments are kept per
  (slot, task), so the sum only grows and a new request never reads as a restart.
- In flight: slots processing a request that has decoded at least one token. A
  slot still reading its prompt waits for its first token (its TTFT), not decode.

This module holds the reader and the plan; the state machine and the poll loop are
the tracker's (`tracker.py`), unchanged: each reading carries when /slots was asked
for and answered, and the bounds are drawn from both
(docs/stall-tracker.md#honest-bounds).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from exporter.daemon.engines.slots import Slot, parse_slots
from exporter.daemon.engines.stall.plans import Choice, SignalPlan
from exporter.daemon.engines.stall.progress import Progress
from exporter.daemon.engines.stall.readers import CounterReading, MetricsBody, TrackerBlind
from exporter.daemon.snapshot import SourceError

SLOTS_PLAN = SignalPlan("llamacpp_slots", "slot_n_decoded", "slots_decoding")


class SlotsReader:
    """Reads `/slots` at the poll interval: a task on llama-server's queue, served
    between batches, far cheaper than a /metrics render (and a /metrics request would
    reset the server's throughput gauges under other scrapers' feet)."""

    how = "/slots (per-slot n_decoded)"
    where = "the engine's /slots"

    def __init__(self, body: MetricsBody, interval_seconds: float) -> None:
        self.body = body
        self.interval_seconds = interval_seconds

    async def read(self) -> CounterReading[list[Slot]]:
        try:
            fetched = await self.body.fresh()
            slots = parse_slots(fetched.text)
        except SourceError as exc:
            # No slots to read (501 without --slots, garbage, the server gone): the
            # tracker is blind and says so, its stall series absent.
            raise TrackerBlind("no_slots", f"{self.where}: {exc}") from exc
        return CounterReading(slots, fetched.asked_at, fetched.answered_at)

    def resolution_seconds(self, standing_still: bool = False) -> float:
        return self.interval_seconds

    def close(self) -> None:
        pass


class SlotsProgress:
    """Slots to Progress: a decoded count that only grows, and the slots decoding."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[int | None, int]] = {}  # slot -> (task, n_decoded)
        self._decoded = 0.0

    def progress(self, slots: list[Slot]) -> Progress:
        for slot in slots:
            task, decoded = self._seen.get(slot.id, (None, 0))
            if slot.task != task:
                decoded = 0  # a new task: its count starts again
            if slot.decoded_tokens > decoded:
                self._decoded += slot.decoded_tokens - decoded
            self._seen[slot.id] = (slot.task, slot.decoded_tokens)
        in_flight = sum(1 for s in slots if s.processing and s.decoded_tokens > 0)
        return Progress(self._decoded, float(in_flight))


class SlotsPlanner:
    """The planner's part for llama.cpp: one plan, known from the start."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.choice = Choice(SLOTS_PLAN, "a slot's first token is its TTFT, not decode: "
                                         "a stall while no slot has decoded is not seen")
        self._view = SlotsProgress()

    @property
    def plan(self) -> SignalPlan:
        return SLOTS_PLAN

    def progress(self, slots: list[Slot], now: float) -> Progress:
        return self._view.progress(slots)


def slots_body(fetch: Callable[[], Awaitable[str]]) -> MetricsBody:
    """The /slots body, shared by the tracker and the scrapes as /metrics' is."""
    return MetricsBody(fetch)
