"""Concurrent scrapes share one read of each source instead of multiplying the load."""

from __future__ import annotations

import asyncio

import aiohttp

from exporter.config import load_config
from exporter.runtime import Exporter
from exporter.sources.host import HostReading
from tests.scrape import parse_samples, serving, value


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
