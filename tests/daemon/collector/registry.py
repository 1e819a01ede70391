"""One scrape's readings rendered through the collector into a fresh registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from exporter.daemon.collector import RigCollector
from exporter.daemon.snapshot import Snapshot, SourceResult


def collected(*results: SourceResult) -> CollectorRegistry:
    """A fresh registry holding only this snapshot, as each scrape builds one."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RigCollector(Snapshot(results)))
    return registry


def answered(source: str, reading: object, seconds: float = 0.01) -> SourceResult:
    return SourceResult(source, reading, seconds)


def failed(source: str, error: str, seconds: float = 0.5) -> SourceResult:
    return SourceResult(source, None, seconds, error)


def sample_names(registry: CollectorRegistry) -> set[str]:
    """The names of every sample, as a scrape shows them (counters with `_total`)."""
    return {sample.name for family in registry.collect() for sample in family.samples}
