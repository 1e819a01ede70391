"""The time-compressed test copy of the rules: every hold and window divided once."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from alerts.generate import build, main
from alerts.timescale import scaled_alertmanager, scaled_duration, seconds
from exporter.thresholds import Thresholds

FACTOR = 10.0
WINDOW = re.compile(r"\[([0-9a-z.]+)(?::([0-9a-z.]+))?\]")


def _rules(time_scale: float) -> list[dict]:
    return [r for g in build(Thresholds(), time_scale)["groups"] for r in g["rules"]]


def test_every_hold_and_window_is_divided_exactly_once() -> None:
    for plain, fast in zip(_rules(1.0), _rules(FACTOR), strict=True):
        if "for" in plain:
            assert seconds(fast["for"]) == pytest.approx(seconds(plain["for"]) / FACTOR)
        plain_windows = WINDOW.findall(plain["expr"])
        fast_windows = WINDOW.findall(fast["expr"])
        assert len(plain_windows) == len(fast_windows)
        for (a, a_step), (b, b_step) in zip(plain_windows, fast_windows, strict=True):
            assert seconds(b) == pytest.approx(seconds(a) / FACTOR, rel=0.01), plain["expr"]
            if a_step:
                assert seconds(b_step) == pytest.approx(seconds(a_step) / FACTOR)


def test_compared_values_scale_and_the_rest_do_not() -> None:
    fast = "\n".join(r["expr"] for r in _rules(FACTOR))
    assert "rig_engine_decode_stall_max_upper_seconds) / 2 >= 1\n" in fast  # 10 s stall / 10
    assert "rig_engine_hicache_churn_tokens:rate_window >= 4000" in fast  # 400 tok/s x 10
    assert "rig_engine_kv_usage_ratio >= 0.95" in fast  # a ratio
    assert "rig_gpu_busy_ratio >= 0.8" in fast  # a ratio of a gauge


def test_scaled_copy_passes_promtool(tmp_path: Path) -> None:
    out = tmp_path / "rules.yaml"
    assert main(["--time-scale", "10", "--out", str(out)]) == 0
    assert out.read_text().startswith("# A time-scaled test copy")
    promtool = shutil.which("promtool")
    assert promtool
    result = subprocess.run([promtool, "check", "rules", str(out)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_scaling_the_committed_rules_is_refused() -> None:
    with pytest.raises(SystemExit):
        main(["--time-scale", "10"])


def test_alertmanager_timings_scale() -> None:
    config = yaml.safe_load((Path(__file__).parents[2] / "alerts" / "alertmanager.yml")
                            .read_text())
    fast = scaled_alertmanager(config, FACTOR)
    assert fast["route"]["group_wait"] == scaled_duration(config["route"]["group_wait"], FACTOR)
    critical = config["route"]["routes"][0]["group_wait"]
    assert seconds(fast["route"]["routes"][0]["group_wait"]) == seconds(critical) / FACTOR
    assert config["route"]["group_wait"] == "30s"  # the input is not changed


@pytest.mark.parametrize(("text", "value"), [("5m", 300), ("1h30m", 5400), ("250ms", 0.25)])
def test_durations(text: str, value: float) -> None:
    assert seconds(text) == value
