"""The doctor's judgements on exporter bodies written out here: the conditions the
simulated rig does not reach (tests/rigctl/commands/test_doctor.py runs the whole command)."""

from __future__ import annotations

from exporter.daemon.engines.exposition import parse
from exporter.rigctl.doctor.context import Context
from exporter.rigctl.doctor.engine import engine_checks
from exporter.rigctl.doctor.gpu import gpu_checks
from exporter.rigctl.doctor.host import host_checks
from exporter.rigctl.doctor.prometheus import _tokens
from exporter.rigctl.doctor.watch import FAMILIES, Scrape, Watch

ENGINE = 'engine="main",kind="sglang"'
SOURCES = """# TYPE rig_source_up gauge
rig_source_up{source="engine/main"} 1
rig_source_up{source="gpu"} 1
rig_source_up{source="host"} 1
"""


def scrape(at: float, body: str) -> Scrape:
    exposition = parse(SOURCES + body, FAMILIES)
    samples: dict = {}
    for family in exposition.families.values():
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return Scrape(at, samples)


def context(*bodies: str, seconds: float = 6.0) -> Context:
    step = seconds / (len(bodies) - 1)
    return Context("http://127.0.0.1:9842",
                   Watch(tuple(scrape(i * step, b) for i, b in enumerate(bodies))))


def by_name(checks: list, name: str) -> dict:
    found = [c for c in checks if c.name == name]
    assert len(found) == 1, checks
    return found[0].to_json()


def engine_body(version: str = "0.5.23", batches: float = 0.0, streamed: float = 0.0,
                running: float = 2.0, stall: bool = True, tap_frames: float | None = None,
                first_tokens: float = 0.0, tap_first_tokens: float | None = None,
                tap_active: int = 1) -> str:
    body = f"""# TYPE rig_engine_info gauge
rig_engine_info{{{ENGINE},version="{version}",model="m",tp_size="2"}} 1
# TYPE rig_engine_decode_batches_total counter
rig_engine_decode_batches_total{{{ENGINE}}} {batches}
# TYPE rig_engine_inter_token_latency_seconds histogram
rig_engine_inter_token_latency_seconds_count{{{ENGINE}}} {streamed}
# TYPE rig_engine_time_to_first_token_seconds histogram
rig_engine_time_to_first_token_seconds_count{{{ENGINE}}} {first_tokens}
# TYPE rig_engine_running_requests gauge
rig_engine_running_requests{{{ENGINE}}} {running}
"""
    if stall:
        body += f"# TYPE rig_engine_decode_stall_seconds gauge\n" \
                f"rig_engine_decode_stall_seconds{{{ENGINE}}} 0\n"
    if tap_frames is not None:
        body += f"""# TYPE rig_stream_requests_total counter
rig_stream_requests_total{{{ENGINE},outcome="ok"}} 0
# TYPE rig_stream_active gauge
rig_stream_active{{{ENGINE}}} {tap_active}
# TYPE rig_stream_generated_tokens_total counter
rig_stream_generated_tokens_total{{{ENGINE}}} {tap_frames}
# TYPE rig_stream_ttft_seconds histogram
rig_stream_ttft_seconds_count{{{ENGINE}}} {tap_first_tokens or 0}
"""
    return body


def test_no_stall_tracking_without_a_probe_or_tap_fails():
    c = context(engine_body("0.0.0.dev0", stall=False), engine_body("0.0.0.dev0", stall=False))
    checks = engine_checks(c)
    plan = by_name(checks, "stall_plan")
    assert plan["status"] == "fail" and "can never fire" in plan["detail"], plan
    assert by_name(checks, "engine_version")["detail"].startswith("main: sglang 0.0.0.dev0")


def test_no_stall_tracking_with_a_tap_warns_that_only_the_tap_pages():
    c = context(engine_body(stall=False, tap_frames=0), engine_body(stall=False, tap_frames=0))
    plan = by_name(engine_checks(c), "stall_plan")
    assert plan["status"] == "warn" and "fires from the stream tap alone" in plan["detail"]


def test_counters_still_while_the_tap_relays_tokens_fail():
    c = context(engine_body(batches=100, streamed=50, tap_frames=10),
                engine_body(batches=100, streamed=50, tap_frames=40),
                engine_body(batches=100, streamed=50, tap_frames=90))
    progress = by_name(engine_checks(c), "decode_progress")
    assert progress["status"] == "fail", progress
    assert "reads that as a stall" in progress["detail"]


