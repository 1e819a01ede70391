"""The fast parser against prometheus_client's on the genuine expositions, and its edges."""

from __future__ import annotations

import math

import pytest

from exporter.daemon.engines.exposition import ParseError, parse, parse_sample
from tests.daemon.engines.helpers import SGLANG_MULTIPROC, SGLANG_SINGLE, VLLM, reference_families


def comparable(samples) -> list:
    # NaN != NaN: compare it as a marker. Timestamps are not kept (module docstring).
    return [(s.name, s.labels, "NaN" if math.isnan(s.value) else s.value) for s in samples]


@pytest.mark.parametrize("path", [SGLANG_SINGLE, SGLANG_MULTIPROC, VLLM],
                         ids=["sglang-single", "sglang-multiproc-b", "vllm"])
def test_every_family_of_every_fixture_agrees(path):
    text = path.read_text()
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    fast = parse(text, names)
    reference = {f.name: f for f in reference_families(text)}
    assert fast.malformed == []
    assert len(fast.families) == len(reference)
    for family in fast.families.values():
        expected = reference[family.name]
        assert family.type == expected.type, family.name
        assert comparable(family.samples) == comparable(expected.samples), family.name


def test_only_wanted_families_are_built():
    text = SGLANG_MULTIPROC.read_text()
    fast = parse(text, {"sglang:num_running_reqs", "sglang:cuda_graph_passes_total"})
    assert set(fast.families) == {"sglang:num_running_reqs", "sglang:cuda_graph_passes_total"}
    assert fast.type_lines == text.count("# TYPE ")


def test_malformed_line_is_skipped_and_reported():
    text = ('# TYPE x gauge\nx{a="1"} 1\nx{a="2"} one\nx{a=3} 3\nx{a="4"} 4\n'
            '# TYPE y gauge\ny 5\n')
    fast = parse(text, {"x", "y"})
    assert [s.value for s in fast.families["x"].samples] == [1.0, 4.0]
    assert [line for _, line in fast.malformed] == ['x{a="2"} one', 'x{a=3} 3']
    assert fast.families["y"].samples[0].value == 5.0


def test_escapes_and_special_values():
    sample = parse_sample('m{path="a\\\\b",q="say \\"hi\\"",nl="x\\ny",brace="}{"} -Inf 17')
    assert sample.labels == {"path": "a\\b", "q": 'say "hi"', "nl": "x\ny", "brace": "}{"}
    assert sample.value == float("-inf")
    assert math.isnan(parse_sample("m NaN").value)
    assert parse_sample("m 1.5e-3").value == 0.0015
    with pytest.raises(ParseError):
        parse_sample("m 1_000")


def test_not_an_exposition():
    assert parse("<html>502 Bad Gateway</html>\n", {"x"}).type_lines == 0
