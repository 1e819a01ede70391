"""The committed two-card sysfs tree (tests/fixtures/sys) and paths inside a copy of it."""

from __future__ import annotations

from pathlib import Path

SYSFS_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sys"


def card_device(root: Path, card: str) -> Path:
    """The PCI device directory behind class/drm/<card>/device, inside `root`."""
    return (root / "class" / "drm" / card / "device").resolve()


def hwmon_dir(root: Path, card: str) -> Path:
    return next((card_device(root, card) / "hwmon").iterdir())
