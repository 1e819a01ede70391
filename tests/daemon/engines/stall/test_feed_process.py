"""The plan forward_pass_feed end to end: a publisher process that sends what SGLang
0.5.23's scheduler sends (tests/support/fpm_publisher.py), a real exporter subscribed
to it, and a simulated 0.5.23 /metrics with two streams in flight
(tests/support/sglang_release.py).

The truth is the publisher's own clock (CLOCK_MONOTONIC, shared by both processes):
the time between sending the last decode pass before the gap and the first after it.
A message takes the transport's time to arrive, so the receipt-side bounds are held
to that truth within TRANSPORT_SECONDS; the bounds themselves are generous where a
loaded 2-core box moves them (the poll spacing), never where they must hold.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from exporter.config import Config, GpuConfig, HostConfig
from exporter.daemon.engines.source import EngineSource
from exporter.daemon.runtime import Exporter
from tests.daemon.engines.helpers import engine_config
from tests.support.sglang_release import ReleasePlayback, ReleaseServer

ROOT = Path(__file__).parents[4]
#: A message's trip from the publisher's send to the exporter's socket (ipc, loopback).
TRANSPORT_SECONDS = 0.05


class Publisher:
    def __init__(self, base: str, script: list) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.fpm_publisher", base, json.dumps(script)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stdout.readline() == "READY\n"
        self.marks: dict[str, float] = {}

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    async def until_done(self, timeout: float = 60.0) -> None:
        loop = asyncio.get_running_loop()
        assert self.process.stdout is not None
        async with asyncio.timeout(timeout):
            while True:
                line = await loop.run_in_executor(None, self.process.stdout.readline)
                if line.startswith("MARK "):
                    _, name, at = line.split()
                    self.marks[name] = float(at)
                elif line == "DONE\n" or not line:
                    return

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


async def run(script: list, during=None, seconds_after: float = 0.6) -> dict:  # noqa: ANN001
    """Play the script against a live exporter; `during(exporter, server, publisher)`
    runs beside it. Returns the engine's samples and the publisher's marks."""
    workdir = tempfile.TemporaryDirectory(prefix="fpm-")
    base = f"ipc://{workdir.name}/fpm"
    playback = ReleasePlayback("0.5.23")
    playback.start_requests(streaming=2)
    server = ReleaseServer(playback)
    await server.start()
    publisher = Publisher(base, script)

    async def engine_runs() -> None:
        while True:
            playback.sync()
            await asyncio.sleep(0.05)

    engine = asyncio.create_task(engine_runs())
    config = Config(gpu=GpuConfig(enabled=False), host=HostConfig(enabled=False),
                    engines=(engine_config(server.url, forward_pass_metrics_ipc=base),))
    exporter = Exporter(config)
    await exporter.start()
    try:
        await asyncio.sleep(1.0)  # the subscription joins before the first message
        publisher.go()
        side = asyncio.create_task(during(exporter, server, publisher)) if during else None
        await publisher.until_done()
        await asyncio.sleep(seconds_after)
        values = samples(exporter.render(await exporter.snapshot()).decode())
        if side is not None:
            values["during"] = await side
        values["marks"] = publisher.marks
        return values
    finally:
        await exporter.close()
        engine.cancel()
        publisher.kill()
        await server.stop()
        playback.close()
        workdir.cleanup()


def samples(text: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families
    values: dict = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("engine") not in ("main", None):
                continue
            key = sample.name
            if "pass_kind" in sample.labels:
                key = (sample.name, sample.labels["pass_kind"])
            if sample.name == "rig_engine_decode_stall_plan_info":
                values["plan"] = sample.labels["plan"]
            values[key] = sample.value
    return values


def gap(marks: dict) -> float:
    return marks["resumed"] - marks["stopped"]


DECODING = ["decode", 60, 0.01]


def test_prefill_passes_are_a_stall_bracketed_from_the_feed():
    script = [DECODING, ["mark", "stopped"], ["prefill", 1, 0.7], ["prefill", 1, 1.6],
              ["decode", 1, 0.01], ["mark", "resumed"], DECODING]
    values = asyncio.run(run(script))
    truth = gap(values["marks"])
    low = values["rig_engine_decode_stall_max_seconds"]
    high = values["rig_engine_decode_stall_max_upper_seconds"]
    assert values["plan"] == "forward_pass_feed"
    assert low - TRANSPORT_SECONDS <= truth <= high + TRANSPORT_SECONDS, (low, truth, high)
    assert low >= 2.3  # at least the device time of the passes between
    assert values[("rig_engine_decode_stall_feed_passes_total", "prefill")] == 2
    assert values[("rig_engine_decode_stall_feed_passes_total", "decode")] == 121
    assert values["rig_engine_decode_stall_prefill_run_max_passes"] == 2
    assert values["rig_engine_decode_stall_prefill_run_max_seconds"] == pytest.approx(2.3)
    assert values["rig_engine_decode_stall_feed_dropped_messages_total"] == 0


def test_dropped_messages_and_heartbeats_keep_the_bracket_honest():
    script = [["idle", 2.5], DECODING, ["mark", "stopped"], ["prefill", 1, 0.8],
              ["drop", 2], ["prefill", 1, 1.2], ["decode", 1, 0.01], ["mark", "resumed"],
              DECODING]
    values = asyncio.run(run(script))
    truth = gap(values["marks"])
    low = values["rig_engine_decode_stall_max_seconds"]
    high = values["rig_engine_decode_stall_max_upper_seconds"]
    assert values[("rig_engine_decode_stall_feed_passes_total", "idle")] >= 2
    assert values["rig_engine_decode_stall_feed_dropped_messages_total"] == 2
    # The lost messages may have been decode passes: at least the longer known run.
    assert 1.2 <= low <= truth + TRANSPORT_SECONDS
    assert truth <= high + TRANSPORT_SECONDS
    # The span between the receipts around the loss: about the 1.2 s pass after it,
    # less what a loaded box's receipt of the message before it came late by.
    assert values["rig_engine_decode_stall_max_blind_seconds"] >= 1.0


def test_a_long_silent_pass_grows_while_metrics_answer():
    async def watch(exporter, server, publisher) -> list[float]:  # noqa: ANN001
        seen = []
        for _ in range(40):
            await asyncio.sleep(0.25)
            text = exporter.render(await exporter.snapshot()).decode()
            seen.append(samples(text).get("rig_engine_decode_stall_seconds", -1.0))
        return seen

    script = [DECODING, ["mark", "stopped"], ["silent", 5.0], ["prefill", 1, 0.0],
              ["decode", 1, 0.01], ["mark", "resumed"], DECODING]
    values = asyncio.run(run(script, during=watch))
    truth = gap(values["marks"])
    assert values["plan"] == "forward_pass_feed"
    # Nothing comes through the pass; the stall under way is read growing all the same.
    assert max(values["during"]) >= 2.0
    assert values["rig_engine_decode_stall_max_seconds"] <= truth + TRANSPORT_SECONDS
    assert truth <= values["rig_engine_decode_stall_max_upper_seconds"] + TRANSPORT_SECONDS
    assert values["rig_engine_decode_stall_max_seconds"] >= 4.0


def test_a_silent_feed_from_a_dead_engine_is_not_a_growing_stall():
    async def scenario() -> tuple[float, float, float]:
        workdir = tempfile.TemporaryDirectory(prefix="fpm-")
        base = f"ipc://{workdir.name}/fpm"
        playback = ReleasePlayback("0.5.23")
        playback.start_requests(streaming=2)
        server = ReleaseServer(playback)
        await server.start()
        publisher = Publisher(base, [DECODING, ["mark", "stopped"], ["silent", 600]])
        config = Config(gpu=GpuConfig(enabled=False), host=HostConfig(enabled=False),
                        engines=(engine_config(server.url, forward_pass_metrics_ipc=base),))
        exporter = Exporter(config)
        await exporter.start()
        try:
            await asyncio.sleep(1.0)
            publisher.go()
            await asyncio.sleep(2.0)  # decoding, then silent
            source = next(s for s in exporter.sources if isinstance(s, EngineSource))
            stall = source.stall
            assert stall is not None and stall.plan is not None
            assert stall.plan.name == "forward_pass_feed"
            await server.stop()  # the engine is gone: /metrics refuses
            publisher.kill()
            stopped = time.monotonic()
            await asyncio.sleep(4.0)
            state = stall.state()
            assert state is not None
            return state.current_seconds, state.max_recent_upper_seconds, stopped
        finally:
            await exporter.close()
            publisher.kill()
            playback.close()
            workdir.cleanup()

    current, upper, _ = asyncio.run(scenario())
    assert current == 0.0
    # At most the silence up to the engine's failure, never the 4 s after it.
    assert upper <= 3.0
