"""Decode and latency: where the token gaps come from (docs/design.md#four-views-of-a-token-gap).

The four views of a gap share one time axis with the scheduler's state: the
stream tap (every real request), the probe (one synthetic client), the stall
tracker (continuous, no GPU work) and the engine's own histograms (p50/p99 over
many tokens; they hide stalls).
"""

from __future__ import annotations

from grafanalib.core import Dashboard

from dashboards.panels import (
    TOKENS,
    TOKENS_PER_SECOND,
    UIDS,
    Section,
    falling_steps,
    heatmap,
    on_off,
    over_interval,
    rate,
    rig_dashboard,
    sel,
    state_timeline,
    steps,
    target,
    targets,
    timeseries,
)
from exporter.thresholds import SCHEDULER_CPU_SHORT_RATIO, Thresholds


def worst(expr: str) -> str:
    """The longest of each graph point's interval."""
    return over_interval("max", expr)


def _quantiles(metric: str, what: str) -> list[tuple[str, str]]:
    return [
        (f"histogram_quantile({q}, sum by (job, instance, rig, engine, le) "
         f"({rate(metric + '_bucket')}))", f"{{{{engine}}}} {what} p{round(q * 100)}")
        for q in (0.5, 0.99)
    ]


def build(t: Thresholds) -> Dashboard:
    gap_steps = steps(
        ("orange", t.decode_stutter_seconds), ("red", t.decode_stall_critical_seconds)
    )
    # One column of full-width panels: every gap view, the stall tracker, decode
    # batches and the queue line up on the same time axis.
    gaps = Section("Token gaps, decode and queue on one time axis", [
        timeseries(
            "Longest token gap: probe, stream tap, stall tracker",
            "The longest wait for a token, as each view sees it: the stream probe's longest"
            " gap between frames (last probe), the stream tap's longest gap of any real"
            f" request in the last {t.decode_stall_window_seconds} s (a gap still open counts;"
            " absent unless the tap is on), and the stall tracker's longest decode stall in"
            f" the last {t.decode_stall_window_seconds} s, at least and at most (it is known"
            " only between polls; the alerts judge the middle). Dashed"
            f" lines: {t.decode_stutter_seconds:g} s (stutter) and"
            f" {t.decode_stall_critical_seconds:g} s (starvation).",
            "s",
            targets(
                (worst(sel("rig_probe_max_token_gap_seconds")), "{{engine}} probe"),
                (worst(sel("rig_stream_max_token_gap_seconds")), "{{engine}} stream tap"),
                (f"({worst(sel('rig_engine_decode_stall_max_seconds'))}"
                 f" + {worst(sel('rig_engine_decode_stall_max_upper_seconds'))}) / 2",
                 "{{engine}} stall tracker"),
                (worst(sel("rig_engine_decode_stall_max_upper_seconds")),
                 "{{engine}} stall tracker, at most"),
            ),
            thresholds=gap_steps, judged=("A", "B", "C"),
            alerts=("RigDecodeStarvation", "RigDecodeStuttering"),
            w=24,
        ),
        heatmap(
            "Probe token gaps",
            "Every gap between stream frames of the probe's requests, by bucket"
            " (0.01 … 120 s). Mass in the 2-10 s buckets is stutter; above 10 s, starvation.",
            target(f"sum by (le) ({rate('rig_probe_token_gap_seconds_bucket', fn='increase')})",
                   "{{le}}", fmt="heatmap"),
            alerts=("RigDecodeStuttering",),
            w=12, h=6,
        ),
        heatmap(
            "Stream tap token gaps",
            "Every gap between content frames of every real request through the stream tap,"
            " by bucket (10 ms … 120 s). Empty unless the tap is on and agents use it.",
            target(f"sum by (le) ({rate('rig_stream_token_gap_seconds_bucket', fn='increase')})",
                   "{{le}}", fmt="heatmap"),
            w=12, h=6,
        ),
        timeseries(
            "Stall tracker: stall under way and its resolution",
            "The longest decode stall under way in each interval (0 while decoding), the"
            " tracker's poll"
            " interval in force (its resolution, set by the 2 % engine-cost budget, and its"
            " floor while decode stands still), and its longest blind span: the most time"
            " between two of its readings (slow answers, or an exporter that got no CPU)."
            " A stall shorter than the blind span can pass unseen. Dashed lines: the stall"
            " under way only.",
            "s",
            targets(
                (worst(sel("rig_engine_decode_stall_seconds")), "{{engine}} stall under way"),
                (worst(sel("rig_engine_decode_stall_resolution_seconds")),
                 "{{engine}} resolution"),
                (worst(sel("rig_engine_decode_stall_max_blind_seconds")),
                 "{{engine}} longest blind span"),
            ),
            thresholds=gap_steps,
            alerts=("RigDecodeStarvation",),
            w=12, h=6,
        ),
        timeseries(
            "Share of time decode stood still",
            "The fraction of wall time the stall tracker counted as stalled: decode made no"
            " progress while requests were running.",
            "percentunit",
            targets((rate("rig_engine_decode_stalled_seconds_total"), "{{engine}}")),
            min_value=0, w=12, h=6,
        ),
        timeseries(
            "Decode batches/s",
            "Decode forward passes per second (SGLang's cuda_graph_passes_total, decode"
            " modes). Zero while requests run is a stall; a prefill holding the GPU shows"
            " here as a hole.",
            "ops",
            targets((rate("rig_engine_decode_batches_total"), "{{engine}}")),
            alerts=("RigDecodeStarvation",),
            w=12, h=6,
        ),
        timeseries(
            "Running and queued requests",
            "Requests in the running batch and waiting in the queue. Queued while one request"
            " keeps running is head-of-line blocking; queued with nothing running and no"
            " decode batch is a wedged scheduler. Streams through the tap are the agents'"
            " requests in flight as they see them (when the tap is on).",
            "short",
            targets(
                (sel("rig_engine_running_requests"), "{{engine}} running"),
                (sel("rig_engine_queued_requests"), "{{engine}} queued"),
                (sel("rig_stream_active"), "{{engine}} streams through the tap"),
            ),
            alerts=("RigQueueHeadOfLine", "RigDecodeStarvation"),
            w=12, h=6,
        ),
    ])
    by_engine = "sum by (job, instance, rig, engine)"
    busy = (f"({by_engine} ({rate('rig_engine_scheduler_stage_seconds_total')})"
            f" - {by_engine} ({rate('rig_engine_scheduler_idle_seconds_total')}))")
    scheduler = Section("Scheduler", [
        timeseries(
            "Scheduler CPU per busy second",
            "CPU-seconds SGLang's schedulers got per second they had work (their CPU over"
            " their loop time less their idle time, every TP rank's scheduler added on both"
            " sides; SGLang 0.5.23 on). A busy scheduler runs its loop on one thread: about"
            f" 1 is a core of its own; under {SCHEDULER_CPU_SHORT_RATIO:g} (dashed) it waited"
            " as long as it worked, for a CPU or asleep on the device. The counters move at"
            " most once a second and not through one long forward pass.",
            "short",
            targets((f"{by_engine} ({rate('rig_engine_scheduler_cpu_seconds_total')})"
                     f" / ({busy} > 0)", "{{engine}} CPU per busy second")),
            thresholds=falling_steps(("orange", SCHEDULER_CPU_SHORT_RATIO)),
            min_value=0, w=8, h=6,
        ),
        timeseries(
            "Scheduler loop time by stage",
            "Where the schedulers' loop time goes, per second, by SGLang's exclusive stage"
            " (run_batch, process_batch_result, get_next_batch_to_run, ..., idle), every TP"
            " rank's scheduler added: 2 s a second on TP 2.",
            "short",
            targets((f"sum by (job, instance, rig, engine, stage) "
                     f"({rate('rig_engine_scheduler_stage_seconds_total')})",
                     "{{engine}} {{stage}}")),
            stack=True, min_value=0, w=8, h=6,
        ),
        timeseries(
            "Forward passes by kind (SGLang's per-pass feed)",
            "Forward passes per second as the scheduler's feed reports them, by kind"
            " (prefill, decode, mixed, idle heartbeats), and the longest run of prefill-only"
            f" passes in the last {t.decode_stall_window_seconds} s: decode held back at least"
            " that long. Absent unless the stall tracker reads the feed.",
            "short",
            targets(
                (f"sum by (job, instance, rig, engine, pass_kind) "
                 f"({rate('rig_engine_decode_stall_feed_passes_total')})",
                 "{{engine}} {{pass_kind}} passes/s"),
                (worst(sel("rig_engine_decode_stall_prefill_run_max_seconds")),
                 "{{engine}} longest prefill-only run (s)"),
            ),
            min_value=0, w=8, h=6,
        ),
    ])
    engine = Section("Engine", [
        timeseries(
            "Tokens/s: generated, probe decode speed",
            "Generated tokens per second over all requests, the decode speed of the last"
            " probe (its tokens over its decode time), and tokens per second streamed"
            " through the tap, as the streams report them (an OpenAI stream without"
            " include_usage reports none).",
            TOKENS_PER_SECOND,
            targets(
                (rate("rig_engine_generation_tokens_total"), "{{engine}} generated"),
                (sel("rig_probe_decode_tokens_per_second"), "{{engine}} probe decode"),
                (rate("rig_stream_generated_tokens_total"), "{{engine}} through the tap"),
            ),
            w=8,
        ),
        state_timeline(
            "Engine reachable, probe served",
            "Whether the exporter could read each engine's /metrics (engine/<name>), its"
            " probe ran (probe/<name>) and its stream tap is serving (tap/<name>), and whether"
            " the last stream probe finished in time with tokens. A reachable engine whose"
            " probe fails is wedged.",
            targets(
                (sel("rig_source_up", 'source=~"(engine|probe|tap)/.+"'), "{{source}} up"),
                (sel("rig_probe_success"), "{{engine}} probe served"),
            ),
            mappings=on_off("down", "up", on_color="green", off_color="red"),
            alerts=("RigEngineDown", "RigEngineWedged"),
            w=8,
        ),
        timeseries(
            "Stream tap requests by outcome",
            "Streaming generation requests through the tap per second, by outcome: ok,"
            " error (the engine refused, failed or broke mid-stream), client_closed (the"
            " agent hung up, before the headers or after), untimed (a stream the tap cannot"
            " read, such as gzip: relayed but not timed).",
            "reqps",
            targets((f"sum by (job, instance, rig, engine, outcome) "
                     f"({rate('rig_stream_requests_total')})", "{{engine}} {{outcome}}")),
            w=8,
        ),
    ])
    speculative = Section("Speculative decoding", [
        timeseries(
            "Speculative decoding: tokens per step",
            "Tokens accepted per decode step as the engine counts them (accepted drafts and"
            " the bonus token, over its last decode log interval; it keeps the last value"
            " while idle), and tokens per frame through the stream tap, where the streams"
            " report their usage (a frame is one step's output for one request). Absent"
            " without speculative decoding. Dashed line: the"
            f" {t.spec_accept_length:g} warning, which counts only while decoding.",
            "short",
            targets(
                (sel("rig_engine_spec_accept_length"), "{{engine}} accepted per step"),
                (f"{rate('rig_stream_generated_tokens_total')}"
                 f" / ({rate('rig_stream_frames_total')} > 0)",
                 "{{engine}} tokens per frame through the tap"),
            ),
            thresholds=falling_steps(("orange", t.spec_accept_length)),
            alerts=("RigSpecDecodeAcceptanceLow",),
            min_value=0,
        ),
        timeseries(
            "Speculative decoding: drafts accepted",
            "The share of draft tokens the target model accepted, over the engine's last"
            " decode log interval. Absent without speculative decoding.",
            "percentunit",
            targets((sel("rig_engine_spec_accept_ratio"), "{{engine}} drafts accepted")),
            min_value=0, max_value=1,
        ),
    ])
    # llama.cpp's own view (docs/facts/llamacpp.md#slots): absent on other engines.
    llamacpp = Section("llama.cpp slots", [
        timeseries(
            "llama.cpp: tokens per slot",
            "Each slot's request, its prompt and what it has generated (0 while idle), and"
            " each slot's context, the most one request may have (with -kvu every slot"
            " reports the whole shared cache). From /slots; absent on other engines or"
            " without --slots.",
            TOKENS,
            targets(
                (sel("rig_engine_slot_request_tokens"), "{{engine}} slot {{slot}}"),
                (f"max by (job, instance, rig, engine) "
                 f"({sel('rig_engine_slot_context_tokens')})", "{{engine}} slot context"),
            ),
            min_value=0, w=12, h=6,
        ),
        timeseries(
            "llama.cpp: forward passes/s and slots processing",
            "llama_decode() calls per second, a prompt's chunks included (so they keep going"
            " through the prefill that holds decode back: the stall tracker reads each"
            " slot's decoded tokens instead), and the slots processing a request.",
            "short",
            targets(
                (rate("rig_engine_decode_calls_total"), "{{engine}} forward passes/s"),
                (f"sum by (job, instance, rig, engine) "
                 f"({sel('rig_engine_slot_processing')})", "{{engine}} slots processing"),
            ),
            alerts=("RigEngineWedged",),
            min_value=0, w=12, h=6,
        ),
    ])
    latency = Section("Latency", [
        timeseries(
            "Time to first token",
            "TTFT p50 and p99 from the engine's histogram, the stream tap's p99 over real"
            " requests (when on), and the last probe's TTFT.",
            "s",
            targets(
                *_quantiles("rig_engine_time_to_first_token_seconds", "engine"),
                (f"histogram_quantile(0.99, sum by (job, instance, rig, engine, le) "
                 f"({rate('rig_stream_ttft_seconds_bucket')}))", "{{engine}} stream tap p99"),
                (sel("rig_probe_ttft_seconds"), "{{engine}} probe"),
            ),
        ),
        timeseries(
            "Inter-token latency (hides stalls)",
            "ITL p50 and p99 from the engine's histogram. It hides stalls: a 47 s gap is"
            " spread over the tokens that follow it, so p99 barely moves. Read the gap panels"
            " above for stalls; use this for steady decode speed only.",
            "s",
            targets(*_quantiles("rig_engine_inter_token_latency_seconds", "ITL")),
        ),
    ])
    return rig_dashboard(
        "Rig: decode and latency",
        UIDS["decode"],
        "Token gaps from the stream tap, the probe and the stall tracker, on one time axis"
        " with decode batches and the scheduler's queue; TTFT and ITL quantiles.",
        [latency, gaps, engine, speculative, llamacpp, scheduler],
    )


dashboard = build(Thresholds())
