"""The exporter's whole /metrics per engine kind against the committed goldens
(rigdev/golden.py): any change to a name, a label or a value the fixtures fix shows
here as a unified diff, with the command that accepts it."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from exporter.daemon.collector import engine as engine_collector
from exporter.daemon.engines import mapping
from exporter.daemon.engines.mapping import Rule, Upstream
from rigdev import golden


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return asyncio.run(golden.render_all())


def _changed_lines(change: str, sign: str) -> list[str]:
    return [line[1:] for line in change.splitlines()
            if line.startswith(sign) and not line.startswith(sign * 3)]


@pytest.mark.parametrize("kind", golden.KINDS)
def test_the_exposition_is_the_golden(rendered: dict[str, str], kind: str) -> None:
    change = golden.diff(kind, rendered[kind])
    assert not change, (f"/metrics in front of {kind} is not {golden.path_for(kind).name}; "
                        f"if the change is meant, run `{golden.COMMAND}` and commit the "
                        f"diff:\n{change}")


def test_a_render_is_the_same_bytes_twice(rendered: dict[str, str]) -> None:
    assert asyncio.run(golden.render_all(["llamacpp"]))["llamacpp"] == rendered["llamacpp"]


def test_every_golden_is_a_valid_exposition(rendered: dict[str, str]) -> None:
    """The masked text still parses, so the PromQL lint can read its families."""
    from prometheus_client.parser import text_string_to_metric_families
    for kind, text in rendered.items():
        assert len(list(text_string_to_metric_families(text))) > 50, kind


def test_a_new_engine_family_shows_in_the_diff(monkeypatch: pytest.MonkeyPatch) -> None:
    vllm = mapping.TABLES["vllm"]
    added = Rule("preemptions_total", "counter", (Upstream("num_preemptions_total"),))
    monkeypatch.setitem(mapping.TABLES, "vllm",
                        dataclasses.replace(vllm, rules=(*vllm.rules, added)))
    monkeypatch.setitem(engine_collector.DOCS, "preemptions_total", "Preempted requests.")
    change = golden.diff("vllm", asyncio.run(golden.render_all(["vllm"]))["vllm"])
    assert 'rig_engine_preemptions_total{engine="main",kind="vllm"} 1.0' in _changed_lines(
        change, "+"), change
    assert not _changed_lines(change, "-"), change


def test_a_changed_label_shows_in_the_diff(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's GPU prefix-cache hits named tier "GPU" instead of L1."""
    vllm = mapping.TABLES["vllm"]
    rules = tuple(dataclasses.replace(rule, sources=tuple(
        dataclasses.replace(source, tiers=tuple(
            (pattern, "GPU" if tier == "L1" else tier) for pattern, tier in source.tiers))
        for source in rule.sources)) for rule in vllm.rules)
    monkeypatch.setitem(mapping.TABLES, "vllm", dataclasses.replace(vllm, rules=rules))
    change = golden.diff("vllm", asyncio.run(golden.render_all(["vllm"]))["vllm"])
    hits = 'rig_engine_cache_hit_tokens_total{engine="main",kind="vllm",tier="%s"} 330800.0'
    assert _changed_lines(change, "-") == [hits % "L1"], change
    assert _changed_lines(change, "+") == [hits % "GPU"], change


def test_a_missing_golden_fails_with_the_whole_exposition(
        rendered: dict[str, str], tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(golden, "GOLDEN_DIR", tmp_path)
    change = golden.diff("sglang", rendered["sglang"])
    assert len(_changed_lines(change, "+")) == len(rendered["sglang"].splitlines())
