"""Faults the exporter must survive while it runs: each serves what it still can."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import aiohttp
from aiohttp import web

from exporter.config import load_config
from exporter.daemon.runtime import Exporter
from exporter.sim.engine.state import SimEngine
from exporter.sim.rig.procfs_writer import HostSpec, write_proc
from exporter.sim.rig.sysfs_writer import RIG_CARDS, remove_card, write_card
from tests.daemon.engines.helpers import running_sim
from tests.scrape import parse_samples, serving, value

CARD1 = next(spec for spec in RIG_CARDS if spec.card == "card1")


def _exporter(tmp_path: Path, sysfs: Path, **engine: object) -> Exporter:
    write_proc(tmp_path / "proc", HostSpec())
    # reading_max_age_seconds 0: each scrape rereads the card tree these tests change.
    raw: dict = {"gpu": {"backend": "sysfs", "sysfs_root": str(sysfs),
                         "reading_max_age_seconds": 0},
                 "host": {"proc_root": str(tmp_path / "proc")},
                 "web": {"scrape_deadline_seconds": 1.0}}
    if engine:
        raw["engine"] = [{"name": "main", **engine}]
    return Exporter(load_config(raw))


async def _scrape(url: str) -> dict:
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as response:
        assert response.status == 200
        return parse_samples(await response.text())


def engine_value(samples: dict, family: str) -> float | None:
    return samples.get((family, frozenset({"engine": "main", "kind": "sglang"}.items())))


def present(samples: dict, pci_bus: str) -> dict[str, float]:
    """card -> rig_gpu_present for the card at `pci_bus`."""
    return {dict(labels)["card"]: v for (name, labels), v in samples.items()
            if name == "rig_gpu_present" and dict(labels).get("pci_bus") == pci_bus}


def test_card_vanishes_and_comes_back_under_the_same_index(sysfs_root: Path,
                                                           tmp_path: Path) -> None:
    async def run() -> list[dict]:
        async with serving(_exporter(tmp_path, sysfs_root)) as url:
            before = await _scrape(url)
            remove_card(sysfs_root, "card1")
            gone = await _scrape(url)
            write_card(sysfs_root, CARD1)
            return [before, gone, await _scrape(url)]

    before, gone, back = asyncio.run(run())
    assert present(before, CARD1.endpoint) == {"card1": 1}
    assert present(gone, CARD1.endpoint) == {"card1": 0}
    assert present(back, CARD1.endpoint) == {"card1": 1}
    assert value(back, "rig_gpu_temperature_celsius", card="card1", sensor="junction") is not None


def test_card_comes_back_under_another_index_is_the_same_card(sysfs_root: Path,
                                                              tmp_path: Path) -> None:
    async def run() -> list[dict]:
        async with serving(_exporter(tmp_path, sysfs_root)) as url:
            await _scrape(url)
            remove_card(sysfs_root, "card1")
            await _scrape(url)
            # A driver reset re-probes the card as card3 at the same PCI address.
            write_card(sysfs_root, replace(CARD1, card="card3"))
            return [await _scrape(url), await _scrape(url)]

    back, later = asyncio.run(run())
    for samples in (back, later):
        # Keyed by PCI address: the card is present again, and not also missing as card1.
        assert present(samples, CARD1.endpoint) == {"card3": 1}
        assert present(samples, "0000:0a:00.0") == {"card2": 1}


def test_sysfs_root_becomes_unreadable_and_recovers(sysfs_root: Path, tmp_path: Path) -> None:
    async def run() -> list[dict]:
        async with serving(_exporter(tmp_path, sysfs_root)) as url:
            first = await _scrape(url)
            hidden = sysfs_root.with_name("hidden")
            sysfs_root.rename(hidden)
            # Root ignores permission bits, so "unreadable" is a root that is a file.
            sysfs_root.write_text("not a directory\n")
            broken = await _scrape(url)
            sysfs_root.unlink()
            hidden.rename(sysfs_root)
            return [first, broken, await _scrape(url)]

    first, broken, recovered = asyncio.run(run())
    assert value(first, "rig_source_up", source="gpu") == 1
    assert value(broken, "rig_source_up", source="gpu") == 0
    assert value(broken, "rig_source_up", source="host") == 1
    assert value(broken, "rig_host_memory_total_bytes") == HostSpec().memory_total_bytes
    assert value(recovered, "rig_source_up", source="gpu") == 1


def test_proc_pressure_absent_serves_memory_without_psi(sysfs_root: Path, tmp_path: Path) -> None:
    exporter = _exporter(tmp_path, sysfs_root)
    for path in (tmp_path / "proc" / "pressure").glob("*"):
        path.unlink()
    (tmp_path / "proc" / "pressure").rmdir()

    async def run() -> dict:
        async with serving(exporter) as url:
            return await _scrape(url)

    samples = asyncio.run(run())
    assert value(samples, "rig_source_up", source="host") == 1
    assert value(samples, "rig_host_memory_available_bytes") == HostSpec().memory_available_bytes
    assert not any(name == "rig_host_memory_pressure_stall_seconds_total" for name, _ in samples)


async def _headers_then_silence(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/plain; version=0.0.4"})
    await response.prepare(request)
    await response.write(b"# TYPE sglang:num_running_reqs gauge\n")
    await asyncio.sleep(3600)
    return response


def test_engine_that_hangs_after_sending_headers(sysfs_root: Path, tmp_path: Path) -> None:
    async def run() -> tuple[dict, float]:
        app = web.Application()
        app.router.add_get("/metrics", _headers_then_silence)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            exporter = _exporter(tmp_path, sysfs_root, url=f"http://127.0.0.1:{port}",
                                 stall_tracker=False)
            async with serving(exporter) as url:
                loop = asyncio.get_running_loop()
                started = loop.time()
                samples = await _scrape(url)
                return samples, loop.time() - started
        finally:
            await runner.cleanup()

    samples, took = asyncio.run(run())
    assert took < 5  # the 1 s deadline, not the hour
    assert value(samples, "rig_source_up", source="engine/main") == 0
    assert value(samples, "rig_source_up", source="gpu") == 1


def test_engine_restart_between_scrapes_is_no_stall(sysfs_root: Path, tmp_path: Path) -> None:
    state = SimEngine()
    state.running = 2

    async def run() -> list[dict]:
        async with running_sim(state) as sim:
            exporter = _exporter(tmp_path, sysfs_root, url=sim.url)
            async with serving(exporter) as url:
                await asyncio.sleep(1.0)
                before = await _scrape(url)
                state.restart()  # counters gone; decoding resumes from zero
                await asyncio.sleep(1.5)
                return [before, await _scrape(url)]

    before, after = asyncio.run(run())
    for samples in (before, after):
        assert value(samples, "rig_source_up", source="engine/main") == 1
        stall = engine_value(samples, "rig_engine_decode_stall_seconds")
        # The tracker sees the decoding engine, so the series is there; absent
        # would mean the restart blinded it.
        assert stall is not None and stall < 0.5
    stalled = [engine_value(s, "rig_engine_decode_stalled_seconds_total")
               for s in (before, after)]
    assert None not in stalled
    assert stalled[1] - stalled[0] < 0.5
