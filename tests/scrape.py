"""Test helpers: serve an Exporter over real loopback HTTP and read its samples."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import aiohttp
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from exporter.daemon.runtime import Exporter
from exporter.daemon.web.app import make_app

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_samples(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


@asynccontextmanager
async def serving(exporter: Exporter) -> AsyncIterator[str]:
    """The exporter's base URL on 127.0.0.1, served by the real web app."""
    server = TestServer(make_app(exporter), host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def get(url: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, response.headers.get("Content-Type", ""), await response.text()


def scrape(url: str, timeout: float = 20.0) -> Samples:
    """A running exporter's samples, read over HTTP as Prometheus reads them."""
    with urllib.request.urlopen(url + "/metrics", timeout=timeout) as response:
        return parse_samples(response.read().decode())


def ended_stall_bounds(url: str, within_seconds: float,
                       log: Callable[[], str] = lambda: "", **labels: str
                       ) -> tuple[float, float]:
    """The exported (lower, upper) bounds of the window's longest stall, once the
    stall under way has ended (`rig_engine_decode_stall_seconds` back at 0); fails with
    the samples and `log()` (the exporter's log, say) after `within_seconds`."""
    deadline = time.monotonic() + within_seconds
    while True:
        samples = scrape(url)
        lower = value(samples, "rig_engine_decode_stall_max_seconds", **labels)
        current = value(samples, "rig_engine_decode_stall_seconds", **labels)
        if lower and current == 0.0:
            upper = value(samples, "rig_engine_decode_stall_max_upper_seconds", **labels)
            assert upper is not None
            return lower, upper
        assert time.monotonic() < deadline, (samples, log())
        time.sleep(0.25)
