"""Engine checks, mirroring alerts/rules/engine.py: engine up, decode starvation and
stutter, a wedged engine (the stream probe, or the queue where no probe runs), the
queue, the KV pool, speculative decoding's acceptance."""

from __future__ import annotations

from exporter.daemon.engines.source import EngineReading
from exporter.daemon.health.report import Signal, Stage
from exporter.daemon.health.view import Context, engine_labels, seconds, signal
from exporter.schema import engine_source, probe_source


def engine_signals(c: Context) -> list[Signal]:
    out: list[Signal] = []
    for config in c.engines:
        labels = engine_labels(config)
        result = c.view.results.get(engine_source(config.name))
        if result is None:
            continue
        out.append(_engine_up(c, labels, config.url, result.up, result.error,
                              result.duration_seconds))
        reading = c.view.engines.get(config.name)
        if reading is None:
            continue  # down: RigEngineDown says so, and inhibits the rest
        out += _starvation(c, labels, reading)
        out += _stutter(c, labels, reading)
        out += _wedged(c, labels, reading)
        out += _queue(c, labels, reading)
        out += _kv_pool(c, labels, reading)
        out += _spec_acceptance(c, labels, reading)
    return out


def _engine_up(c: Context, labels: dict[str, str], url: str, up: bool, error: str | None,
               duration: float) -> Signal:
    reason = (f"{labels['engine']}: {url}/metrics answered in {duration * 1000:.0f} ms" if up
              else f"{labels['engine']}: cannot read {url}: {error}")
    return signal("engine_up", labels, "RigEngineDown",
                  (Stage("critical", c.t.engine_down_for_seconds),), not up,
                  1.0 if up else 0.0, None, "bool", reason)


def _starvation(c: Context, labels: dict[str, str], reading: EngineReading) -> list[Signal]:
    t, name = c.t, labels["engine"]
    limit = t.decode_stall_critical_seconds
    stages = (Stage("critical", t.decode_starvation_for_seconds),)
    out = []
    # The tap first, as in the rule: what the agents waited is the figure to give.
    tap = c.view.taps.get(name)
    if tap is not None:
        gap = tap.max_gap_seconds
        out.append(signal("decode_starvation", labels, "RigDecodeStarvation", stages,
                          gap >= limit, gap, limit, "s",
                          f"{name}: real traffic through the stream tap waited {seconds(gap)} "
                          f"for a token (longest gap in the last {tap.window_seconds:g} s, "
                          f"{tap.active} streams open)",
                          "tap"))
    if reading.stall is not None:
        # The middle of the stall's bounds, as the rule judges it
        # (docs/stall-tracker.md#honest-bounds).
        stall = reading.stall
        longest = stall.longest_estimate_seconds
        under_way = ", still under way" if stall.current_seconds > 0 else ""
        window = f"the last {stall.window_seconds:g} s"
        bounds = (f", between {seconds(stall.max_recent_seconds)} and "
                  f"{seconds(stall.max_recent_upper_seconds)}" if longest > 0 else "")
        reason = (f"{name}: decode stalled {seconds(longest)} with requests running "
                  f"(stall tracker, longest in {window}{bounds}{under_way})" if longest >= limit
                  else f"{name}: longest decode stall in {window} {seconds(longest)} "
                       f"(stall tracker{bounds})")
        out.append(signal("decode_starvation", labels, "RigDecodeStarvation", stages,
                          longest >= limit, longest, limit, "s", reason, "stall"))
    blind = reading.stall_tracker
    if reading.stall is None and blind is not None and not blind.up:
        # Not "no stall": the tracker cannot tell
        # (docs/stall-tracker.md#when-the-tracker-cannot-see).
        out.append(signal("decode_starvation", labels, "RigDecodeStarvation", stages, None,
                          None, limit, "s", f"{name}: the stall tracker cannot see "
                          f"({blind.cause}): {blind.reason}", "stall"))
    probe = c.view.probes.get(name)
    if probe is not None and probe.last is not None and probe.last.max_gap_seconds is not None:
        gap = probe.last.max_gap_seconds
        out.append(signal("decode_starvation", labels, "RigDecodeStarvation", stages,
                          gap >= limit, gap, limit, "s",
                          f"{name}: the last stream probe waited {seconds(gap)} for a token",
                          "probe"))
    if not out:
        out.append(signal("decode_starvation", labels, "RigDecodeStarvation", stages, None,
                          None, limit, "s", f"{name}: nothing measures decode gaps "
                          "(stall tracker off, no stream probe or tap)", "stall"))
    return out


