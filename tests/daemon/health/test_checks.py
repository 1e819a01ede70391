"""Each health check against the alert rule it mirrors: fires, holds, near-misses."""

from __future__ import annotations

import dataclasses

import pytest

from exporter.daemon.health.report import HealthStatus, State
from exporter.thresholds import Thresholds
from tests.support.rig_readings import Rig, Watch, card, engine, host, one, probe, statuses

HOT = {"edge": 90.0, "junction": 107.0, "memory": 96.0}


def downclocked(name: str = "card1", **changes: object):
    return card(name, clocks_hertz={"sclk": 1.4e9, "mclk": 1.249e9}, temperatures_celsius=HOT,
                **changes)


class TestHealthyRig:
    def test_nothing_warns(self) -> None:
        report = Watch().over(0, 1900, 15, Rig(probes=[probe()]))
        assert statuses(report) == {}
        assert report.status is HealthStatus.OK
        # Past every window (30 min of swap growth), nothing is unknown either,
        # but the CPU sensor (absent on a test machine) in the synthetic host is present.
        assert [c.name for c in report.checks if c.status is HealthStatus.UNKNOWN] == []

    def test_worst_first(self) -> None:
        rig = Rig(cards=[card("card1"), downclocked("card2")])
        report = Watch().over(0, 700, 15, rig)
        ranks = [c.status.rank for c in report.checks]
        assert ranks == sorted(ranks, reverse=True)
        assert report.checks[0].name == "gpu_thermal_downclock"
        assert report.status is HealthStatus.CRIT


class TestThermalDownclock:
    """RigGpuThermalDownclock (warning after 2m, critical after 10m): the check
    says crit while it holds, and when the alert fires."""

    def test_crit_while_it_holds_with_the_alerts_timing_in_the_reason(self) -> None:
        watch, rig = Watch(), Rig(cards=[downclocked(), card("card2")])
        first = one(watch.at(0, rig), "gpu_thermal_downclock", card="card1")
        assert first.status is HealthStatus.CRIT
        assert "card1" in first.reason and "junction 107 °C" in first.reason
        assert "(for 0 s; RigGpuThermalDownclock fires after 2m)" in first.reason
        assert first.value == 1.4e9 / 2.304e9 and first.threshold == 0.8
        check = one(watch.over(0, 130, 15, rig), "gpu_thermal_downclock", card="card1")
        assert check.status is HealthStatus.CRIT and check.reason.endswith("(for 2m10s)")
        cooled = one(watch.at(145, rig), "gpu_thermal_downclock", card="card2")
        assert cooled.status is HealthStatus.OK

    def test_cooling_down_restarts_the_hold(self) -> None:
        watch = Watch()
        watch.over(0, 300, 15, Rig(cards=[downclocked()]))
        assert one(watch.at(315, Rig(cards=[card()])), "gpu_thermal_downclock",
                   card="card1").status is HealthStatus.OK
        check = one(watch.over(330, 400, 15, Rig(cards=[downclocked()])),
                    "gpu_thermal_downclock", card="card1")
        assert "(for 1m10s; RigGpuThermalDownclock fires after 2m)" in check.reason

    def test_near_misses(self) -> None:
        watch = Watch()
        rigs = [
            # idle: the clock is down but the card is not busy
            Rig(cards=[downclocked(busy_ratio=0.3)]),
            # the Navi 31 hotspot bit alone, junction 20 °C from its limit
            Rig(cards=[card(clocks_hertz={"sclk": 1.4e9}, throttle_reasons=frozenset(
                {"thermal_junction"}))]),
            # hot and busy at full clock
            Rig(cards=[card(temperatures_celsius=HOT)]),
        ]
        for rig in rigs:
            report = Watch().over(0, 700, 30, rig)
            assert one(report, "gpu_thermal_downclock", card="card1").status is HealthStatus.OK
        # A thermal reason other than the hotspot counts, with the clock down under load.
        throttled = Rig(cards=[card(clocks_hertz={"sclk": 1.4e9},
                                    throttle_reasons=frozenset({"thermal_memory"}))])
        assert one(watch.over(0, 700, 30, throttled), "gpu_thermal_downclock",
                   card="card1").status is HealthStatus.CRIT


