"""Engine checks: the version and the stall plan, decode progress while requests
run, `metrics_dir` against the engine, and traffic that goes around the tap.

All but `metrics_dir` read the exporter's /metrics over the watch. `metrics_dir`
reads SGLang's prometheus_client files with the stall tracker's own reader, on
the rig host, and the engine's /metrics once (one render) to compare.
"""

from __future__ import annotations

import math

import aiohttp

from exporter.config import EngineConfig
from exporter.daemon.engines.fetch import get_text
from exporter.daemon.engines.stall.multiproc_files import FileSample
from exporter.daemon.engines.stall.plans import Counters
from exporter.daemon.engines.stall.readers import (
    BODY_REUSE_SECONDS,
    CAUSES,
    MetricsBody,
    MetricsReader,
    MultiprocReader,
    counters_from,
    merge_files,
    process_alive,
)
from exporter.daemon.snapshot import SourceError
from exporter.process.ctrl_c import run_interruptible
from exporter.rigctl.doctor.context import NEEDS_CONFIG, Context
from exporter.rigctl.doctor.report import Check, fail, ok, plural, skip, warn
from exporter.schema import engine_source
from exporter.thresholds import SCHEDULER_CPU_MIN_BUSY_SECONDS, SCHEDULER_CPU_SHORT_RATIO

#: The counters compared between metrics_dir and /metrics: they only grow, so the
#: engine's value must lie between two readings of the files taken around it.
COMPARED = {"decode_passes": "decode passes", "streamed_tokens": "streamed tokens",
            "finished": "finished requests"}


def engine_checks(c: Context) -> list[Check]:
    out = _configured(c)
    for name in c.watch.engines():
        out += [_version(c, name), _stall_plan(c, name), _decode_progress(c, name),
                _scheduler_cpu(c, name), _tap_bypass(c, name), _metrics_dir(c, name)]
    return out


def _configured(c: Context) -> list[Check]:
    """The config's engines are the exporter's: else the file checks judge another rig."""
    if c.config is None:
        return []
    exported, configured = c.watch.engines(), sorted(e.name for e in c.config.engines)
    if exported != configured:
        return [warn("engines", "rig", f"the config names the engines "
                     f"{', '.join(configured) or 'none'}, the exporter reads "
                     f"{', '.join(exported) or 'none'}: it runs another config",
                     "restart the exporter with this config file")]
    return [ok("engines", "rig", f"the exporter reads the config's engines: "
               f"{', '.join(configured) or 'none'}")]


def _info(c: Context, name: str) -> dict[str, str] | None:
    found = c.watch.last.all("rig_engine_info", engine=name)
    return found[0].labels if found else None


def _version(c: Context, name: str) -> Check:
    info = _info(c, name)
    if info is None:
        if c.watch.last.total("rig_source_up", source=engine_source(name)) == 0:
            return fail("engine_version", name, f"{name}: the exporter cannot read the engine "
                        "(rig_source_up 0)", "start the engine, or correct [[engine]] url")
        config = c.engine(name)
        route = {"vllm": "/version and /v1/models", "llamacpp": "/props"}.get(
            config.kind if config is not None else "", "/server_info")
        return warn("engine_version", name, f"{name}: no server info yet: its version, and "
                    "so its stall plan, are unknown",
                    f"check that the engine answers GET {route} (the exporter asks at "
                    "start, then every minute until it does)")
    version = info.get("version", "")
    detail = (f"{name}: {info.get('kind', '?')} {version or '(no version)'}, model "
              f"{info.get('model') or '?'}, tp {info.get('tp_size') or '?'}")
    return ok("engine_version", name, detail)


