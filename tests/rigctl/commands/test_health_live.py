"""Acceptance: `rigctl health` as a real process, against a real exporter process
that reads the simulated rig (SGLang server, amdgpu sysfs tree, /proc tree), one
scenario at a time.

The simulated SGLang server runs in this test's event loop, so a scenario can
move its counters as time passes; the sysfs and proc trees are files the
exporter reads. Windows and holds are compressed through the config's
[thresholds] (seconds, not minutes): the same table the rules render from.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from exporter.process.launch import free_port
from exporter.sim.engine.state import SimEngine
from exporter.sim.rig.procfs_writer import GIB, PAGE, HostSpec
from exporter.sim.rig.sysfs_writer import RIG_CARDS
from tests.support.live_rig import MIB, WINDOW_SECONDS, LiveRig, live_rig, write_host

pytestmark = pytest.mark.long_running(25)

async def every(seconds: float, step: Callable[[float], None]) -> None:
    """Call step(elapsed seconds) every `seconds` until cancelled."""
    started = time.monotonic()
    while True:
        step(time.monotonic() - started)
        await asyncio.sleep(seconds)


@asynccontextmanager
async def driving(seconds: float, step: Callable[[float], None]):
    task = asyncio.create_task(every(seconds, step))
    try:
        yield
    finally:
        task.cancel()


def non_ok(report: dict) -> dict[str, str]:
    return {c["name"]: c["status"] for c in report["checks"] if c["status"] in ("warn", "crit")}


def test_healthy_rig_exits_0(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with live_rig(tmp_path) as rig:
            await asyncio.sleep(WINDOW_SECONDS)
            code, out, err = await rig.until(0)
            assert code == 0, out + err
            assert out.startswith("rig OK:")
            assert non_ok(await rig.report()) == {}

    asyncio.run(scenario())


def test_thermal_downclock_exits_2_naming_the_card_and_its_junction(tmp_path: Path) -> None:
    # card2 breathes card1's exhaust: junction 107 °C of 110 °C, sclk held at
    # 1650 of 2304 MHz under full load (the illustrative throttle of
    # docs/facts/amdgpu.md#contrast-samples).
    hot = dataclasses.replace(RIG_CARDS[1], junction_mc=107000, memory_mc=96000,
                              sclk_hz=1650000000, busy_percent=100)

    async def scenario() -> None:
        async with live_rig(tmp_path, cards=(RIG_CARDS[0], hot)) as rig:
            code, out, err = await rig.until(2)
            assert code == 2, out + err
            line = next(x for x in out.splitlines() if "gpu_thermal_downclock" in x)
            assert line.startswith("CRIT") and "card2" in line and "junction 107 °C" in line
            assert "card1" not in "".join(x for x in out.splitlines()
                                          if x.startswith(("CRIT", "WARN")))
            report = await rig.report()
            assert non_ok(report) == {"gpu_thermal_downclock": "crit", "gpu_hot": "warn"}

    asyncio.run(scenario())


def test_prefill_starving_decode_exits_2_naming_the_engine_and_the_stall(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with live_rig(tmp_path) as rig:
            await rig.until(0)
            # A long prefill holds the GPU: no decode batch while 2 requests run. Long
            # enough for two of the tracker's polls on a loaded box, where its 2 %
            # budget spaces them seconds apart (an 8 s pause once fell between two);
            # rigctl reads it as soon as it passes 2 s, so the test does not wait it out.
            rig.engine.pause_decode(30.0)
            code, out, err = await rig.until(2, within=40)
            assert code == 2, out + err
            line = next(x for x in out.splitlines() if "decode_starvation" in x)
            assert line.startswith("CRIT") and "main" in line
            stalled = float(re.search(r"decode stalled ([\d.]+) s", line).group(1))
            assert stalled >= 2.0
            report = await rig.report()
            assert set(non_ok(report)) == {"decode_starvation"}

    asyncio.run(scenario())


def test_hicache_thrash_raises_the_hicache_checks_and_no_others(tmp_path: Path) -> None:
    # Four agents at 65 % of a 196K context outgrow L1 and L2 (docs/facts/rig.md#kv-capacity):
    # 5,112 prompt tokens/s, 767 of them back from L2, 5,112 evicted, L2 99 % full.
    engine = SimEngine(hicache_host_total_tokens=319193, hicache_host_used_tokens=316000,
                       evicted_tokens=0.0, loaded_back_tokens=0.0)

    def thrash(elapsed: float) -> None:
        engine.prompt_tokens["true"] = 5112 * elapsed
        engine.cached_tokens["host"] = 767 * elapsed
        engine.cached_tokens["device"] = 0.0
        engine.evicted_tokens = 5112 * elapsed
        engine.loaded_back_tokens = 767 * elapsed

    async def scenario() -> None:
        async with live_rig(tmp_path, engine=engine) as rig, driving(0.1, thrash):
            await asyncio.sleep(WINDOW_SECONDS)
            code, out, err = await rig.until(1)
            assert code == 1, out + err
            report = await rig.report()
            assert non_ok(report) == {"hicache_churn": "warn", "hicache_l2_occupancy": "warn"}
            churn = next(c for c in report["checks"] if c["name"] == "hicache_churn")
            assert "L2 serves 15% of prompt tokens" in churn["reason"]

    asyncio.run(scenario())


def test_swap_storm_raises_the_swap_check_and_no_others(tmp_path: Path) -> None:
    # Derived (scenario swap-storm): 8 % of RAM available, 24 MiB/s out and 16 MiB/s
    # back in, swap use growing 8 MiB/s, PSI full 4 % (under the 10 % floor).
    async def scenario() -> None:
        async with live_rig(tmp_path) as rig:
            def storm(elapsed: float) -> None:
                write_host(rig.proc, HostSpec(
                    memory_available_bytes=int(0.08 * 64 * GIB),
                    swap_used_bytes=int(62 * MIB + 8 * MIB * elapsed),
                    swap_out_pages=int(24 * MIB * elapsed / PAGE),
                    swap_in_pages=int(16 * MIB * elapsed / PAGE),
                    pressure_some_us=int(0.30 * 1e6 * elapsed),
                    pressure_full_us=int(0.04 * 1e6 * elapsed)))

            async with driving(0.2, storm):
                await asyncio.sleep(WINDOW_SECONDS)
                code, out, err = await rig.until(1)
                assert code == 1, out + err
                report = await rig.report()
                assert non_ok(report) == {"host_swap": "warn"}
                swap = next(c for c in report["checks"] if c["name"] == "host_swap")
                assert swap["value"] >= 1024 * 1024 and swap["unit"] == "bytes/s"

    asyncio.run(scenario())


def test_exporter_down_exits_3_with_the_url_and_the_reason(tmp_path: Path) -> None:
    async def scenario() -> None:
        rig = LiveRig(SimEngine(), "", tmp_path)
        url = f"http://127.0.0.1:{free_port()}"
        code, out, err = await rig.rigctl(exporter=url)
        assert code == 3
        assert f"{url}/api/health" in err and "refused" in err.lower()
        assert out == ""

    asyncio.run(scenario())