class TestGpu:
    def test_hot_names_the_sensor(self) -> None:
        check = one(Watch().over(0, 150, 15, Rig(cards=[card(temperatures_celsius=HOT)])),
                    "gpu_hot", card="card1")
        assert check.status is HealthStatus.WARN
        assert check.value == 107 and check.threshold == 100
        assert "junction 107 °C" in check.reason

    def test_power_capped_is_info_only(self) -> None:
        capped = card(power_watts=339.0, throttle_reasons=frozenset({"power"}))
        check = one(Watch().over(0, 400, 15, Rig(cards=[capped])), "gpu_power_capped",
                    card="card1")
        assert check.status is HealthStatus.OK and "power limit holds its clock" in check.reason

    def test_a_vanished_card_is_critical(self) -> None:
        rig = Rig(cards=[card("card1"), card("card2", present=False)])
        report = Watch().at(0, rig)
        assert one(report, "gpu_present", card="card2").status is HealthStatus.CRIT
        # It pages once: the count leaves a card it saw vanish to gpu_present.
        assert one(report, "gpu_count").status is HealthStatus.OK
        assert "1 of 2" in one(report, "gpu_count").reason

    def test_a_card_never_seen_is_counted(self) -> None:
        report = Watch().at(0, Rig(cards=[card("card1")]))
        check = one(report, "gpu_count")
        assert check.status is HealthStatus.CRIT and "1 never seen" in check.reason
        assert not [c for c in Watch().at(0, Rig(cards=[card("card1")], expected_cards=0))
                    .checks if c.name == "gpu_count"]

    def test_pcie_below_the_slot_width_under_load(self) -> None:
        from exporter.daemon.sources.amdgpu_sysfs import PcieLink
        x4 = [PcieLink("endpoint", "current", 16e9, 16), PcieLink("endpoint", "max", 16e9, 16),
              PcieLink("upstream", "current", 16e9, 4), PcieLink("upstream", "max", 16e9, 16)]
        x8 = [*x4[:2], PcieLink("upstream", "current", 16e9, 8), x4[3]]
        assert one(Watch().over(0, 300, 30, Rig(cards=[card(pcie_links=x4)])), "gpu_pcie",
                   card="card1").status is HealthStatus.WARN
        ok = one(Watch().over(0, 300, 30, Rig(cards=[card(pcie_links=x8)])), "gpu_pcie",
                 card="card1")
        assert ok.status is HealthStatus.OK and "upstream x8 16 GT/s of x16 16 GT/s" in ok.reason


