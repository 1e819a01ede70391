"""The dispatch point from a reading type to the families it becomes, and small builders."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import singledispatch
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

PREFIX = "rig_"


class EngineNamed(Protocol):
    """A reading of one engine: its configured name and its kind."""

    @property
    def kind(self) -> str: ...

    @property
    def name(self) -> str: ...


def engine_label_values(reading: EngineNamed) -> list[str]:
    """The values of ENGINE_LABELS (exporter/schema.py), in that order."""
    return [reading.name, reading.kind]


@singledispatch
def families(reading: object) -> Iterable[Metric]:
    raise TypeError(f"no metric families registered for {type(reading).__name__}")


def gauge(name: str, documentation: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, documentation, labels=list(labels))


def counter(name: str, documentation: str, labels: Sequence[str] = ()) -> CounterMetricFamily:
    # CounterMetricFamily appends _total itself: pass the name without it.
    return CounterMetricFamily(PREFIX + name.removesuffix("_total"), documentation,
                               labels=list(labels))


def non_empty(*metric_families: Metric) -> Iterable[Metric]:
    """Families with at least one sample: an absent reading is an absent series."""
    return (f for f in metric_families if f.samples)
