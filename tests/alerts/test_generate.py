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


def _held(selector: str) -> str:
    """How an alert with a `for` reads a series: its last sample over a lost scrape
    (alerts/rules/lost_scrape.py)."""
    return f"last_over_time({selector}[{_dur(Thresholds().lost_scrape_bridge_seconds)}])"


def test_thresholds_render_into_expressions() -> None:
    rules = render(Thresholds(kv_usage_ratio=0.9, decode_stall_critical_seconds=15))
    # RigKVPoolSaturated holds for minutes; RigDecodeStarvation holds for none.
    assert _held("rig_engine_kv_usage_ratio") + " >= 0.9\n" in rules
    assert ("(rig_engine_decode_stall_max_seconds + rig_engine_decode_stall_max_upper_seconds)"
            " / 2 >= 15\n") in rules


def test_the_gpu_count_rule_reads_the_expected_count_from_the_exporter() -> None:
    # [gpu] expected_cards lives in the exporter's config, not in a threshold.
    rules = render(Thresholds())
    assert "signal: count" in rules and "< " + _held("rig_gpu_expected_cards") in rules


@given(st.integers(min_value=1, max_value=10 * 86400))
def test_durations_round_trip(value: int) -> None:
    assert seconds(_dur(value)) == value


RIG_TOML = """
[web]
listen_address = "127.0.0.1:9842"

[thresholds]
kv_usage_ratio = 0.9
decode_stall_critical_seconds = 15
"""


def test_config_thresholds_render_into_the_out_file(tmp_path) -> None:
    config = tmp_path / "rig.toml"
    config.write_text(RIG_TOML)
    out = tmp_path / "rig-rules.yaml"
    assert main(["--config", str(config), "--out", str(out)]) == 0
    rules = out.read_text()
    assert _held("rig_engine_kv_usage_ratio") + " >= 0.9\n" in rules
    assert ("(rig_engine_decode_stall_max_seconds + rig_engine_decode_stall_max_upper_seconds)"
            " / 2 >= 15\n") in rules
    assert f"--config {config}" in rules.splitlines()[0]
    assert main(["--config", str(config), "--out", str(out), "--check"]) == 0
    # The committed (default) rules are stale against this config, and vice versa.
    assert main(["--config", str(config), "--check"]) == 1
    assert main(["--out", str(out), "--check"]) == 1
    assert RULES_PATH.read_text() == render(Thresholds()), "the default file was not touched"


def test_check_of_a_missing_out_file_is_stale(tmp_path, capsys) -> None:
    assert main(["--out", str(tmp_path / "absent.yaml"), "--check"]) == 1
    assert "absent.yaml is stale: run python -m alerts.generate --out" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[thresholds]\nkv_usage_ratio = 1.5\n", "kv_usage_ratio"),
        ("[thresholds]\nno_such_key = 1\n", "no_such_key"),
        ("thresholds = 3\n", "must be a table"),
        ("[thresholds\n", "not valid TOML"),
    ],
)
def test_a_bad_config_exits_2_naming_file_and_key(tmp_path, capsys, text, fragment) -> None:
    config = tmp_path / "rig.toml"
    config.write_text(text)
    out = tmp_path / "out.yaml"
    assert main(["--config", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(config) in err and fragment in err
    assert not out.exists()


def test_a_missing_config_exits_2(tmp_path, capsys) -> None:
    assert main(["--config", str(tmp_path / "nope.toml"), "--out", str(tmp_path / "o")]) == 2
    assert "nope.toml" in capsys.readouterr().err