def _stall_plan(c: Context, name: str) -> Check:
    info, last = _info(c, name), c.watch.last
    if info is None:
        return skip("stall_plan", name, f"{name}: the tracker waits for the engine's server "
                    "info (engine_version)")
    kind = info.get("kind", "")
    config = c.engine(name)
    if kind not in ("sglang", "vllm", "llamacpp"):
        return skip("stall_plan", name, f"{name}: the stall tracker reads SGLang, vLLM and "
                    f"llama.cpp only ({kind})")
    if config is not None and not config.stall_tracker:
        return skip("stall_plan", name, f"{name}: stall_tracker = false in the config")
    for sample in last.all("rig_engine_decode_stall_tracker_up", engine=name):
        cause = sample.labels.get("cause", "")
        if sample.value == 0 and cause in METRICS_DIR_CAUSES:
            return skip("stall_plan", name, f"{name}: the plan is moot while the stall "
                        f"tracker cannot see ({cause}): see metrics_dir")
    resolution = last.total("rig_engine_decode_stall_resolution_seconds", engine=name)
    at = f", a poll every {resolution:.2f} s" if resolution is not None else ""
    plans = last.all("rig_engine_decode_stall_plan_info", engine=name)
    if plans:
        plan = plans[0].labels
        return ok("stall_plan", name, f"{name}: plan {plan.get('plan', '?')}: decode progress "
                  f"from {plan.get('progress', '?')}, requests in flight from "
                  f"{plan.get('in_flight', '?')}{at} (the evidence: the exporter's log line "
                  "'stall tracker plan' at start)")
    if last.has("rig_engine_decode_stall_seconds", engine=name):
        return ok("stall_plan", name, f"{name}: the stall tracker runs{at}; its plan is "
                  "unknown: this exporter exports no rig_engine_decode_stall_plan_info")
    others = [what for what, family in (("the stream probe", "rig_probe_success"),
                                        ("the stream tap", "rig_stream_active"))
              if last.has(family, engine=name)]
    version = info.get("version", "")
    if kind == "llamacpp":
        # Its one plan needs /slots (docs/stall-tracker.md#llamacpp).
        return fail("stall_plan", name, f"{name}: no stall tracking for llama.cpp {version}: "
                    "rig_engine_decode_stall_* are absent",
                    "start llama-server with --slots: the tracker reads GET /slots")
    detail = (f"{name}: no stall tracking for SGLang {version or '(version unknown)'}: "
              "rig_engine_decode_stall_* are absent, so RigDecodeStarvation "
              + (f"fires from {' and '.join(others)} alone" if others else "can never fire"))
    fix = ("read why in the exporter's log (its line with 'stall tracker' at start)"
           + ("" if others else "; meanwhile set probe_interval_seconds = 60 for this engine"))
    return (warn if others else fail)("stall_plan", name, detail, fix)


def _decode_progress(c: Context, name: str) -> Check:
    """Decode counters moving while requests run; the tap is a witness that does not
    depend on the engine's counters."""
    w = c.watch
    seconds = w.seconds
    running = w.peak("rig_engine_running_requests", engine=name) or 0.0
    streams = w.peak("rig_stream_active", engine=name) or 0.0
    probe = c.probes.get(name)
    batches = w.delta("rig_engine_decode_batches_total", engine=name)
    streamed = w.delta("rig_engine_inter_token_latency_seconds_count", engine=name)
    if batches is None and streamed is None:
        return skip("decode_progress", name, f"{name}: the exporter exports no decode "
                    "counter for this engine (rig_engine_decode_batches_total, "
                    "rig_engine_inter_token_latency_seconds)")
    tap = (w.delta("rig_stream_frames_total", engine=name) or 0.0) + (
        w.delta("rig_stream_generated_tokens_total", engine=name) or 0.0)
    probed = probe is not None and probe.frames > 0
    if not (running or streams or probed):
        return skip("decode_progress", name, f"{name}: no request ran in the {seconds:.1f} s "
                    "watched", "rerun with --probe (one short generation) or while the "
                    "agents work")
    moved = f"+{batches or 0:.0f} decode batches, +{streamed or 0:.0f} streamed tokens"
    load = f"{running:.0f} running, {streams:.0f} streams through the tap"
    if probe is not None:
        got = (f"{probe.tokens} tokens" if probe.tokens is not None
               else f"{probe.frames} token frames")
        load += (f", the doctor's probe got {got}" if probe.success
                 else f", the doctor's probe failed: {probe.reason}")
    longest = w.last.total("rig_engine_decode_stall_max_seconds", engine=name)
    tracked = f"; the tracker's longest stall {longest:.1f} s" if longest is not None else ""
    if (batches or 0) + (streamed or 0) > 0:
        return ok("decode_progress", name, f"{name}: {moved} in {seconds:.1f} s ({load})"
                  f"{tracked}")
    if tap > 0 or probed:
        return fail("decode_progress", name,
                    f"{name}: the engine's decode counters stood still for {seconds:.1f} s "
                    f"while tokens reached clients ({load}){tracked}: the stall tracker "
                    "reads that as a stall on this build",
                    "report the engine's build and the stall_plan line: its progress "
                    "signal does not move here")
    return warn("decode_progress", name, f"{name}: no decode progress in {seconds:.1f} s with "
                f"{load}{tracked}: a stall now, or a running gauge that stays up after "
                "requests end (SGLang before 0.5.16 refreshes it every 30 s when idle)",
                "run `rigctl health`; rerun with --probe to tell the two apart")