def test_nothing_moving_with_requests_running_warns_and_idle_skips():
    still = engine_body(batches=100, streamed=50)
    assert by_name(engine_checks(context(still, still)), "decode_progress")["status"] == "warn"
    idle = engine_body(batches=100, streamed=50, running=0)
    assert by_name(engine_checks(context(idle, idle)), "decode_progress")["status"] == "skip"


def test_first_tokens_the_tap_never_saw_warn_and_those_it_saw_do_not():
    around = context(engine_body(first_tokens=10, tap_frames=0, tap_first_tokens=4),
                     engine_body(first_tokens=15, tap_frames=0, tap_first_tokens=6,
                                 tap_active=0))
    bypass = by_name(engine_checks(around), "tap_bypass")
    # 5 first tokens, 2 through the tap, 1 allowed for a second-old engine body.
    assert bypass["status"] == "warn" and "2 went around the tap" in bypass["detail"], bypass
    through = context(engine_body(first_tokens=10, tap_frames=0, tap_first_tokens=4),
                      engine_body(first_tokens=12, tap_frames=0, tap_first_tokens=6,
                                  tap_active=0))
    assert by_name(engine_checks(through), "tap_bypass")["status"] == "ok"


def test_a_stream_open_at_the_last_scrape_may_not_have_reached_the_tap_yet():
    # 4 first tokens, 2 through the tap, 1 for the engine body's age: one more is
    # the stream still open, whose first frame may be on its way.
    def watched(open_streams: int) -> str:
        return by_name(engine_checks(context(
            engine_body(first_tokens=10, tap_frames=0, tap_first_tokens=4),
            engine_body(first_tokens=14, tap_frames=0, tap_first_tokens=6,
                        tap_active=open_streams))), "tap_bypass")["status"]
    assert watched(0) == "warn"
    assert watched(1) == "ok"


def gpu_body(present: tuple[int, ...], expected: int, joules: float = 0.0,
             watts: float = 300.0, limits: tuple[str, ...] = ("junction", "memory")) -> str:
    body = f"# TYPE rig_gpu_expected_cards gauge\nrig_gpu_expected_cards {expected}\n"
    body += "# TYPE rig_gpu_present gauge\n" + "".join(
        f'rig_gpu_present{{card="card{i}",pci_bus="0000:0{i}:00.0",unique_id=""}} {up}\n'
        for i, up in enumerate(present, 1))
    body += "# TYPE rig_gpu_energy_joules_total counter\n" + "".join(
        f'rig_gpu_energy_joules_total{{card="card{i}"}} {joules * i}\n'
        for i, up in enumerate(present, 1) if up)
    body += "# TYPE rig_gpu_power_watts gauge\n" + "".join(
        f'rig_gpu_power_watts{{card="card{i}"}} {watts}\n' for i, up in enumerate(present, 1)
        if up)
    body += "# TYPE rig_gpu_temperature_limit_celsius gauge\n" + "".join(
        f'rig_gpu_temperature_limit_celsius{{card="card{i}",sensor="{s}",limit="critical"}} '
        f"110\n" for i, up in enumerate(present, 1) if up for s in limits)
    return body


def test_a_vanished_card_fails_and_a_missing_limit_warns():
    c = context(gpu_body((1, 0), 2, limits=("junction",)),
                gpu_body((1, 0), 2, limits=("junction",)))
    checks = gpu_checks(c)
    cards = by_name(checks, "gpu_cards")
    assert cards["status"] == "fail" and "vanished: card2" in cards["detail"], cards
    limits = by_name(checks, "gpu_temperature_limits")
    assert limits["status"] == "warn" and "no critical limit for memory" in limits["detail"]


def test_the_energy_rate_is_judged_against_the_power_within_a_quarter():
    # card1 counts 300 J/s at 300 W; card2 (joules * 2) counts 600 J/s.
    c = context(gpu_body((1, 1), 2, joules=0.0), gpu_body((1, 1), 2, joules=1800.0))
    checks = {(ch.name, ch.subject): ch.to_json() for ch in gpu_checks(c)}
    assert checks[("gpu_energy", "card1")]["status"] == "ok"
    card2 = checks[("gpu_energy", "card2")]
    assert card2["status"] == "warn" and "(x2.00)" in card2["detail"], card2


def test_no_psi_and_no_swap_counters_warn():
    body = "# TYPE rig_host_memory_total_bytes gauge\nrig_host_memory_total_bytes 1e9\n"
    checks = host_checks(context(body, body))
    assert by_name(checks, "host_psi")["status"] == "warn"
    assert by_name(checks, "host_swap")["status"] == "warn"


