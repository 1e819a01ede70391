"""The committed rules match the generator, and every threshold reaches them."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alerts.generate import RULES_PATH, main, render
from alerts.rules.common import dur as _dur
from exporter.thresholds import Thresholds
from tests.alerts.promql_lint import seconds


def test_committed_rules_are_not_stale() -> None:
    assert RULES_PATH.read_text() == render(Thresholds()), "run: python -m alerts.generate"
    assert main(["--check"]) == 0


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Thresholds)])
def test_every_threshold_changes_the_rules(name: str) -> None:
    default = getattr(Thresholds(), name)
    changed = default / 2 if isinstance(default, float) else default + 7
    assert render(dataclasses.replace(Thresholds(), **{name: changed})) != render(Thresholds())


def test_thresholds_render_into_expressions() -> None:
    rules = render(Thresholds(kv_usage_ratio=0.9, decode_stall_critical_seconds=15))
    assert "rig_engine_kv_usage_ratio >= 0.9\n" in rules
    assert "rig_engine_decode_stall_max_seconds >= 15\n" in rules


def test_no_expected_gpu_count_drops_the_count_rule() -> None:
    assert "signal: count" in render(Thresholds())
    assert "signal: count" not in render(Thresholds(gpu_expected_count=0))


@given(st.integers(min_value=1, max_value=10 * 86400))
def test_durations_round_trip(value: int) -> None:
    assert seconds(_dur(value)) == value
