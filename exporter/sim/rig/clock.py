"""Compressed time for the simulated rig: the scenario clock.

One convention across the project (`alerts/timescale.py`, the simulated SGLang
server's `--time-scale`, `rigctl demo --speed`): a time scale F means the rig's
life runs F times faster than real time, so at F = 20 a scenario second lasts
50 ms. The rules judging such a rig are the time-scaled copy that
`alerts.timescale` generates, and `alerts.timescale.scaled_thresholds` gives the
values a test compares against.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class ScenarioClock:
    """Scenario seconds since the rig started, advancing F times faster than real time.

    The factor may change between plays; the clock stays continuous across it.
    """

    def __init__(self, time_scale: float, real: Callable[[], float] = time.monotonic) -> None:
        _check(time_scale)
        self._real = real
        self._base_real = real()
        self._base_scenario = 0.0
        self.time_scale = time_scale

    def now(self) -> float:
        return self._base_scenario + (self._real() - self._base_real) * self.time_scale

    def rescale(self, time_scale: float) -> None:
        _check(time_scale)
        self._base_scenario, self._base_real = self.now(), self._real()
        self.time_scale = time_scale

    def real_seconds(self, scenario_seconds: float) -> float:
        return scenario_seconds / self.time_scale


def _check(time_scale: float) -> None:
    if time_scale <= 0:
        raise ValueError(f"time scale must be greater than 0, got {time_scale!r}")
