"""The committed JSON matches its grafanalib sources, and the thresholds reach it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dashboards.generate import json_path, main, render, sources
from exporter.thresholds import Thresholds
from tests.dashboards.queries import panels

# The thresholds the dashboards draw as lines or colour steps. The others are
# hold durations and windows of the rules (`for`), which a panel does not draw.
DRAWN = {
    "decode_stall_critical_seconds", "decode_stutter_seconds", "kv_usage_ratio",
    "hicache_host_pool_ratio", "hicache_churn_tokens_per_second", "hicache_l2_hit_ratio",
    "gpu_busy_ratio", "gpu_sclk_ratio", "gpu_junction_margin_celsius",
    "gpu_hot_margin_celsius", "gpu_power_cap_ratio",
    "gpu_pcie_min_width_lanes", "host_swap_io_bytes_per_second",
    "host_swap_growth_bytes_per_second", "host_memory_available_ratio",
    "host_memory_full_stall_ratio", "cpu_temperature_celsius", "spec_accept_length",
    # Through the rules' own expressions on the overview's tiles (dashboards/rules.py).
    "hicache_recompute_tokens", "hicache_storage_l2_ratio", "hicache_storage_window_seconds",
    "agent_hog_running_seconds", "agent_hog_waiting_seconds", "agent_runaway_tokens",
    "agent_context_ratio", "agent_recompute_uncached_ratio",
}


def test_one_dashboard_per_design_section() -> None:
    assert [s.name for s in sources()] == [
        f"{name}.dashboard.py"
        for name in ("agents", "decode", "gpus", "hicache", "host", "overview")
    ]


@pytest.mark.parametrize("source", sources(), ids=lambda s: s.name)
def test_committed_json_is_not_stale(source: Path) -> None:
    assert json_path(source).read_text() == render(source, Thresholds()), (
        "run: python -m dashboards.generate")


def test_check_passes_on_the_committed_json() -> None:
    assert main(["--check"]) == 0


def test_check_fails_on_stale_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path)]) == 0
    stale = tmp_path / "gpus.json"
    stale.write_text(stale.read_text().replace('"celsius"', '"fahrenheit"'))
    assert main(["--check", "--out", str(tmp_path)]) == 1
    assert "gpus.json is stale" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(DRAWN))
def test_every_drawn_threshold_changes_the_json(name: str) -> None:
    default = getattr(Thresholds(), name)
    changed = dataclasses.replace(Thresholds(), **{name: default / 2 if isinstance(
        default, float) else default + 1})
    assert any(render(s, changed) != render(s, Thresholds()) for s in sources()), name


def _steps(path: Path, title: str) -> list[float]:
    """The panel's threshold steps: its own, or those of the query (A) they judge."""
    dashboard = json.loads(path.read_text())
    panel = next(p for p in panels(dashboard) if p["title"] == title)
    config = panel["fieldConfig"]
    judged = [prop["value"] for o in config["overrides"]
              if o["matcher"] == {"id": "byFrameRefID", "options": "A"}
              for prop in o["properties"] if prop["id"] == "thresholds"]
    thresholds = judged[0] if judged else config["defaults"]["thresholds"]
    return [s["value"] for s in thresholds["steps"]]


def test_config_thresholds_reach_the_dashboards(tmp_path: Path) -> None:
    config = tmp_path / "rig.toml"
    config.write_text("[thresholds]\nkv_usage_ratio = 0.9\ncpu_temperature_celsius = 85\n")
    out = tmp_path / "out"
    assert main(["--config", str(config), "--out", str(out)]) == 0
    assert _steps(out / "hicache.json", "KV pool usage") == [None, 0.9]
    assert _steps(out / "overview.json", "KV pool") == [None, 0.9]
    assert _steps(out / "host.json", "CPU temperature") == [None, 85.0]
    hicache = next(s for s in sources() if s.name == "hicache.dashboard.py")
    assert _steps(json_path(hicache), "KV pool usage") == [None, 0.95]


def test_a_bad_config_is_a_clear_error(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "rig.toml"
    config.write_text("[thresholds]\nkv_usage_ratio = 1.5\n")
    assert main(["--config", str(config), "--out", str(tmp_path / "out")]) == 2
    assert "kv_usage_ratio" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _nulls(value: object, key: str = "") -> list[str]:
    if isinstance(value, dict):
        return [f"{key}.{k}" for k, v in value.items() if v is None
                and not (k == "value" and key.endswith("steps"))] + [
            n for k, v in value.items() for n in _nulls(v, f"{key}.{k}")]
    if isinstance(value, list):
        return [n for v in value for n in _nulls(v, f"{key}.steps" if key.endswith(
            "steps") else key)]
    return []


@pytest.mark.parametrize("source", sources(), ids=lambda s: s.name)
def test_no_nulls_no_dead_targets_no_legacy_heatmap(source: Path) -> None:
    """Only a threshold's base step is null; targets carry no pre-7 `query`/`step`;
    heatmaps only Grafana 9's options (dashboards/clean.py)."""
    dashboard = json.loads(json_path(source).read_text())
    assert not _nulls(dashboard), _nulls(dashboard)
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            assert not {"query", "step"} & set(target), (panel["title"], target)
        if panel["type"] == "heatmap":
            assert not {"cards", "color", "xAxis", "yAxis", "heatmap"} & set(panel), panel["title"]
