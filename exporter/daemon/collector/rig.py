"""The exporter's own families: which sources answered, and how long they took."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from exporter import __version__
from exporter.daemon.collector.families import gauge
from exporter.daemon.snapshot import Snapshot


def rig_families(snapshot: Snapshot) -> Iterator[Metric]:
    up = gauge("source_up", "1 if the source answered this scrape, else 0.", ["source"])
    duration = gauge("source_scrape_duration_seconds",
                     "Time the source took to answer this scrape.", ["source"])
    for result in snapshot.results:
        up.add_metric([result.name], 1.0 if result.up else 0.0)
        duration.add_metric([result.name], result.duration_seconds)
    yield up
    yield duration
    build = gauge("build_info", "The exporter's version; the value is always 1.", ["version"])
    build.add_metric([__version__], 1.0)
    yield build