class TestDecode:
    def test_starvation_names_the_engine_and_the_stall(self) -> None:
        watch, rig = Watch(), Rig(engines=[engine(stall=47.2)])
        # A measured stall is not held again: firing at first sight, as the rule.
        check = one(watch.at(0, rig), "decode_starvation", engine="main")
        assert check.status is HealthStatus.CRIT and check.state is State.FIRING
        assert "main" in check.reason and "47.2 s" in check.reason
        assert check.value == 47.2 and check.threshold == 10

    @pytest.mark.parametrize(("lower", "upper", "status", "between"), [
        (9.0, 12.25, HealthStatus.CRIT, "between 9 s and 12.2 s"),  # a true 12 s stall, 3 s polls
        (7.75, 11.0, HealthStatus.OK, "between 7.8 s and 11 s"),  # a true 8 s one
    ])
    def test_starvation_judges_the_middle_of_the_bounds(self, lower, upper, status,
                                                        between) -> None:
        rig = Rig(engines=[engine(stall=lower, stall_upper=upper)])
        check = one(Watch().at(0, rig), "decode_starvation", engine="main")
        assert check.status is status
        assert check.value == pytest.approx((lower + upper) / 2)
        assert between in check.reason

    def test_a_probe_gap_counts_as_starvation_too(self) -> None:
        rig = Rig(engines=[engine(stall=None)], probes=[probe(max_gap=12.0)])
        check = one(Watch().over(0, 30, 15, rig), "decode_starvation", engine="main")
        assert check.status is HealthStatus.CRIT and "probe waited 12 s" in check.reason

    def test_a_stall_under_the_threshold_is_not_starvation(self) -> None:
        check = one(Watch().over(0, 60, 15, Rig(engines=[engine(stall=9.9)])),
                    "decode_starvation", engine="main")
        assert check.status is HealthStatus.OK

    def test_wedged_queue_needs_a_minute_of_history(self) -> None:
        rig = Rig(engines=[engine(queued_requests=3, running_requests=0)])
        watch = Watch()
        assert one(watch.at(0, rig), "engine_wedged", engine="main").status is HealthStatus.UNKNOWN
        # A long cold prefill also shows none running: ok until the rule's 5m hold.
        check = one(watch.over(0, 60, 15, rig), "engine_wedged", engine="main")
        assert check.status is HealthStatus.OK and "RigEngineWedged fires after 5m" in check.reason
        check = one(watch.over(60, 360, 15, rig), "engine_wedged", engine="main")
        assert check.status is HealthStatus.CRIT and "3 queued, none running" in check.reason
        assert check.alert == "RigEngineWedged"

    def test_where_a_probe_answers_it_decides_wedged(self) -> None:
        rig = Rig(engines=[engine(queued_requests=3, running_requests=0)], probes=[probe()])
        check = one(Watch().over(0, 360, 15, rig), "engine_wedged", engine="main")
        assert check.status is HealthStatus.OK and "last stream probe ok" in check.reason

    def test_stutter_counts_separate_minutes(self) -> None:
        watch = Watch(Thresholds(decode_stutter_for_seconds=0))
        for minute in range(10):
            stall = 4.0 if minute in (1, 4, 7) else 0.0
            watch.over(minute * 60, minute * 60 + 45, 15, Rig(engines=[engine(stall=stall)]))
        # Steps every minute back from 645 s land on 105, 285 and 465 s: one per stall.
        check = one(watch.at(645, Rig(engines=[engine(stall=0.0)])), "decode_stutter",
                    engine="main")
        assert check.status is HealthStatus.WARN and check.value == 3
        # A 12 s stall is starvation, not stutter; two stutter minutes are not enough.
        watch = Watch(Thresholds(decode_stutter_for_seconds=0))
        for minute in range(10):
            stall = {1: 4.0, 4: 12.0, 7: 4.0}.get(minute, 0.0)
            watch.over(minute * 60, minute * 60 + 45, 15, Rig(engines=[engine(stall=stall)]))
        check = one(watch.at(645, Rig(engines=[engine(stall=0.0)])), "decode_stutter",
                    engine="main")
        assert check.status is HealthStatus.OK and check.value == 2

    def test_stutter_is_unknown_until_the_window_fills(self) -> None:
        check = one(Watch().over(0, 300, 15, Rig()), "decode_stutter", engine="main")
        assert check.status is HealthStatus.UNKNOWN and "watched 5m of 10m" in check.reason

    def test_failed_probe_while_the_engine_answers(self) -> None:
        rig = Rig(probes=[probe(success=False, reason="HTTP 503 'overloaded'")])
        check = one(Watch().over(0, 300, 30, rig), "engine_wedged", engine="main")
        assert check.status is HealthStatus.CRIT and "HTTP 503" in check.reason

    def test_engine_down_hides_its_other_checks(self) -> None:
        rig = Rig(down={"engine/main": "GET http://127.0.0.1:30000/metrics: refused"})
        report = Watch().over(0, 300, 30, rig)
        assert one(report, "engine_up", engine="main").status is HealthStatus.CRIT
        assert "refused" in one(report, "engine_up", engine="main").reason
        assert not [c for c in report.checks if c.labels.get("engine") == "main"
                    and c.name != "engine_up"]


class TestQueueAndKv:
    def test_head_of_line_after_five_minutes(self) -> None:
        rig = Rig(engines=[engine(queued_requests=2, running_requests=1)])
        watch = Watch()
        assert one(watch.over(0, 290, 30, rig), "queue", engine="main").status is HealthStatus.OK
        held = one(watch.over(290, 300, 10, rig), "queue", engine="main")
        assert held.status is HealthStatus.WARN

    def test_kv_usage_and_retractions(self) -> None:
        full = Rig(engines=[engine(kv_usage_ratio=0.97)])
        kv_pool = one(Watch().over(0, 300, 30, full), "kv_pool", engine="main")
        assert kv_pool.status is HealthStatus.WARN
        watch = Watch()
        watch.over(0, 300, 30, Rig(engines=[engine(retracted_requests_total=4)]))
        check = one(watch.at(315, Rig(engines=[engine(retracted_requests_total=6)])),
                    "kv_pool", engine="main")
        assert check.status is HealthStatus.WARN and "2 requests retracted" in check.reason
        # The counter created by the first retractions (absent before) counts from 0.
        watch = Watch()
        watch.over(0, 120, 30, Rig())
        check = one(watch.at(135, Rig(engines=[engine(retracted_requests_total=3)])),
                    "kv_pool", engine="main")
        assert check.status is HealthStatus.WARN and "3 requests retracted" in check.reason
        # Near miss: a counter that stood still for the whole window.
        watch = Watch()
        check = one(watch.over(0, 330, 30, Rig(engines=[engine(retracted_requests_total=3)])),
                    "kv_pool", engine="main")
        assert check.status is HealthStatus.OK



