"""Thresholds.from_mapping: the `[thresholds]` table of the exporter config."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.config import load_config, read_config_file
from exporter.thresholds import Thresholds, thresholds_from_config

FIELDS = {f.name: f.type for f in dataclasses.fields(Thresholds)}


def _valid(name: str) -> st.SearchStrategy[int | float]:
    if FIELDS[name] == "int":
        return st.integers(min_value=0, max_value=10**6)
    top = 1.0 if name.endswith("_ratio") else 1e9
    return st.floats(min_value=0, max_value=top) | st.integers(min_value=0, max_value=int(top))


@given(st.data())
def test_valid_tables_round_trip(data: st.DataObject) -> None:
    names = data.draw(st.sets(st.sampled_from(sorted(FIELDS))))
    table = {name: data.draw(_valid(name)) for name in names}
    thresholds = Thresholds.from_mapping(table)
    for name, value in table.items():
        assert getattr(thresholds, name) == value
        assert type(getattr(thresholds, name)).__name__ == FIELDS[name]


def test_empty_table_is_the_defaults() -> None:
    assert Thresholds.from_mapping({}) == Thresholds()


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ({"kv_usage": 0.9}, "'kv_usage'"),
        ({"kv_usage_ratio": "0.9"}, "kv_usage_ratio"),
        ({"kv_usage_ratio": True}, "True"),
        ({"gpu_pcie_min_width_lanes": 1.5}, "1.5"),
        ({"kv_usage_ratio": 1.5}, "1.5"),
        ({"cpu_temperature_celsius": -1}, "-1"),
        ({"cpu_temperature_celsius": float("nan")}, "nan"),
    ],
)
def test_bad_tables_name_the_key_and_value(table: dict[str, object], fragment: str) -> None:
    key = next(iter(table))
    with pytest.raises(ValueError) as error:
        Thresholds.from_mapping(table)
    assert key in str(error.value) and fragment in str(error.value)


def test_thresholds_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Thresholds().kv_usage_ratio = 0.5  # type: ignore[misc]


def test_the_exporter_and_the_generators_read_the_same_table(tmp_path) -> None:
    config = tmp_path / "rig.toml"
    config.write_text('[[engine]]\nname = "main"\nurl = "http://127.0.0.1:30000"\n\n'
                      "[thresholds]\ngpu_hot_margin_celsius = 7.5\ngpu_pcie_min_width_lanes = 4\n")
    from_file = thresholds_from_config(config)
    assert from_file == load_config(read_config_file(config)).thresholds
    assert from_file == Thresholds(gpu_hot_margin_celsius=7.5, gpu_pcie_min_width_lanes=4)


def test_a_config_without_thresholds_gives_the_defaults(tmp_path) -> None:
    config = tmp_path / "rig.toml"
    config.write_text('[web]\nlisten_address = "127.0.0.1:1"\n')
    assert thresholds_from_config(config) == Thresholds()


def test_the_scrape_interval_is_the_rig_jobs() -> None:
    """The rules carry a series over a lost scrape by the rig job's interval
    (alerts/RUNBOOK.md#a-lost-scrape): deploy/prometheus.yml's, which sets the
    timeout to the interval."""
    import yaml

    from alerts.timescale import seconds
    from exporter.rigctl.stack import Intervals
    from tests.support.checkout import REPO

    job = Intervals.of_job(yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text()))
    assert seconds(job.scrape) == Thresholds().scrape_interval_seconds
    assert seconds(job.scrape_timeout) <= seconds(job.scrape)
