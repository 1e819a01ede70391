"""Engine alerts: decode starvation and stutter, engine down or wedged, queue, KV pool."""

from __future__ import annotations

from alerts.rules.common import ENGINE, ENGINE_SOURCE_UP, ENGINE_SUBJECT, Alert, dur, num
from exporter.thresholds import Thresholds


def engine_alerts(t: Thresholds) -> list[Alert]:
    stall = num(t.decode_stall_critical_seconds)
    wedged = dur(t.engine_wedged_seconds)
    stutter_lo = num(t.decode_stutter_seconds)
    stutter_window = dur(t.decode_stutter_window_seconds)
    return [
        Alert(
            "RigDecodeStarvation",
            "critical",
            # The stall tracker (4 Hz) and the probe see single long gaps; the
            # ITL histogram spreads a gap over the tokens after it (sglang-metrics §5).
            f"""
rig_engine_decode_stall_max_seconds >= {stall}
or
rig_probe_max_token_gap_seconds >= {stall}
""",
            t.decode_starvation_for_seconds,
            f"Running requests got no decode progress for {stall}s or more.",
            ENGINE_SUBJECT + " went {{ $value | humanizeDuration }} without decoding a token"
            " (stall tracker or stream probe).",
            signal="stall",
        ),
        Alert(
            "RigDecodeStarvation",
            "critical",
            # The wedge: vllm#46811 saw running read 0 during a real hang, so
            # "running > 0 and no decode" alone misses it. Held for longer than
            # a legitimate cold prefill, which also shows running = 0.
            f"""
rig_engine_queued_requests > 0
and on({ENGINE})
rig_engine_running_requests == 0
and on({ENGINE})
increase(rig_engine_decode_batches_total[1m]) == 0
""",
            t.engine_wedged_seconds,
            f"Running requests got no decode progress for {stall}s or more.",
            ENGINE_SUBJECT
            + " has had {{ $value }} queued requests for "
            + wedged
            + " with none running and no decode batch: the scheduler is wedged.",
            signal="wedged",
        ),
        Alert(
            "RigDecodeStuttering",
            "warning",
            # decode_stall_max_seconds is the longest stall of the last 60 s,
            # so a 1m subquery step counts each minute with a stall once.
            f"""
count_over_time(
  (rig_engine_decode_stall_max_seconds >= {stutter_lo} < {stall})[{stutter_window}:1m]
) >= {t.decode_stutter_count}
""",
            t.decode_stutter_for_seconds,
            f"Decode keeps pausing for {stutter_lo}-{stall}s.",
            ENGINE_SUBJECT
            + " paused decode for "
            + stutter_lo
            + "-"
            + stall
            + "s in {{ $value }} separate minutes of the last "
            + stutter_window
            + ".",
        ),
        Alert(
            "RigEngineDown",
            "critical",
            f"""
{ENGINE_SOURCE_UP} == 0
""",
            t.engine_down_for_seconds,
            "An inference engine is unreachable.",
            "The exporter on {{ $labels.instance }} cannot read engine {{ $labels.name }}"
            " ({{ $labels.source }}).",
        ),
        Alert(
            "RigEngineWedged",
            "critical",
            f"""
rig_probe_success == 0
and on(job, instance, name)
{ENGINE_SOURCE_UP} == 1
""",
            t.engine_wedged_seconds,
            "An engine answers HTTP but cannot serve a request.",
            ENGINE_SUBJECT
            + " serves /metrics, yet its stream probe has failed for "
            + dur(t.engine_wedged_seconds)
            + ".",
        ),
        Alert(
            "RigQueueHeadOfLine",
            "warning",
            f"""
rig_engine_queued_requests > 0
and on({ENGINE})
rig_engine_running_requests > 0
""",
            t.queue_wait_seconds,
            f"Requests have waited in the queue for {dur(t.queue_wait_seconds)}.",
            ENGINE_SUBJECT
            + " has kept {{ $value }} requests queued for "
            + dur(t.queue_wait_seconds)
            + " while others run.",
        ),
        Alert(
            "RigKVPoolSaturated",
            "warning",
            f"rig_engine_kv_usage_ratio >= {num(t.kv_usage_ratio)}",
            t.kv_saturated_for_seconds,
            "The KV cache pool is full or requests are being retracted.",
            ENGINE_SUBJECT
            + " has used {{ $value | humanizePercentage }} of its KV pool for "
            + dur(t.kv_saturated_for_seconds)
            + ".",
            signal="usage",
        ),
        Alert(
            "RigKVPoolSaturated",
            "warning",
            "increase(rig_engine_retracted_requests_total"
            f"[{dur(t.kv_saturated_for_seconds)}]) > 0",
            0,
            "The KV cache pool is full or requests are being retracted.",
            ENGINE_SUBJECT
            + " retracted {{ $value | humanize }} running requests in the last "
            + dur(t.kv_saturated_for_seconds)
            + " for lack of KV space.",
            signal="retractions",
        ),
    ]
