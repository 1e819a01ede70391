"""The GPU source: amdgpu sysfs first, pyrsmi where ROCm loads.

sysfs carries everything a 7900 XTX exposes (docs/facts/amdgpu.md); pyrsmi
has no temperature, clock or throttle calls, so it only ever overlays
utilisation, VRAM, power and fan on the sysfs reading.

A reading younger than `[gpu] reading_max_age_seconds` (1 s) is served again rather
than reread: scrapes that overlap already share one read (exporter/daemon/runtime.py), and
this bounds the driver's work under scrapes that come one after another
(docs/gpu.md#how-often-the-card-files-are-read).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from exporter.daemon.sources.amdgpu_sysfs import AmdgpuSysfs, CardReading
from exporter.daemon.sources.blocking import BlockingRead
from exporter.daemon.sources.pyrsmi_overlay import PyrsmiOverlay, load_rocml

log = logging.getLogger(__name__)


@dataclass
class GpuReading:
    backend: str
    cards: list[CardReading] = field(default_factory=list)
    # From the config: how many cards the rig should have (0: not counted).
    expected_cards: int = 0


class GpuSource:
    name = "gpu"

    def __init__(self, sysfs: AmdgpuSysfs, overlay: PyrsmiOverlay | None = None,
                 expected_cards: int = 0, max_age_seconds: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sysfs = sysfs
        self.overlay = overlay
        self.expected_cards = expected_cards
        self.max_age_seconds = max_age_seconds
        self.clock = clock
        self._read = BlockingRead(self.read_now, f"GPU read under {sysfs.root}")
        self._last: tuple[float, GpuReading] | None = None  # (when its read began, it)

    @classmethod
    def from_backend(cls, backend: str, sysfs_root: str,
                     cards: str | Sequence[str] = "discrete",
                     expected_cards: int = 0, max_age_seconds: float = 0.0) -> GpuSource:
        overlay = None
        if backend in ("auto", "pyrsmi"):
            rocml = load_rocml(required=backend == "pyrsmi")
            overlay = PyrsmiOverlay(rocml) if rocml is not None else None
        return cls(AmdgpuSysfs(sysfs_root, cards), overlay, expected_cards, max_age_seconds)

    async def read(self) -> GpuReading:
        started = self.clock()
        if self._last is not None and started - self._last[0] < self.max_age_seconds:
            return self._last[1]
        reading = await self._read()  # a failure is not kept: the next scrape reads again
        self._last = (started, reading)
        return reading

    def read_now(self) -> GpuReading:
        cards = self.sysfs.read_cards()
        if self.overlay is None:
            return GpuReading("sysfs", cards, self.expected_cards)
        for card in cards:
            if card.present:
                self.overlay.apply(card)
        return GpuReading("pyrsmi+sysfs", cards, self.expected_cards)