def _wedged(c: Context, labels: dict[str, str], reading: EngineReading) -> list[Signal]:
    """RigEngineWedged: where a stream probe has a verdict, it decides; elsewhere,
    requests queued with none running and no decode batch."""
    probe = c.view.probes.get(labels["engine"])
    if probe is not None and probe.last is not None:
        return _probe(c, labels, labels["engine"])
    return [*_probe(c, labels, labels["engine"]), _queue_wedged(c, labels, reading)]


def _queue_wedged(c: Context, labels: dict[str, str], reading: EngineReading) -> Signal:
    t, name = c.t, labels["engine"]
    values = reading.metrics.values
    queued, running = values.get("queued_requests"), values.get("running_requests")
    stages = (Stage("critical", t.engine_wedged_seconds),)

    def wedged(holds: bool | None, reason: str) -> Signal:
        return signal("engine_wedged", labels, "RigEngineWedged", stages, holds,
                      queued, 0, "requests", reason, "queue", sustained=True)

    if queued is None or running is None or not (queued > 0 and running == 0):
        return wedged(False, f"{name}: not wedged")
    # llama.cpp has no decode-batch counter: its forward passes stand still in a wedge too.
    family = next((f for f in ("decode_batches_total", "decode_calls_total") if f in values),
                  None)
    if family is None:
        return wedged(False, f"{name}: {queued:.0f} queued, none running; no decode counter")
    what = "decode batches" if family == "decode_batches_total" else "forward passes"
    window = t.engine_wedged_window_seconds
    if not c.filled(window):
        return wedged(None, f"{name}: {queued:.0f} queued, none running; "
                            + c.not_filled(window))
    batches = c.history.increase(("engine", name, family), c.now, window)
    holds = batches is not None and batches == 0
    return wedged(holds, f"{name}: {queued:.0f} queued, none running, "
                         f"{batches or 0:.0f} {what} in the last {seconds(window)}")


def _stutter(c: Context, labels: dict[str, str], reading: EngineReading) -> list[Signal]:
    """A minute counts when the tap's longest gap or the stall tracker's longest
    stall (both over the stall window, the step of RigDecodeStuttering's subquery,
    so that each window with a stall counts once) lies in the stutter range."""
    t, name = c.t, labels["engine"]
    if reading.stall is None and name not in c.view.taps:
        return []
    low, high = t.decode_stutter_seconds, t.decode_stall_critical_seconds
    window = t.decode_stutter_window_seconds
    views = [c.history.stepped(("engine", name, family), c.now, window,
                               t.decode_stall_window_seconds)
             for family in ("stream_max_token_gap_seconds", "decode_stall_estimate_seconds")]
    minutes = sum(1 for step in zip(*views, strict=True)
                  if any(v is not None and low <= v < high for v in step))
    holds: bool | None = minutes >= t.decode_stutter_count
    reason = (f"{name}: decode paused {seconds(low)}-{seconds(high)} in {minutes} separate "
              f"minutes of the last {seconds(window)}")
    if not holds and not c.filled(window):  # more of the window may still hold stutters
        holds, reason = None, f"{name}: {minutes} stutter minutes so far; {c.not_filled(window)}"
    return [signal("decode_stutter", labels, "RigDecodeStuttering",
                   (Stage("warning", t.decode_stutter_for_seconds),), holds, minutes,
                   t.decode_stutter_count, "count", reason)]


def _probe(c: Context, labels: dict[str, str], name: str) -> list[Signal]:
    result = c.view.results.get(probe_source(name))
    if result is None:
        return []  # no probe configured
    stages = (Stage("critical", c.t.engine_wedged_seconds),)
    probe = c.view.probes.get(name)
    if probe is None or probe.last is None:
        reason = (f"{name}: probe source down: {result.error}" if probe is None
                  else f"{name}: no stream probe has finished yet")
        return [signal("engine_wedged", labels, "RigEngineWedged", stages, None, None, None,
                       "bool", reason, "probe")]
    last = probe.last
    if last.success:
        ttft = f"{last.ttft_seconds:.2f} s" if last.ttft_seconds is not None else "?"
        gap = f"{last.max_gap_seconds:.2f} s" if last.max_gap_seconds is not None else "?"
        rate = (f", {last.decode_tokens_per_second:.0f} tokens/s"
                if last.decode_tokens_per_second is not None else "")
        reason = f"{name}: last stream probe ok: first token {ttft}, longest gap {gap}{rate}"
    else:
        reason = f"{name}: the HTTP server answers, but the last stream probe failed: " \
                 f"{last.reason}"
    return [signal("engine_wedged", labels, "RigEngineWedged", stages, not last.success,
                   1.0 if last.success else 0.0, None, "bool", reason, "probe")]


