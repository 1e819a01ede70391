"""What counts as decode progress, and as requests in flight, on the engine at hand.

Chosen by feature (`evidence.py`; docs/stall-tracker.md#signals-by-feature), from
what the release wheels show (`pip download sglang==X --no-deps`, unzipped;
docs/facts/sglang.md):

- `cuda_graph_passes_total{mode=decode_*}` (0.5.7 on) moves once per decode batch,
  speculative or not, and only on the decode result path: mixed batches
  (`--enable-mixed-chunk`) go through the prefill path and leave it still.
- The tokenizer's inter-token-latency histogram (`inter_token_latency_seconds`, in
  every release read) counts each token a request's output event carries
  (`observe_inter_token_latency`), mixed batch or not. A streaming request has an
  event every step; a non-streaming one when its output length lands on a multiple
  of 50 (`len(output_ids) % 50 == 0`, 0.5.5 `scheduler_output_processor_mixin.py`,
  0.5.23 `output_streamer.py`) and at its end. A speculative step adds several
  tokens and mostly jumps over the multiple, so that gap has no bound.
- `gen_throughput` is written with a fresh measured value only by the decode log,
  every `decode_log_interval` decode batches (prefill and idle logs rewrite the old
  value, or 0 when idle): a change is a decode log, the one decode signal of 0.5.5
  and 0.5.6 that sees non-streaming requests.
- `num_running_reqs` is refreshed on a prefill batch, on every decode log and, when
  idle, only every 30 s until 0.5.16 (`gauge_stale`). A decode log runs after the
  step's finished requests were streamed, and counts them (`len(batch.reqs)`).
- `http_requests_active{endpoint}` (livesum, 0.5.8 on) counts a streamed request
  until its stream ends from 0.5.10; before, its middleware stops counting at the
  response headers.
- `num_requests_total` counts finished requests (tokenizer, every release read).

Decode progress is any of the plan's counters moving. Requests are in flight when
the running gauge says so and the HTTP in-flight count agrees, or, without a count
to trust, the gauge less the requests seen finishing (`progress.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.daemon.engines.stall.evidence import Evidence, Release

#: The oldest release whose signals were read; older releases name unknown behaviour.
OLDEST_READ: Release = (0, 5, 5)
#: From this release http_requests_active counts a stream until it ends.
HTTP_COUNTS_STREAMS: Release = (0, 5, 10)
#: The running gauge goes stale for up to 30 s when idle up to this release.
LAST_STALE_GAUGE: Release = (0, 5, 15)


@dataclass(frozen=True)
class Counters:
    """The few upstream values the tracker reads; None: the family does not exist (yet)."""

    #: cuda_graph_passes_total{mode=decode_*}, one value per DP group summed.
    decode_passes: float | None = None
    #: Tokens streamed to clients: inter_token_latency_seconds _count.
    streamed_tokens: float | None = None
    #: num_running_reqs (max over TP ranks, summed over DP ranks).
    running: float | None = None
    #: http_requests_active on the generation endpoints.
    http_active: float | None = None
    #: num_requests_total: requests the tokenizer saw finish.
    finished: float | None = None
    #: gen_throughput: a new value at each decode log.
    gen_throughput: float | None = None
    #: vLLM's generation_tokens_total: tokens generated, counted at each engine step.
    generated_tokens: float | None = None
    #: vLLM's time_to_first_token_seconds _count: requests that got a first token.
    first_tokens: float | None = None
    #: The families of evidence.FAMILY_FLOORS and the above that have samples.
    families: frozenset[str] = frozenset()


@dataclass(frozen=True)
class SignalPlan:
    """One way of reading progress and requests in flight; its fields are the labels
    of rig_engine_decode_stall_plan_info."""

    name: str
    progress: str
    in_flight: str

    @property
    def decode_passes(self) -> bool:
        return "decode_passes" in self.progress

    @property
    def decode_logs(self) -> bool:
        return "decode_logs" in self.progress

    @property
    def http_in_flight(self) -> bool:
        return self.in_flight == "running_while_http_active"


HTTP_IN_FLIGHT = SignalPlan("http_in_flight", "decode_passes+streamed_tokens",
                            "running_while_http_active")
FINISHED_GUARD = SignalPlan("finished_guard", "decode_passes+streamed_tokens",
                            "running_less_finished")
STREAMED_TOKENS = SignalPlan("streamed_tokens", "streamed_tokens+decode_logs",
                             "running_less_finished")

#: SGLang's forward-pass feed (feed_watch.py): the feed for progress, the counter
#: plan's judgement for requests in flight.
FEED_PLAN = "forward_pass_feed"


def feed_plan(counter_plan: SignalPlan) -> SignalPlan:
    return SignalPlan(FEED_PLAN, "decode_bearing_passes", counter_plan.in_flight)


@dataclass(frozen=True)
class Choice:
    plan: SignalPlan | None
    #: Why no plan (the log line), or what the plan cannot see.
    note: str
    #: No evidence to come can change a refusal (a release older than those read).
    final: bool = False


def choose(evidence: Evidence) -> Choice:
    exact = evidence.clue.exact
    if exact is not None and exact < OLDEST_READ:
        return Choice(None, f"SGLang {evidence.version} is older than 0.5.5, the oldest "
                            "release whose signals were read", final=True)
    if evidence.floor() is None and "num_running_reqs" not in evidence.families:
        return Choice(None, "no release named and no num_running_reqs yet (the scheduler "
                            "writes it at its first batch, or within 30 s when idle)")
    if not evidence.has("cuda_graph_passes_total"):
        plan = STREAMED_TOKENS
    elif (evidence.has("http_requests_active") and not evidence.http_shortfall
          and (exact is None or exact >= HTTP_COUNTS_STREAMS)):
        plan = HTTP_IN_FLIGHT
    else:
        plan = FINISHED_GUARD
    return Choice(plan, _blind_spots(plan, evidence))


def _blind_spots(plan: SignalPlan, evidence: Evidence) -> str:
    flags = evidence.flags
    batches = flags.decode_log_interval or 40
    spots = []
    if plan.decode_logs:
        jumps = ("; speculative steps jump over most multiples of 50"
                 if flags.speculative else "")
        spots.append("a non-streaming request decoding alone moves the streamed tokens only "
                     f"at multiples of 50 tokens{jumps}: the decode logs bound its gaps to "
                     f"{batches} decode batches")
    if plan.decode_passes and flags.mixed_chunk:
        spots.append("mixed-chunk decode of non-streaming requests moves no pass counter "
                     "and reaches the tokenizer every 50 mixed batches")
    if plan.http_in_flight:
        floor = evidence.floor()
        if evidence.clue.exact is None and (floor is None or floor < HTTP_COUNTS_STREAMS):
            spots.append("http_requests_active is taken to count streams to their end "
                         "(0.5.10 on) until tokens flow while it reads 0")
    else:
        spots.append("a stall that begins as a request finishes within the poll in which "
                     "the running gauge changes is hidden until the gauge changes again; "
                     "after a start or restart, requests count only once decode has moved")
        exact = evidence.clue.exact
        if exact is None or exact <= LAST_STALE_GAUGE:
            spots.append("the running gauge stays up to 30 s after a burst (0.5.15 and "
                         "before), taken down by the finished count")
    return "; ".join(spots) or "none beyond its bounds"