def test_expressions_compare_by_value_not_by_formatting():
    ours = 'max_over_time(x[90s])\nand x >= 10\nor on(job) sum(rate(y{a="b"}[5m])) by (job)'
    printed = 'max_over_time(x[1m30s]) and x >= 10 or on (job) sum by (job) (rate(y{a="b"}[5m]))'
    assert _tokens(ours) == _tokens(printed)
    assert _tokens(ours) != _tokens(printed.replace(">= 10", ">= 20"))
    assert _tokens(ours) != _tokens(printed.replace("[5m]", "[10m]"))


LLAMACPP = 'engine="main",kind="llamacpp"'


def llamacpp_body(stall: bool) -> str:
    body = f"""# TYPE rig_engine_info gauge
rig_engine_info{{{LLAMACPP},version="b1-0c1e570",model="tiny.gguf",tp_size=""}} 1
# TYPE rig_engine_running_requests gauge
rig_engine_running_requests{{{LLAMACPP}}} 1
"""
    plan = 'plan="llamacpp_slots",progress="slot_n_decoded",in_flight="slots_decoding"'
    if stall:
        body += f"""# TYPE rig_engine_decode_stall_seconds gauge
rig_engine_decode_stall_seconds{{{LLAMACPP}}} 0
# TYPE rig_engine_decode_stall_plan_info gauge
rig_engine_decode_stall_plan_info{{{LLAMACPP},{plan}}} 1
"""
    return body


def test_llamacpp_stall_plan_is_read_and_its_absence_names_slots():
    tracked = context(llamacpp_body(True), llamacpp_body(True))
    plan = by_name(engine_checks(tracked), "stall_plan")
    assert plan["status"] == "ok" and "plan llamacpp_slots" in plan["detail"], plan
    untracked = context(llamacpp_body(False), llamacpp_body(False))
    plan = by_name(engine_checks(untracked), "stall_plan")
    assert plan["status"] == "fail" and "--slots" in plan["fix"], plan


def scheduler_body(cpu: float, idle: float, stages: dict[str, float],
                   running: float = 2.0) -> str:
    body = engine_body(running=running) + f"""# TYPE rig_engine_scheduler_cpu_seconds_total counter
rig_engine_scheduler_cpu_seconds_total{{{ENGINE}}} {cpu}
# TYPE rig_engine_scheduler_idle_seconds_total counter
rig_engine_scheduler_idle_seconds_total{{{ENGINE}}} {idle}
# TYPE rig_engine_scheduler_stage_seconds_total counter
"""
    for stage, seconds in stages.items():
        body += f'rig_engine_scheduler_stage_seconds_total{{{ENGINE},stage="{stage}"}} {seconds}\n'
    return body


def test_a_scheduler_that_got_clearly_less_than_a_core_while_busy_warns():
    # Two TP ranks over 6 s: 12 loop seconds, 2 of them idle, 10 busy, 3 s of CPU.
    before = scheduler_body(100.0, 50.0, {"run_batch": 60.0, "idle": 50.0, "other": 10.0})
    after = scheduler_body(103.0, 52.0, {"run_batch": 68.0, "idle": 52.0, "other": 12.0})
    check = by_name(engine_checks(context(before, after)), "scheduler_cpu")
    assert check["status"] == "warn"
    assert "0.30 CPU-seconds per busy second" in check["detail"]
    assert "most in run_batch" in check["detail"]


def test_a_scheduler_with_its_core_is_ok_and_an_idle_one_is_not_judged():
    before = scheduler_body(100.0, 50.0, {"run_batch": 60.0, "idle": 50.0})
    busy = scheduler_body(109.0, 51.0, {"run_batch": 70.0, "idle": 51.0})
    assert by_name(engine_checks(context(before, busy)), "scheduler_cpu")["status"] == "ok"
    # Idle nearly all the watch: 1 busy second is too little to say anything.
    idle = scheduler_body(100.2, 61.0, {"run_batch": 61.0, "idle": 61.0})
    assert by_name(engine_checks(context(before, idle)), "scheduler_cpu")["status"] == "skip"
    # Through one long pass the counters stand still: nothing to judge, no warning.
    assert by_name(engine_checks(context(before, before)), "scheduler_cpu")["status"] == "skip"


def test_no_scheduler_counters_skip_with_the_release_that_has_them():
    check = by_name(engine_checks(context(engine_body(), engine_body())), "scheduler_cpu")
    assert check["status"] == "skip" and "0.5.23" in check["detail"]