def _scheduler_cpu(c: Context, name: str) -> Check:
    """The CPU SGLang's schedulers got per second of work while requests ran
    (docs/metrics.md#the-schedulers-cpu): the three counters are flushed together, so
    their deltas cover the same spans of the loop."""
    w = c.watch
    cpu = w.delta("rig_engine_scheduler_cpu_seconds_total", engine=name)
    idle = w.delta("rig_engine_scheduler_idle_seconds_total", engine=name)
    stages = {s.labels.get("stage", ""): s.value
              for s in w.last.all("rig_engine_scheduler_stage_seconds_total", engine=name)}
    before = {s.labels.get("stage", ""): s.value
              for s in w.first.all("rig_engine_scheduler_stage_seconds_total", engine=name)}
    if cpu is None or idle is None or not stages:
        return skip("scheduler_cpu", name, f"{name}: the exporter exports no scheduler CPU "
                    "counters for this engine (SGLang 0.5.23 on, with --enable-metrics)")
    moved = {stage: value - before.get(stage, 0.0) for stage, value in stages.items()}
    busy = sum(moved.values()) - idle
    running = w.peak("rig_engine_running_requests", engine=name) or 0.0
    if not running or busy < SCHEDULER_CPU_MIN_BUSY_SECONDS:
        return skip("scheduler_cpu", name, f"{name}: {busy:.1f} busy scheduler seconds "
                    f"counted in the {w.seconds:.1f} s watched, {running:.0f} running: too "
                    f"little to judge (the counters move at most once a second)",
                    "rerun while the agents work, or with a longer --watch")
    share = cpu / busy
    work = {k: v for k, v in moved.items() if k != "idle"}
    most = max(work, key=lambda k: work[k]) if work else "?"
    detail = (f"{name}: the schedulers got {share:.2f} CPU-seconds per busy second "
              f"({cpu:.1f} s of CPU over {busy:.1f} busy s; most in {most})")
    if share < SCHEDULER_CPU_SHORT_RATIO:
        return warn("scheduler_cpu", name, f"{detail}: clearly less than a core while "
                    "requests ran and it was not idle", "see the runbook's 'A scheduler "
                    "short of CPU': other processes on its cores, or a scheduler asleep "
                    "on the device")
    return ok("scheduler_cpu", name, detail)


def _tap_bypass(c: Context, name: str) -> Check:
    """First tokens the engine gave against those the tap saw over the watch. Both
    count at the first token, so a stream that spans the watch counts on neither."""
    w = c.watch
    config = c.engine(name)
    if not w.last.has("rig_stream_requests_total", engine=name):
        return skip("tap_bypass", name, f"{name}: no stream tap, so what clients see is not "
                    "measured", "set tap_listen_address for this engine and point the "
                    "agents at it")
    engine = w.delta("rig_engine_time_to_first_token_seconds_count", engine=name) or 0.0
    tap = (w.delta("rig_stream_ttft_seconds_count", engine=name) or 0.0) + (
        w.delta("rig_stream_requests_total", engine=name, outcome="untimed") or 0.0)
    probes = 0
    if w.last.has("rig_probe_success", engine=name):  # the exporter's probe goes direct
        interval = config.probe_interval_seconds if config is not None else 0.0
        probes = math.ceil(w.seconds / interval) if interval else 1
    if engine == 0:
        return skip("tap_bypass", name, f"{name}: no request got its first token in the "
                    f"{w.seconds:.1f} s watched", "rerun while the agents work")
    # A scrape may serve the engine's body up to BODY_REUSE_SECONDS old (the stall
    # tracker's, engines/stall/readers.py) while the tap counts live: the watch's first
    # engine count may then lag its start by that long, and count the first tokens of
    # that second besides the tap's.
    lag = math.ceil(tap / w.seconds * BODY_REUSE_SECONDS) if w.seconds > 0 else 0
    # A stream open at the last scrape may have its first token counted by the engine
    # and its first frame still on the way to the tap (a real vLLM, short of CPU, once
    # read as one request around the tap for it).
    in_transit = w.last.total("rig_stream_active", engine=name) or 0.0
    around = engine - tap - probes - lag - in_transit
    allowed = f" ({probes} for the exporter's own probe)" if probes else ""
    seen = (f"{name}: the engine gave {plural(engine, 'request')} their first token in "
            f"{w.seconds:.1f} s, the tap saw {tap:.0f}{allowed}")
    if around > 0:
        where = config.tap_listen_address if config is not None else "its address"
        return warn("tap_bypass", name, f"{seen}: {around:.0f} went around the tap",
                    f"point every client at the tap ({where}), not at the engine's URL")
    return ok("tap_bypass", name, seen)


#: The causes of rig_engine_decode_stall_tracker_up 0 that are metrics_dir's
#: (exporter/daemon/engines/stall/readers.py CAUSES).
METRICS_DIR_CAUSES = ("unreadable", "no_files", "no_live_process", "files_without_counters")


