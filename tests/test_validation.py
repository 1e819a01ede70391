"""exporter/validation.py: the number checks the config and the thresholds share."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from exporter.config import ConfigError, load_config, read_config_file
from exporter.thresholds import Thresholds, thresholds_from_config
from exporter.validation import BadValue, checked_number, read_toml


@pytest.mark.parametrize(("value", "options", "reason"), [
    ("1", {}, "must be a number"),
    (True, {}, "must be a number"),
    (math.nan, {}, "must be a finite number"),
    (math.inf, {}, "must be a finite number"),
    (1.5, {"whole": True}, "must be a whole number"),
    (0, {"positive": True}, "must be greater than 0"),
    (-1, {}, "must be 0 or more"),
    (1.01, {"at_most": 1}, "must be at most 1"),
])
def test_a_bad_number_says_why(value: object, options: dict, reason: str) -> None:
    with pytest.raises(BadValue, match=reason):
        checked_number(value, **options)


@pytest.mark.parametrize(("value", "options"), [
    (0, {}), (2.5, {}), (3.0, {"whole": True}), (1, {"at_most": 1}), (0.1, {"positive": True}),
])
def test_a_good_number_is_itself(value: float, options: dict) -> None:
    assert checked_number(value, **options) == value


def test_the_config_and_the_thresholds_refuse_alike() -> None:
    """One rule, two wordings: a non-finite number is refused by both readers."""
    with pytest.raises(ConfigError, match=r"web\.scrape_deadline_seconds = nan: must be a finite"):
        load_config({"web": {"scrape_deadline_seconds": math.nan}})
    with pytest.raises(ValueError, match=r"thresholds\.cpu_temperature_celsius must be a finite"):
        Thresholds.from_mapping({"cpu_temperature_celsius": math.inf})


def test_an_int_threshold_takes_a_whole_float_as_the_config_does() -> None:
    assert Thresholds.from_mapping({"gpu_pcie_min_width_lanes": 4.0}).gpu_pcie_min_width_lanes == 4
    assert load_config({"gpu": {"expected_cards": 1.0}}).gpu.expected_cards == 1


def test_an_unreadable_file_is_told_by_both_readers(tmp_path: Path) -> None:
    bad = tmp_path / "rig.toml"
    bad.write_text("[thresholds\n")
    with pytest.raises(BadValue, match="not valid TOML"):
        read_toml(bad)
    with pytest.raises(ConfigError, match="not valid TOML"):
        read_config_file(bad)
    with pytest.raises(ValueError, match=f"{bad}: not valid TOML"):
        thresholds_from_config(bad)