class TestSpeculativeDecoding:
    @staticmethod
    def decoding(watch: Watch, start: int, end: int, length: float, per_step: float = 40.0):
        """Observe every 15 s an engine whose decode batches grow by `per_step` a step."""
        report = None
        for t in range(start, end + 1, 15):
            report = watch.at(t, Rig(engines=[engine(spec_accept_length=length,
                                                     decode_batches_total=100 + per_step * t)]))
        return report

    def test_low_acceptance_while_decoding_warns_after_ten_minutes(self) -> None:
        watch = Watch()
        check = one(self.decoding(watch, 0, 585, 1.2), "spec_acceptance", engine="main")
        assert check.status is HealthStatus.OK and "1.20 tokens a decode step" in check.reason
        check = one(self.decoding(watch, 600, 615, 1.2), "spec_acceptance", engine="main")
        assert check.status is HealthStatus.WARN

    def test_healthy_idle_or_absent_is_quiet(self) -> None:
        healthy = self.decoding(Watch(), 0, 900, 2.71)
        assert one(healthy, "spec_acceptance", engine="main").status is HealthStatus.OK
        idle = self.decoding(Watch(), 0, 900, 1.2, per_step=0.0)  # the last value, kept
        assert one(idle, "spec_acceptance", engine="main").status is HealthStatus.OK
        off = Watch().over(0, 900, 15, Rig())  # no speculative decoding: no such check
        assert not [c for c in off.checks if c.name == "spec_acceptance"]


class TestHiCache:
    T = Thresholds(hicache_churn_for_seconds=0, hicache_host_pool_for_seconds=0)

    def over(self, watch: Watch, seconds: int, **rates: float) -> None:
        """Counters growing at `rates` per second (`tier_X`: hits from tier X), with
        L2 at 40 %, observed every 15 s."""
        for t in range(0, seconds + 1, 15):
            values = {k: v * t for k, v in rates.items() if not k.startswith("tier_")}
            tiers = {k[5:]: v * t for k, v in rates.items() if k.startswith("tier_")}
            values.setdefault("hicache_host_capacity_tokens", 500_000)
            values.setdefault("hicache_host_used_tokens", 200_000)
            watch.at(t, Rig(engines=[engine(tiers=tiers or None, **values)]))

    def test_churn_with_few_l2_hits_is_thrash(self) -> None:
        watch = Watch(self.T)
        self.over(watch, 330, hicache_evicted_tokens_total=900,
                  hicache_loaded_back_tokens_total=800, prompt_tokens_total=5000,
                  tier_L1=3000, tier_L2=100)
        report = watch.at(345, Rig(engines=[engine(
            hicache_host_capacity_tokens=500_000, hicache_host_used_tokens=200_000,
            hicache_evicted_tokens_total=900 * 345, hicache_loaded_back_tokens_total=800 * 345,
            prompt_tokens_total=5000 * 345, tiers={"L1": 3000 * 345, "L2": 100 * 345})])
        )
        check = one(report, "hicache_churn", engine="main")
        assert check.status is HealthStatus.WARN
        assert check.value == 800 and "L2 serves 2.0% of prompt tokens" in check.reason
        assert statuses(report) == {"hicache_churn[main]": "warn"}

    def test_churn_with_l2_serving_is_not_thrash(self) -> None:
        watch = Watch(self.T)
        self.over(watch, 330, hicache_evicted_tokens_total=900,
                  hicache_loaded_back_tokens_total=800, prompt_tokens_total=5000,
                  tier_L2=2000)
        report = watch.monitor.report
        assert report is not None
        assert one(report, "hicache_churn", engine="main").status is HealthStatus.OK

    def test_full_l2_while_evicting(self) -> None:
        watch = Watch(self.T)
        self.over(watch, 330, hicache_evicted_tokens_total=50)
        report = watch.at(345, Rig(engines=[engine(
            hicache_host_capacity_tokens=500_000, hicache_host_used_tokens=495_000,
            hicache_evicted_tokens_total=50 * 345)]))
        check = one(report, "hicache_l2_occupancy", engine="main")
        assert check.status is HealthStatus.WARN and "99% full" in check.reason

    def test_no_hicache_no_checks(self) -> None:
        report = Watch().over(0, 60, 15, Rig())
        assert not [c for c in report.checks if c.name.startswith("hicache")]


