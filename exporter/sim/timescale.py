"""Compressed time: one factor for the simulated rig and for the rules judging it.

A scenario runs in scenario seconds; with `time_scale` 0.05 a scenario second
lasts 50 ms of real time, so a 47 s decode stall takes 2.35 s. What the exporter
measures in real time shrinks by the factor (stall lengths, probe gaps, PSI
stall seconds), and counters the rig moves in scenario time grow faster by its
inverse (tokens, swap bytes). Thresholds follow the same rule, so one threshold
table judges the rig at any time scale: durations times the factor, rates per
second divided by it, everything else unchanged.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from exporter.thresholds import Thresholds


def scaled_thresholds(thresholds: Thresholds, time_scale: float) -> Thresholds:
    """`thresholds` for a rig running at `time_scale` (values are left as floats)."""
    changes: dict[str, float] = {}
    for f in dataclasses.fields(thresholds):
        value = getattr(thresholds, f.name)
        if f.name.endswith("_per_second"):
            changes[f.name] = value / time_scale
        elif f.name.endswith("_seconds"):
            changes[f.name] = value * time_scale
    return dataclasses.replace(thresholds, **changes)


class ScenarioClock:
    """Scenario seconds since the rig started, advancing at 1/time_scale of real time.

    The factor may change between plays; the clock stays continuous across it.
    """

    def __init__(self, time_scale: float, real: Callable[[], float] = time.monotonic) -> None:
        if time_scale <= 0:
            raise ValueError(f"time scale must be greater than 0, got {time_scale!r}")
        self._real = real
        self._base_real = real()
        self._base_scenario = 0.0
        self.time_scale = time_scale

    def now(self) -> float:
        return self._base_scenario + (self._real() - self._base_real) / self.time_scale

    def rescale(self, time_scale: float) -> None:
        if time_scale <= 0:
            raise ValueError(f"time scale must be greater than 0, got {time_scale!r}")
        self._base_scenario, self._base_real = self.now(), self._real()
        self.time_scale = time_scale

    def real_seconds(self, scenario_seconds: float) -> float:
        return scenario_seconds * self.time_scale
