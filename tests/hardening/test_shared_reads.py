"""Concurrent scrapes share one read of each source instead of multiplying the load,
and scrapes one after another share a GPU reading younger than its max age."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from exporter.config import load_config
from exporter.daemon.runtime import Exporter
from exporter.daemon.sources import gpu
from exporter.daemon.sources.amdgpu_sysfs import AmdgpuSysfs
from exporter.daemon.sources.gpu import GpuSource
from exporter.daemon.sources.host import HostReading
from tests.scrape import parse_samples, serving, value
from tests.support.sysfs_tree import SYSFS_FIXTURE


class CountingSource:
    """Stands in for SGLang or sysfs: each read takes 200 ms and is counted."""

    name = "host"

    def __init__(self) -> None:
        self.reads = 0

    async def read(self) -> object:
        self.reads += 1
        await asyncio.sleep(0.2)
        return HostReading(64e9, 19e9, 8e9, 62e6, 0.0, 0.0)


class CountingExporter(Exporter):
    renders = 0

    def render(self, snapshot):  # type: ignore[override]
        type(self).renders += 1
        return Exporter.render(snapshot)


def test_fifty_concurrent_scrapes_cost_one_read_and_one_render() -> None:
    source = CountingSource()
    exporter = CountingExporter(load_config({}), [source])

    async def scrape_many() -> list[str]:
        async with serving(exporter) as url, aiohttp.ClientSession() as session:
            async def one() -> str:
                async with session.get(url + "/metrics") as response:
                    assert response.status == 200
                    return await response.text()
            return await asyncio.gather(*(one() for _ in range(50)))

    bodies = asyncio.run(scrape_many())
    # The 50 requests arrive within the 200 ms read; allow a straggler or two on a
    # loaded machine, never one read per scrape.
    assert source.reads <= 3
    assert CountingExporter.renders == source.reads
    assert all(value(parse_samples(b), "rig_source_up", source="host") == 1
               for b in bodies)


def test_a_scrape_after_the_shared_read_reads_again() -> None:
    source = CountingSource()
    exporter = Exporter(load_config({}), [source])

    async def twice() -> None:
        await exporter.snapshot()
        await exporter.snapshot()

    asyncio.run(twice())
    assert source.reads == 2  # sharing is for overlap only: no stale cache


def test_one_cancelled_scraper_does_not_cancel_the_shared_read() -> None:
    source = CountingSource()
    exporter = Exporter(load_config({}), [source])

    async def run() -> bool:
        first = asyncio.ensure_future(exporter.snapshot())
        second = asyncio.ensure_future(exporter.snapshot())
        await asyncio.sleep(0.05)
        first.cancel()
        snapshot = await second
        return snapshot.results[0].up

    assert asyncio.run(run()) is True
    assert source.reads == 1


class CountingSysfs(AmdgpuSysfs):
    """The fixture's two cards, each full read of their files counted."""

    reads = 0

    def read_cards(self):  # type: ignore[override]
        type(self).reads += 1
        return super().read_cards()


def test_a_gpu_reading_younger_than_its_max_age_is_served_again() -> None:
    now = [100.0]
    source = GpuSource(CountingSysfs(SYSFS_FIXTURE), max_age_seconds=1.0, clock=lambda: now[0])

    async def read_at(*times: float) -> list[object]:
        readings = []
        for t in times:
            now[0] = 100.0 + t
            readings.append(await source.read())
        return readings

    CountingSysfs.reads = 0
    first, again, late, fresh = asyncio.run(read_at(0.0, 0.5, 0.99, 1.0))
    assert first is again is late  # within the second: the same reading, no file opened
    assert fresh is not first and CountingSysfs.reads == 2


def test_fifty_scrapers_back_to_back_read_the_cards_once_a_second(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "AmdgpuSysfs", CountingSysfs)
    exporter = Exporter(load_config({"gpu": {"backend": "sysfs",
                                             "sysfs_root": str(SYSFS_FIXTURE)},
                                     "host": {"enabled": False}}))
    max_age = exporter.config.gpu.reading_max_age_seconds

    async def scrape_for(seconds: float) -> tuple[int, float]:
        scrapes = 0
        async with serving(exporter) as url, aiohttp.ClientSession() as session:
            loop = asyncio.get_running_loop()
            started = loop.time()

            async def scraper() -> None:
                nonlocal scrapes
                while loop.time() - started < seconds:
                    async with session.get(url + "/metrics") as response:
                        assert response.status == 200
                        await response.read()
                    scrapes += 1
            await asyncio.gather(*(scraper() for _ in range(50)))
            return scrapes, loop.time() - started

    CountingSysfs.reads = 0
    scrapes, elapsed = asyncio.run(scrape_for(2.0))
    # Each read begins at least max_age after the one before it.
    assert CountingSysfs.reads <= elapsed / max_age + 1, (CountingSysfs.reads, scrapes)
    assert scrapes > CountingSysfs.reads