class TestHost:
    def test_swap_is_unknown_until_the_window_fills_then_warns(self) -> None:
        t = Thresholds(host_swapping_for_seconds=0)
        watch = Watch(t)

        def rig(s: int) -> Rig:  # 2 MiB/s in, 1 MiB/s out
            return Rig(host=host(swap_in_bytes_total=2 * 1024**2 * s,
                                 swap_out_bytes_total=1024**2 * s))

        assert one(watch.at(0, rig(0)), "host_swap").status is HealthStatus.UNKNOWN
        for s in range(15, 301, 15):
            report = watch.at(s, rig(s))
        check = one(report, "host_swap")
        assert check.status is HealthStatus.WARN and "3.0 MiB/s" in check.reason
        assert statuses(report) == {"host_swap[]": "warn"}

    def test_memory_pressure_is_critical(self) -> None:
        rig = Rig(host=host(memory_available_bytes=2 * 1024**3))
        check = one(Watch().over(0, 120, 15, rig), "host_memory")
        assert check.status is HealthStatus.CRIT and "3.1% of RAM available" in check.reason

    def test_cpu_hot_and_a_missing_sensor(self) -> None:
        assert one(Watch().over(0, 300, 30, Rig(host=host(cpu_temperatures_celsius={
            "Tctl": 93.0}))), "cpu_temperature").status is HealthStatus.WARN
        check = one(Watch().at(0, Rig(host=host(cpu_temperatures_celsius={}))),
                    "cpu_temperature")
        assert check.status is HealthStatus.UNKNOWN and "no CPU temperature sensor" in check.reason

    def test_a_source_down_names_itself(self) -> None:
        report = Watch().over(0, 300, 30, Rig(down={"host": "host read: blocked"}))
        check = one(report, "exporter_source", source="host")
        assert check.status is HealthStatus.WARN and "blocked" in check.reason
        assert not [c for c in report.checks if c.name.startswith("host_")]


class TestAlertState:
    """Each line says the state its alert would be in, and which condition it reports."""

    def test_pending_until_the_rules_for_then_firing_even_for_info(self) -> None:
        capped = Rig(cards=[card(power_watts=339.0, throttle_reasons=frozenset({"power"}))])
        watch = Watch()
        check = one(watch.over(0, 290, 10, capped), "gpu_power_capped", card="card1")
        assert check.state is State.PENDING and check.status is HealthStatus.OK
        check = one(watch.over(290, 300, 10, capped), "gpu_power_capped", card="card1")
        assert check.state is State.FIRING and check.status is HealthStatus.OK
        assert one(watch.at(310, Rig()), "gpu_power_capped", card="card1").state is State.INACTIVE
        check = one(Watch().at(0, Rig(engines=[engine(queued_requests=3, running_requests=0)])),
                    "engine_wedged")
        assert check.status is HealthStatus.UNKNOWN and check.state is None

    def test_a_shared_line_reports_the_rule_that_fires_first(self) -> None:
        watch = Watch()
        watch.over(0, 120, 30, Rig())
        full_and_retracting = Rig(engines=[engine(kv_usage_ratio=0.97, retracted_requests_total=3)])
        check = one(watch.over(135, 300, 15, full_and_retracting), "kv_pool")
        # The usage holds too, but its alert waits 5 min; the retractions' fires at once.
        assert (check.signal, check.state, check.status) == ("retractions", State.FIRING,
                                                              HealthStatus.WARN)
        # Both fire: the line keeps to the check's first condition.
        still = Rig(engines=[engine(kv_usage_ratio=0.97, retracted_requests_total=4)])
        check = one(watch.over(300, 435, 15, still), "kv_pool")
        assert (check.signal, check.state) == ("usage", State.FIRING)

    def test_a_vanished_card_and_the_count_name_their_rules(self) -> None:
        report = Watch().at(0, Rig(cards=[card("card1"), card("card2", present=False)]))
        check = one(report, "gpu_present", card="card2")
        assert (check.alert, check.signal, check.state) == ("RigGpuMissing", "vanished",
                                                            State.PENDING)
        check = one(report, "gpu_count")
        assert (check.signal, check.state) == ("count", State.INACTIVE)
        document = report.to_json()["checks"]
        assert {(c["name"], c["signal"], c["state"]) for c in document} >= {
            ("gpu_present", "vanished", "pending"), ("gpu_count", "count", "inactive")}


