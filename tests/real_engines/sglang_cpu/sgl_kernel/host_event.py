"""A timing event on the host's clock, in place of `torch.cpu.Event`.

SGLang's DeviceTimer (sglang/srt/utils/device_timer.py) makes
`torch.get_device_module().Event(enable_timing=True)` for every forward pass it times,
which `--enable-forward-pass-metrics` turns on. On the CPU that is `torch.cpu.Event`,
which takes no arguments (TypeError), and the scheduler dies. On the CPU a pass is
done when the call returns, so the host's clock times it: record takes the time,
elapsed_time is the difference in milliseconds, and there is nothing to wait for.
"""

from __future__ import annotations

import time

import torch


class HostClockEvent:
    """What DeviceTimer asks of an event: record, query, elapsed_time, synchronize."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False) -> None:
        del enable_timing, blocking, interprocess  # always timed; nothing to share
        self._at: float | None = None

    def record(self, stream: object = None) -> None:
        del stream
        self._at = time.perf_counter()

    def query(self) -> bool:
        return self._at is not None

    def elapsed_time(self, end: HostClockEvent) -> float:
        if self._at is None or end._at is None:
            raise RuntimeError("HostClockEvent.elapsed_time: an event was never recorded")
        return (end._at - self._at) * 1000.0

    def synchronize(self) -> None:
        pass

    def wait(self, stream: object = None) -> None:
        del stream


def install() -> None:
    torch.cpu.Event = HostClockEvent
