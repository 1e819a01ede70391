"""The engine source's choice of signals and reader, made once at start, end to end."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import Config, GpuConfig, HostConfig
from exporter.daemon.engines.stall.readers import TRACKER_BUDGET, RenderPacer
from exporter.daemon.engines.stall.tracker import DecodeStallTracker
from exporter.daemon.runtime import Exporter
from tests.daemon.engines.helpers import engine_config
from tests.support.sglang_release import ReleasePlayback, ReleaseServer


def run_exporter(version: str, seconds: float, files: bool,
                 **playback_fields: object) -> tuple[dict, int]:
    """The exporter's series of engine main (plan_info by its labels), and the renders
    the tracker caused."""

    async def scenario() -> tuple[str, int]:
        playback = ReleasePlayback(version, **playback_fields)
        playback.start_requests(streaming=2)
        server = ReleaseServer(playback)
        await server.start()

        async def engine_runs() -> None:  # its processes write as time passes
            while True:
                playback.sync()
                await asyncio.sleep(0.05)

        engine = asyncio.create_task(engine_runs())
        try:
            extra = {"metrics_dir": playback.directory} if files else {}
            config = Config(gpu=GpuConfig(enabled=False), host=HostConfig(enabled=False),
                            engines=(engine_config(server.url, **extra),))
            exporter = Exporter(config)
            await exporter.start()
            try:
                await asyncio.sleep(seconds)
                renders_by_tracker = server.renders
                text = exporter.render(await exporter.snapshot()).decode()
            finally:
                await exporter.close()
        finally:
            engine.cancel()
            await server.stop()
            playback.close()
        return text, renders_by_tracker

    text, renders = asyncio.run(scenario())
    values: dict = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("engine") == "main":
                values[sample.name] = sample.value
                if sample.name == "rig_engine_decode_stall_plan_info":
                    values["plan"] = {k: v for k, v in sample.labels.items()
                                      if k in ("plan", "progress", "in_flight")}
    return values, renders


def test_with_metrics_dir_the_tracker_costs_no_render():
    values, renders = run_exporter("0.5.23", 1.5, files=True)
    assert renders == 0
    assert values["rig_engine_decode_stall_resolution_seconds"] == 0.25
    assert values["rig_engine_decode_stall_seconds"] == 0.0


def test_without_metrics_dir_the_resolution_is_the_budget_s():
    values, renders = run_exporter("0.5.23", 1.5, files=False)
    assert renders >= 1
    assert values["rig_engine_decode_stall_resolution_seconds"] >= 0.25


def test_a_release_not_read_leaves_the_series_absent_with_one_log_line(caplog):
    with caplog.at_level(logging.WARNING, logger="exporter.daemon.engines.stall.planner"):
        values, renders = run_exporter("0.5.4", 1.5, files=False)
    # The stall series are absent; the one that says the tracker is down is 0.
    assert values.pop("rig_engine_decode_stall_tracker_up") == 0.0
    assert not any(name.startswith("rig_engine_decode_stall") for name in values)
    assert renders == 0
    lines = [r for r in caplog.records if "stall tracker" in r.getMessage()]
    assert len(lines) == 1 and "0.5.4" in lines[0].getMessage()
    assert "older than 0.5.5" in lines[0].getMessage()


@pytest.mark.parametrize("reported", ["0.0.0.dev0", "0.5.24.dev7+gf84475c"])
@pytest.mark.parametrize("files", [True, False])
def test_a_source_tree_build_gets_the_plan_its_families_support(reported, files, caplog):
    """0.5.23's metrics under a version that names no release: planned by what the
    engine shows, exported as plan_info and logged once with the evidence."""
    with caplog.at_level(logging.INFO, logger="exporter.daemon.engines.stall.planner"):
        values, _ = run_exporter("0.5.23", 1.5, files=files, reported_version=reported)
    assert values["plan"] == {"plan": "http_in_flight",
                              "progress": "decode_passes+streamed_tokens",
                              "in_flight": "running_while_http_active"}
    assert values["rig_engine_decode_stall_seconds"] == 0.0
    lines = [r.getMessage() for r in caplog.records if "stall tracker plan" in r.getMessage()]
    assert len(lines) == 1
    assert reported in lines[0] and "http_requests_active" in lines[0]
    assert "/v1/loads answers" in lines[0]


class TestRenderPacer:
    def test_spacing_keeps_render_time_within_the_budget(self):
        pacer = RenderPacer(floor_seconds=0.25)
        for _ in range(8):
            pacer.record(0.030)
        interval = pacer.interval_seconds()
        assert 0.030 / interval == pytest.approx(TRACKER_BUDGET)
        assert 0.030 / interval <= 0.02

    def test_never_faster_than_the_floor(self):
        pacer = RenderPacer(floor_seconds=0.25)
        pacer.record(0.0001)
        assert pacer.interval_seconds() == 0.25

    def test_one_answer_that_waited_out_a_hang_does_not_blind_the_tracker(self):
        pacer = RenderPacer(floor_seconds=0.25)
        for took in (0.03, 0.03, 2.0, 0.03, 0.03):
            pacer.record(took)
        assert pacer.interval_seconds() == pytest.approx(0.03 / TRACKER_BUDGET)


def test_standstills_under_a_second_are_decode_cadence_not_stalls():
    tracker = DecodeStallTracker()
    progress = 0
    for step in range(40):  # a token every 0.5 s, polled every 0.25 s
        progress += step % 2
        tracker.observe(step * 0.25, progress, 1)
    state = tracker.state(10.0)
    assert (state.current_seconds, state.max_recent_seconds, state.total_seconds) == (0, 0, 0)
