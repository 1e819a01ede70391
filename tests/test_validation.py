"""exporter/validation.py: the checks the config and the thresholds share, worded."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import msgspec
import pytest
from msgspec import Meta

from exporter.config import ConfigError, load_config, read_config_file
from exporter.thresholds import Thresholds, thresholds_from_config
from exporter.validation import FINITE, BadValue, converted, read_toml

#: The number kinds the config and the thresholds declare, as one-key tables.
KINDS = {
    "number": Annotated[float, Meta(ge=0, le=FINITE)],
    "whole": Annotated[int, Meta(ge=0)],
    "positive": Annotated[float, Meta(gt=0, le=FINITE)],
    "ratio": Annotated[float, Meta(ge=0, le=1)],
}


def table(kind: str) -> type:
    return msgspec.defstruct(kind, [("x", KINDS[kind])], forbid_unknown_fields=True)


@pytest.mark.parametrize(("value", "kind", "reason"), [
    ("1", "number", "must be a number"),
    (True, "number", "must be a number"),
    (math.nan, "number", "must be a finite number"),
    (math.inf, "number", "must be a finite number"),
    (1.5, "whole", "must be a whole number"),
    (0, "positive", "must be greater than 0"),
    (-1, "number", "must be 0 or more"),
    (1.01, "ratio", "must be at most 1"),
])
def test_a_bad_number_says_why(value: object, kind: str, reason: str) -> None:
    with pytest.raises(BadValue, match=reason) as caught:
        converted({"x": value}, table(kind))
    assert caught.value.path == ("x",)


@pytest.mark.parametrize(("value", "kind"), [
    (0, "number"), (2.5, "number"), (3.0, "whole"), (1, "ratio"), (0.1, "positive"),
])
def test_a_good_number_is_itself(value: float, kind: str) -> None:
    assert converted({"x": value}, table(kind)).x == value


def test_an_unknown_or_missing_key_is_named() -> None:
    with pytest.raises(BadValue, match=r"unknown key \(known: x\)") as caught:
        converted({"x": 1, "y": 2}, table("number"))
    assert (caught.value.path, caught.value.value, caught.value.unknown) == (("y",), 2, True)
    required = msgspec.defstruct("required", [("x", int)])
    with pytest.raises(BadValue, match="is required"):
        converted({}, required)


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
