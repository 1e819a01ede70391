"""A true energy counter from amdgpu's wrapping energy accumulator.

SMU 13.0.0 keeps `EnergyAccumulator` as a u32 in `SmuMetrics_t`
(`smu13_driver_if_v13_0_0.h`) and copies it into the u64 `energy_accumulator`
of gpu_metrics v1.3 (`smu_v13_0_0_get_gpu_metrics`). At 15.259 µJ (2^-16 J) per
count it wraps every 65,536 J: every 3.2 minutes at 339 W. The exporter adds up
the wrapped deltas, so the counter only resets when the exporter restarts.
"""

from __future__ import annotations

from dataclasses import dataclass

# 2^-16 J per count: the unit gpu_metrics v1.4+ documents ("Energy (15.259uJ
# (2^-16) units)", kgd_pp_interface.h) and amdsmi reports as the counter
# resolution. Not confirmed for SMU 13.0.0, whose v1.3 struct states no unit.
JOULES_PER_COUNT = 2.0**-16
_WRAP_COUNTS = 2**32  # the firmware's field is a u32
WRAP_JOULES = _WRAP_COUNTS * JOULES_PER_COUNT


@dataclass
class _Last:
    counts: int
    clock_ns: int | None


class EnergyCounter:
    """Accumulates one card's firmware counter readings into joules."""

    def __init__(self) -> None:
        self.joules = 0.0
        self._last: _Last | None = None

    def add(self, counts: int, clock_ns: int | None, watts: float | None) -> float:
        """Account for a new reading; return the joules counted so far.

        `clock_ns` (gpu_metrics system_clock_counter) and `watts` (its average
        socket power) tell how many whole wraps fit between two readings that
        are further apart than one wrap, and whether the firmware counter
        restarted (a card reset) rather than wrapped.
        """
        last, self._last = self._last, _Last(counts, clock_ns)
        if last is None:
            return self.joules
        step = (counts - last.counts) % _WRAP_COUNTS * JOULES_PER_COUNT
        expected = _expected_joules(last, clock_ns, watts)
        if expected is not None:
            step += max(0, round((expected - step) / WRAP_JOULES)) * WRAP_JOULES
            since_reset = counts * JOULES_PER_COUNT
            if counts < last.counts and abs(since_reset - expected) < abs(step - expected):
                step = since_reset  # the firmware counter started again from 0
        self.joules += step
        return self.joules


def _expected_joules(last: _Last, clock_ns: int | None, watts: float | None) -> float | None:
    if clock_ns is None or last.clock_ns is None or watts is None:
        return None
    return watts * max(clock_ns - last.clock_ns, 0) / 1e9