def _queue(c: Context, labels: dict[str, str], reading: EngineReading) -> list[Signal]:
    values, name = reading.metrics.values, labels["engine"]
    queued, running = values.get("queued_requests"), values.get("running_requests")
    if queued is None or running is None:
        return []
    holds = queued > 0 and running > 0
    return [signal("queue", labels, "RigQueueHeadOfLine",
                   (Stage("warning", c.t.queue_wait_seconds),), holds, queued, 0, "requests",
                   f"{name}: {queued:.0f} queued while {running:.0f} run", sustained=True)]


def _kv_pool(c: Context, labels: dict[str, str], reading: EngineReading) -> list[Signal]:
    t, name, values = c.t, labels["engine"], reading.metrics.values
    out = []
    usage = values.get("kv_usage_ratio")
    if usage is not None:
        out.append(signal("kv_pool", labels, "RigKVPoolSaturated",
                          (Stage("warning", t.kv_saturated_for_seconds),),
                          usage >= t.kv_usage_ratio, usage, t.kv_usage_ratio, "ratio",
                          f"{name}: KV pool {usage:.0%} used", "usage", sustained=True))
    if "retracted_requests_total" in values:
        window = t.kv_saturated_for_seconds
        # SGLang creates the counter at its first retraction: one that appeared
        # while the exporter watched counts from 0, as the rule's `offset ... or 0`.
        retracted = c.history.increase(("engine", name, "retracted_requests_total"), c.now,
                                       window, created_from_zero=True)
        holds: bool | None = retracted is not None and retracted > 0
        reason = (f"{name}: {retracted or 0:.0f} requests retracted for lack of KV space "
                  f"in the last {seconds(window)}")
        if not holds and not c.filled(window):  # growth so far proves it; none so far does not
            holds, reason = None, f"{name}: retractions: {c.not_filled(window)}"
        out.append(signal("kv_pool", labels, "RigKVPoolSaturated", (Stage("warning", 0),),
                          holds, retracted, 0, "requests", reason, "retractions"))
    return out


def _spec_acceptance(c: Context, labels: dict[str, str], reading: EngineReading) -> list[Signal]:
    """RigSpecDecodeAcceptanceLow: fewer accepted tokens a step than the threshold while
    decode batches ran over the rate window (the gauge keeps its last value while idle)."""
    t, name, values = c.t, labels["engine"], reading.metrics.values
    length = values.get("spec_accept_length")
    if length is None:
        return _spec_counters(c, labels, reading)
    window = t.rate_window_seconds
    batches = c.history.increase(("engine", name, "decode_batches_total"), c.now, window)
    holds: bool | None = length < t.spec_accept_length and bool(batches)
    reason = (f"{name}: speculative decoding accepts {length:.2f} tokens a decode step, "
              f"{batches or 0:.0f} decode batches in the last {seconds(window)}")
    if length < t.spec_accept_length and batches is None:
        holds, reason = None, f"{name}: {length:.2f} tokens a step; decode batches unknown yet"
    return [signal("spec_acceptance", labels, "RigSpecDecodeAcceptanceLow",
                   (Stage("warning", t.spec_accept_low_for_seconds),), holds, length,
                   t.spec_accept_length, "tokens", reason, sustained=True)]


def _spec_counters(c: Context, labels: dict[str, str], reading: EngineReading) -> list[Signal]:
    """llama.cpp's speculative counters: accepted drafts per verification step over the
    rate window, plus the bonus token; no step in the window, no reading (the rule's
    ratio is NaN then)."""
    t, name = c.t, labels["engine"]
    if "spec_verify_steps_total" not in reading.metrics.values:
        return []  # no speculative decoding, or no draft yet
    window = t.rate_window_seconds
    steps = c.history.increase(("engine", name, "spec_verify_steps_total"), c.now, window)
    accepted = c.history.increase(("engine", name, "spec_accepted_tokens_total"), c.now,
                                  window)
    if not steps or accepted is None:
        length, holds = None, None if steps is None else False
        reason = f"{name}: no speculative verification step in the last {seconds(window)}"
    else:
        length = accepted / steps + 1
        holds = length < t.spec_accept_length
        reason = (f"{name}: speculative decoding accepts {length:.2f} tokens a decode step "
                  f"over {steps:.0f} verification steps in the last {seconds(window)}")
    return [signal("spec_acceptance", labels, "RigSpecDecodeAcceptanceLow",
                   (Stage("warning", t.spec_accept_low_for_seconds),), holds, length,
                   t.spec_accept_length, "tokens", reason, sustained=True)]
