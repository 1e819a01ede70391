"""Shared fixtures: the committed two-card sysfs tree, copied so a test may break it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
SYSFS_FIXTURE = FIXTURES / "sys"


@pytest.fixture
def sysfs_root(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(SYSFS_FIXTURE, root, symlinks=True)
    return root


def card_device(root: Path, card: str) -> Path:
    """The PCI device directory behind class/drm/<card>/device, inside `root`."""
    return (root / "class" / "drm" / card / "device").resolve()


def hwmon_dir(root: Path, card: str) -> Path:
    return next((card_device(root, card) / "hwmon").iterdir())
