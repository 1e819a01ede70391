"""Engine alerts: decode starvation and stutter, engine down or wedged, queue, KV pool,
speculative decoding's acceptance."""

from __future__ import annotations

from alerts.rules.agents import starvation_names
from alerts.rules.common import (
    COUNT,
    ENGINE_SUBJECT,
    STALL_LENGTH,
    Alert,
    dur,
    num,
    pct,
)
from exporter.schema import ENGINE_ON_TARGET, ENGINE_SERIES, ENGINE_SOURCE_UP, engine_read_ago
from exporter.thresholds import Thresholds


def engine_alerts(t: Thresholds) -> list[Alert]:
    stall = num(t.decode_stall_critical_seconds)
    wedged = dur(t.engine_wedged_seconds)
    stutter_lo = num(t.decode_stutter_seconds)
    stutter_window = dur(t.decode_stutter_window_seconds)
    # The alert's window: the window of the maxima the exporter reports, plus the
    # hold. The value is the longest stall in it, not the one read when it fires.
    longest = dur(t.decode_starvation_for_seconds + t.decode_stall_window_seconds)
    # Both maxima cover the stall window, so a subquery stepping by it counts each
    # window with a stall once.
    step = dur(t.decode_stall_window_seconds)
    kv_for = dur(t.kv_saturated_for_seconds)
    # The stall tracker knows a stall only between polls: judged by the middle of its
    # bounds (docs/stall-tracker.md#honest-bounds).
    tracked = ("(rig_engine_decode_stall_max_seconds"
               " + rig_engine_decode_stall_max_upper_seconds) / 2")
    tracked_longest = (f"(max_over_time(rig_engine_decode_stall_max_seconds[{longest}])"
                       f" + max_over_time(rig_engine_decode_stall_max_upper_seconds[{longest}]))"
                       " / 2")
    held = (f", held {dur(t.decode_starvation_for_seconds)}"
            if t.decode_starvation_for_seconds else "")
    spec_low = num(t.spec_accept_length)
    spec_for = dur(t.spec_accept_low_for_seconds)
    rate_window = dur(t.rate_window_seconds)
    return [
        Alert(
            "RigDecodeStarvation",
            "critical",
            # The tap, the stall tracker (4 Hz) and the probe see single long gaps;
            # the ITL histogram spreads a gap over the tokens after it
            # (docs/facts/sglang.md#inter-token-latency-histogram). The tap comes first:
            # where it fires, its value (what the agents waited) is the one reported.
            f"""
max_over_time(rig_stream_max_token_gap_seconds[{longest}])
and rig_stream_max_token_gap_seconds >= {stall}
or on({ENGINE_SERIES})
{tracked_longest}
and {tracked} >= {stall}
or on({ENGINE_SERIES})
max_over_time(rig_probe_max_token_gap_seconds[{longest}])
and rig_probe_max_token_gap_seconds >= {stall}
""",
            t.decode_starvation_for_seconds,
            f"Running requests got no decoded token for {stall}s or more{held}.",
            ENGINE_SUBJECT + " went up to {{ $value | humanizeDuration }} without decoding a"
            f" token (longest stall in the last {longest}, alert at {stall}s;"
            " stream tap, stall tracker or stream probe)." + starvation_names(t),
            "Is a long prompt prefilling? rig_engine_queued_requests and the engine log's"
            " prefill lines.",
            value_kind=STALL_LENGTH,
        ),
        Alert(
            "RigDecodeStuttering",
            "warning",
            # The tap's gap, where it has one, is preferred; `max without ()` drops
            # the metric name (and only it: target labels such as `rig` stay) so the
            # minutes of both count as one series.
            f"""
count_over_time(
  (
    max without () (
      rig_stream_max_token_gap_seconds >= {stutter_lo} < {stall}
      or on({ENGINE_SERIES})
      {tracked} >= {stutter_lo} < {stall}
    )
  )[{stutter_window}:{step}]
) >= {t.decode_stutter_count}
""",
            t.decode_stutter_for_seconds,
            f"Decode paused for {stutter_lo}-{stall}s in {t.decode_stutter_count} or more"
            f" separate minutes of the last {stutter_window}.",
            ENGINE_SUBJECT
            + f" paused decode for {stutter_lo}-{stall}s in {{{{ $value }}}} separate minutes"
            f" of the last {stutter_window} (alert at {t.decode_stutter_count}).",
            "The stall tracker's saw-tooth next to the prefill chunks: chunked-prefill-size"
            " and mixed chunk.",
        ),
        Alert(
            "RigEngineDown",
            "critical",
            f"""
{ENGINE_SOURCE_UP} == 0
""",
            t.engine_down_for_seconds,
            "The exporter has not been able to read the engine's /metrics for"
            f" {dur(t.engine_down_for_seconds)}.",
            "The exporter on {{ $labels.instance }} cannot read engine {{ $labels.engine }}"
            " ({{ $labels.source }}).",
            "Is the engine process alive? Its service status and log (OOM, HIP error).",
        ),
        # Two signals of one fault, a wedged engine, made exclusive so that it
        # pages once: where a stream probe runs, its verdict decides.
        Alert(
            "RigEngineWedged",
            "critical",
            f"""
rig_probe_success == 0
and on({ENGINE_ON_TARGET})
{ENGINE_SOURCE_UP} == 1
""",
            t.engine_wedged_seconds,
            f"The engine answers /metrics, yet its stream probe has failed for {wedged}.",
            ENGINE_SUBJECT + " serves /metrics, yet every stream probe for " + wedged
            + " failed.",
            "Does rigctl probe get a first token? If not, py-spy dump the scheduler ranks.",
            signal="probe",
        ),
        Alert(
            "RigEngineWedged",
            "critical",
            # vllm#46811 saw running read 0 during a real hang, so "running and
            # no decode" alone misses it. llama.cpp has no decode-batch counter; its
            # forward passes (rig_engine_decode_calls_total) stand still in a wedge too.
            # Held longer than a legitimate cold prefill, which also shows running = 0
            # (243.81 s at 192K, docs/facts/rig.md#latency-and-throughput).
            f"""
rig_engine_queued_requests > 0
and on({ENGINE_SERIES})
rig_engine_running_requests == 0
and on({ENGINE_SERIES})
(increase(rig_engine_decode_batches_total[{dur(t.engine_wedged_window_seconds)}])
 or increase(rig_engine_decode_calls_total[{dur(t.engine_wedged_window_seconds)}]))
== 0
unless on({ENGINE_ON_TARGET})
rig_probe_success
""",
            t.engine_wedged_seconds,
            f"Requests have been queued for {wedged} with none running and no decode batch.",
            ENGINE_SUBJECT
            + " has had {{ $value }} queued requests for "
            + wedged
            + " with none running and no decode batch: the scheduler is wedged.",
            "Does rigctl probe get a first token? If not, py-spy dump the scheduler ranks.",
            signal="queue",
        ),
        Alert(
            "RigQueueHeadOfLine",
            "warning",
            f"""
rig_engine_queued_requests > 0
and on({ENGINE_SERIES})
rig_engine_running_requests > 0
""",
            t.queue_wait_seconds,
            f"Requests have stayed queued for {dur(t.queue_wait_seconds)} while others run.",
            ENGINE_SUBJECT
            + " has kept {{ $value }} requests queued for "
            + dur(t.queue_wait_seconds)
            + " while others run.",
            "KV usage next to the running requests: a few long contexts holding the pool.",
        ),
        Alert(
            "RigKVPoolSaturated",
            "warning",
            f"rig_engine_kv_usage_ratio >= {num(t.kv_usage_ratio)}",
            t.kv_saturated_for_seconds,
            f"The KV cache pool has been {pct(t.kv_usage_ratio)} full or more for {kv_for}.",
            ENGINE_SUBJECT
            + " has used {{ $value | humanizePercentage }} of its KV pool for "
            + kv_for
            + f" (alert at {pct(t.kv_usage_ratio)}).",
            "How many long contexts run at once: rig_engine_running_requests and their sizes.",
            signal="usage",
        ),
        Alert(
            "RigKVPoolSaturated",
            "warning",
            # SGLang creates the counter at its first retraction, which
            # increase() never counts (it needs two samples) and extrapolates
            # the rest: the difference to the value a window ago is the exact
            # count. A counter absent a window ago counts whole only if the engine
            # was read then: otherwise (the start of a history, an outage or a
            # restart of the exporter) its first appearance says nothing of when
            # its retractions were. increase() covers an engine restart (reset).
            f"""
rig_engine_retracted_requests_total
- rig_engine_retracted_requests_total offset {kv_for}
> 0
or
(
  rig_engine_retracted_requests_total
  unless rig_engine_retracted_requests_total offset {kv_for}
) > 0
and on({ENGINE_ON_TARGET})
{engine_read_ago(kv_for)} == 1
or
increase(rig_engine_retracted_requests_total[{kv_for}]) > 0
""",
            0,
            f"Running requests were retracted for lack of KV space in the last {kv_for}.",
            ENGINE_SUBJECT + " retracted " + COUNT + " running requests in the last "
            + kv_for + " for lack of KV space.",
            "How many long contexts run at once: rig_engine_running_requests and their sizes.",
            signal="retractions",
        ),
        Alert(
            "RigSpecDecodeAcceptanceLow",
            "warning",
            # The engine's gauge keeps its last decode log interval's value while idle,
            # so it counts only while decode batches run (rig_engine_decode_batches_total).
            # llama.cpp counts instead (docs/facts/llamacpp.md#metrics): accepted drafts
            # per verification step, plus the bonus token; no step, no ratio (NaN).
            f"""
(
  rig_engine_spec_accept_length < {spec_low}
  and on({ENGINE_SERIES})
  increase(rig_engine_decode_batches_total[{rate_window}]) > 0
)
or
(
  rate(rig_engine_spec_accepted_tokens_total[{rate_window}])
  / rate(rig_engine_spec_verify_steps_total[{rate_window}]) + 1
) < {spec_low}
""",
            t.spec_accept_low_for_seconds,
            f"Speculative decoding has accepted fewer than {spec_low} tokens a decode step"
            f" for {spec_for} while decoding.",
            ENGINE_SUBJECT
            + ' accepts {{ $value | printf "%.2f" }} tokens a decode step with speculative'
            f" decoding (alert below {spec_low}, held {spec_for}).",
            "The engine log's `accept len` lines; the agents' sampling temperature; draft (MTP)"
            " weights matching the model.",
        ),
    ]