def test_report_status_ignores_unknown() -> None:
    from exporter.daemon.health.report import Check, Report
    unknown = Check("x", HealthStatus.UNKNOWN, None, None, "s", "why")
    ok = dataclasses.replace(unknown, status=HealthStatus.OK)
    assert Report((unknown, ok), 0, 0).status is HealthStatus.OK
    assert Report((unknown,), 0, 0).status is HealthStatus.UNKNOWN
    assert Report((), 0, 0).status is HealthStatus.UNKNOWN


def test_a_tap_gap_counts_as_starvation() -> None:
    from exporter.daemon.tap.state import TapReading

    class TapRig(Rig):
        def snapshot(self):
            from exporter.daemon.snapshot import Snapshot, SourceResult
            base = super().snapshot()
            tap = TapReading("sglang", "main", {}, (), 0.0, (), 0.0, 12.5, 3, 100)
            return Snapshot((*base.results, SourceResult("tap/main", tap, 0.0)))

    check = one(Watch().at(0, TapRig(engines=[engine(stall=None)])), "decode_starvation",
                engine="main")
    assert check.status is HealthStatus.CRIT
    assert "stream tap waited 12.5 s" in check.reason and "3 streams open" in check.reason


def test_stutter_minutes_count_from_the_tap_or_the_tracker() -> None:
    from exporter.daemon.snapshot import Snapshot, SourceResult
    from exporter.daemon.tap.state import TapReading

    class TapRig(Rig):
        tap_gap: float = 0.0

        def snapshot(self) -> Snapshot:
            base = super().snapshot()
            tap = TapReading("sglang", "main", {}, (), 0.0, (), 0.0, self.tap_gap, 1, 10)
            return Snapshot((*base.results, SourceResult("tap/main", tap, 0.0)))

    watch = Watch(Thresholds(decode_stutter_for_seconds=0))
    for minute in range(10):
        rig = TapRig(engines=[engine(stall=4.0 if minute == 1 else 0.0)])
        rig.tap_gap = 4.0 if minute in (4, 7) else 0.0  # the tracker missed these two
        watch.over(minute * 60, minute * 60 + 45, 15, rig)
    check = one(watch.at(645, TapRig(engines=[engine(stall=0.0)])), "decode_stutter",
                engine="main")
    assert check.status is HealthStatus.WARN and check.value == 3


def llamacpp(**values: float):
    """A llama.cpp reading: no decode-batch counter, no KV usage; its own counters."""
    reading = dataclasses.replace(engine(**values), kind="llamacpp")
    for family in ("decode_batches_total", "kv_usage_ratio"):
        if family not in values:
            reading.metrics.values.pop(family)
    return reading


class TestLlamacpp:
    """The checks that mirror rules reading llama.cpp's own counters."""

    def test_a_wedge_reads_its_forward_passes(self) -> None:
        rig = Rig(engines=[llamacpp(queued_requests=2, running_requests=0,
                                    decode_calls_total=755.0)])
        check = one(Watch().over(0, 360, 15, rig), "engine_wedged", engine="main")
        assert check.status is HealthStatus.CRIT
        assert "0 forward passes in the last 1m" in check.reason

    def test_moving_forward_passes_are_no_wedge(self) -> None:
        watch = Watch()
        for step in range(25):
            report = watch.at(step * 15, Rig(engines=[llamacpp(
                queued_requests=2, running_requests=0, decode_calls_total=755.0 + step)]))
        assert one(report, "engine_wedged", engine="main").status is HealthStatus.OK

    @pytest.mark.parametrize("accepted_per_step,status",
                             [(2, HealthStatus.WARN), (17, HealthStatus.OK)])
    def test_speculative_acceptance_from_counters(self, accepted_per_step: int,
                                                   status: HealthStatus) -> None:
        watch = Watch()
        for step in range(50):  # 12m15s, past the 10 min hold
            report = watch.at(step * 15, Rig(engines=[llamacpp(
                spec_verify_steps_total=10.0 * step,
                spec_accepted_tokens_total=float(accepted_per_step * step),
                spec_draft_tokens_total=30.0 * step)]))
        check = one(report, "spec_acceptance", engine="main")
        assert check.status is status
        assert check.value == pytest.approx(accepted_per_step / 10 + 1)

    def test_no_verification_step_in_the_window_is_no_reading(self) -> None:
        watch = Watch()
        for step in range(50):
            report = watch.at(step * 15, Rig(engines=[llamacpp(
                spec_verify_steps_total=100.0, spec_accepted_tokens_total=20.0,
                spec_draft_tokens_total=300.0)]))
        check = one(report, "spec_acceptance", engine="main")
        assert check.status is HealthStatus.OK and check.value is None