def _blind_metrics_dir(c: Context, name: str) -> Check | None:
    """The exporter's own word that its tracker reads nothing from metrics_dir."""
    for sample in c.watch.last.all("rig_engine_decode_stall_tracker_up", engine=name):
        cause = sample.labels.get("cause", "")
        if sample.value == 0 and cause in METRICS_DIR_CAUSES:
            return fail("metrics_dir", name, f"{name}: the exporter's stall tracker reads "
                        f"nothing from its metrics_dir ({cause}: {CAUSES[cause]}), so "
                        "rig_engine_decode_stall_* are absent (what it found: /api/health "
                        "and the exporter's log)",
                        "set metrics_dir to the PROMETHEUS_MULTIPROC_DIR in the engine's "
                        "environment (tr '\\0' '\\n' < /proc/PID/environ), or remove it")
    return None


def _metrics_dir(c: Context, name: str) -> Check:
    config = c.engine(name)
    if config is None:
        # Without the config, the exporter's own word (with it, the files say more).
        return _blind_metrics_dir(c, name) or skip(
            "metrics_dir", name, f"{name}: metrics_dir not checked", NEEDS_CONFIG)
    if config.kind != "sglang":
        return skip("metrics_dir", name, f"{name}: metrics_dir is SGLang's "
                    f"({config.kind}; llama.cpp's stall tracker reads /slots)")
    if not config.metrics_dir:
        resolution = c.watch.last.total("rig_engine_decode_stall_resolution_seconds",
                                        engine=name)
        at = f" (a poll every {resolution:.2f} s now)" if resolution is not None else ""
        return skip("metrics_dir", name, f"{name}: no metrics_dir: the stall tracker reads "
                    f"/metrics under the engine-render budget{at}",
                    "set metrics_dir to SGLang's PROMETHEUS_MULTIPROC_DIR: the tracker then "
                    f"polls every {config.stall_poll_interval_seconds:g} s at no engine cost")
    directory = config.metrics_dir
    fix = ("set metrics_dir to the PROMETHEUS_MULTIPROC_DIR in the engine's environment "
           "(tr '\\0' '\\n' < /proc/PID/environ), or remove it")
    reader = MultiprocReader(directory, config.stall_poll_interval_seconds)
    try:
        before = reader.files.read()
        if not before:
            return fail("metrics_dir", name, f"{name}: {directory} holds no prometheus_client "
                        "file with SGLang's counters (nor does a tmp* directory in it): the "
                        "stall tracker reads nothing", fix)
        try:
            served = run_interruptible(_engine_counters(config))
        except SourceError as exc:
            return skip("metrics_dir", name, f"{name}: {directory}: cannot read the engine to "
                        f"compare: {exc}", "start the engine")
        after = reader.files.read()
    except OSError as exc:
        return fail("metrics_dir", name, f"{name}: {directory}: {exc.strerror or exc}", fix)
    finally:
        reader.close()
    pids = sorted({s.pid for s in after}, key=_pid_order)
    live = [p for p in pids if process_alive(p)]
    files = f"{directory}: files of pids {', '.join(pids)}"
    if not live:
        return fail("metrics_dir", name, f"{name}: {files}, none of them running: the files "
                    "of an engine that has stopped", fix)
    disagree = _disagreements(_counters(before), served, _counters(after))
    if disagree:
        return fail("metrics_dir", name, f"{name}: {files}: {'; '.join(disagree)} at "
                    f"{config.url}/metrics: not the files this engine serves", fix)
    stopped = len(pids) - len(live)
    agreed = ", ".join(f"{what} {getattr(served, key):.0f}" for key, what in COMPARED.items()
                       if getattr(served, key) is not None)
    return ok("metrics_dir", name, f"{name}: {files} ({len(live)} running"
              + (f", {stopped} stopped, which the engine counts too" if stopped else "")
              + f"); they agree with {config.url}/metrics ({agreed or 'no counter yet'})")


async def _engine_counters(config: EngineConfig) -> Counters:
    """The tracker's counters from one GET of the engine's /metrics: one render."""
    async with aiohttp.ClientSession(headers={"Accept-Encoding": "identity"},
                                     timeout=aiohttp.ClientTimeout(total=30)) as session:
        body = MetricsBody(lambda: get_text(session, config.url + "/metrics"))
        return (await MetricsReader(body, config.stall_poll_interval_seconds).read()).counters


def _counters(found: list[FileSample]) -> Counters:
    return counters_from(merge_files(found))


def _disagreements(before: Counters, served: Counters, after: Counters) -> list[str]:
    out = []
    for key, what in COMPARED.items():
        low, value, high = getattr(before, key), getattr(served, key), getattr(after, key)
        if value is None and high is None:
            continue
        if value is None or high is None or not (low or 0.0) <= value <= high:
            files = "absent" if high is None else f"{high:.0f}"
            metrics = "absent" if value is None else f"{value:.0f}"
            out.append(f"{what} {files} in the files, {metrics}")
    return out


def _pid_order(pid: str) -> tuple[int, str]:
    return (int(pid), "") if pid.isdigit() else (0, pid)
