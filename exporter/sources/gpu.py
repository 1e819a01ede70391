"""The GPU source: amdgpu sysfs first, pyrsmi where ROCm loads.

sysfs carries everything a 7900 XTX exposes (docs/facts/amdgpu.md); pyrsmi
has no temperature, clock or throttle calls, so it only ever overlays
utilisation, VRAM, power and fan on the sysfs reading.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from exporter.sources.amdgpu_sysfs import AmdgpuSysfs, CardReading
from exporter.sources.blocking import BlockingRead
from exporter.sources.pyrsmi_overlay import PyrsmiOverlay, load_rocml

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
                 expected_cards: int = 0) -> None:
        self.sysfs = sysfs
        self.overlay = overlay
        self.expected_cards = expected_cards
        self._read = BlockingRead(self.read_now, f"GPU read under {sysfs.root}")

    @classmethod
    def from_backend(cls, backend: str, sysfs_root: str,
                     cards: str | Sequence[str] = "discrete",
                     expected_cards: int = 0) -> GpuSource:
        overlay = None
        if backend in ("auto", "pyrsmi"):
            rocml = load_rocml(required=backend == "pyrsmi")
            overlay = PyrsmiOverlay(rocml) if rocml is not None else None
        return cls(AmdgpuSysfs(sysfs_root, cards), overlay, expected_cards)

    async def read(self) -> GpuReading:
        return await self._read()

    def read_now(self) -> GpuReading:
        cards = self.sysfs.read_cards()
        if self.overlay is None:
            return GpuReading("sysfs", cards, self.expected_cards)
        for card in cards:
            if card.present:
                self.overlay.apply(card)
        return GpuReading("pyrsmi+sysfs", cards, self.expected_cards)
