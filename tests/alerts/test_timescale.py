"""The time-compressed test copy of the rules: every hold and window divided once."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from alerts.generate import build, main
from alerts.rules.common import dur
from alerts.rules.lost_scrape import bridged
from alerts.timescale import (
    SCALED_SCRAPE_SECONDS,
    scaled_alertmanager,
    scaled_duration,
    seconds,
)
from exporter.thresholds import LOST_SCRAPE_BRIDGE_SCRAPES, Thresholds

FACTOR = 10.0
WINDOW = re.compile(r"\[([0-9a-z.]+)(?::([0-9a-z.]+))?\]")
# The window of a series read over a lost scrape: `last_over_time(selector[window]`.
BRIDGE = re.compile(r"(?<=last_over_time\()[^\[()]*\[([0-9a-z.]+)\]")


def _rules(time_scale: float) -> list[dict]:
    return [r for g in build(Thresholds(), time_scale)["groups"] for r in g["rules"]]


def _bridges(expr: str) -> tuple[list[str], str]:
    """The windows over which `expr` reads a series' last sample over a lost scrape
    (alerts/rules/lost_scrape.py), and `expr` without them."""
    return BRIDGE.findall(expr), BRIDGE.sub("", expr)


def test_every_hold_and_window_is_divided_exactly_once() -> None:
    for plain, fast in zip(_rules(1.0), _rules(FACTOR), strict=True):
        if "for" in plain:
            assert seconds(fast["for"]) == pytest.approx(seconds(plain["for"]) / FACTOR)
        plain_bridges, plain_rest = _bridges(plain["expr"])
        fast_bridges, fast_rest = _bridges(fast["expr"])
        assert len(plain_bridges) == len(fast_bridges), plain["expr"]
        plain_windows = WINDOW.findall(plain_rest)
        fast_windows = WINDOW.findall(fast_rest)
        assert len(plain_windows) == len(fast_windows)
        for (a, a_step), (b, b_step) in zip(plain_windows, fast_windows, strict=True):
            assert seconds(b) == pytest.approx(seconds(a) / FACTOR, rel=0.01), plain["expr"]
            if a_step:
                assert seconds(b_step) == pytest.approx(seconds(a_step) / FACTOR)


@pytest.mark.parametrize(("factor", "scrape"), [(1.0, 5.0), (10.0, 1.0), (5.0, 1.0), (50.0, 0.5)])
def test_the_lost_scrape_window_is_scrapes_of_the_prometheus_that_runs_the_rules(
        factor: float, scrape: float) -> None:
    """A lost scrape is one scrape of the Prometheus that evaluates the rules, at its
    own interval, whatever the time scale: the window that bridges it is
    LOST_SCRAPE_BRIDGE_SCRAPES of that Prometheus' scrapes in real seconds, not the
    rig's 20 s divided by the scale (at x10, 2 s would not span one lost 1 s scrape
    and the next one's timeout). The unscaled rules are for deploy/prometheus.yml's 5 s."""
    if factor == 1.0:
        groups = build(Thresholds())["groups"]
    else:
        groups = build(Thresholds(), factor, scrape_seconds=scrape)["groups"]
    windows = {w for g in groups for r in g["rules"] for w in _bridges(r["expr"])[0]}
    assert {seconds(w) for w in windows} == {LOST_SCRAPE_BRIDGE_SCRAPES * scrape}
    held = [r for g in groups for r in g["rules"] if "for" in r]
    assert sum(bool(_bridges(r["expr"])[0]) for r in held) > len(held) / 2
    for rule in held:  # no instant selector left to restart a hold (a rate needs none)
        assert bridged(rule["expr"], "1s") == rule["expr"], rule["expr"]
    unheld = [r for g in groups for r in g["rules"] if "for" not in r]
    assert not any(_bridges(r["expr"])[0] for r in unheld), "a rule with no hold is left alone"


def test_compared_values_scale_and_the_rest_do_not() -> None:
    fast = "\n".join(r["expr"] for r in _rules(FACTOR))
    bridge = f"[{dur(LOST_SCRAPE_BRIDGE_SCRAPES * SCALED_SCRAPE_SECONDS)}]"
    assert "rig_engine_decode_stall_max_upper_seconds) / 2 >= 1\n" in fast  # 10 s stall / 10
    churn = "engine:rig_engine_hicache_churn_tokens:rate_window"
    assert f"last_over_time({churn}{bridge}) >= 4000" in fast  # 400 tok/s x 10
    assert f"last_over_time(rig_engine_kv_usage_ratio{bridge}) >= 0.95" in fast  # a ratio
    assert f"last_over_time(rig_gpu_busy_ratio{bridge}) >= 0.8" in fast  # a ratio of a gauge


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
