"""Property: on generated expositions, the fast parser gives what prometheus_client gives.

Generated text has every type, indented TYPE lines, escaped label values (backslash, quote, newline,
braces, commas), +Inf/-Inf/NaN, exponents, integers, timestamps, comments, blank
lines and HELP lines, and the parser is asked for a random subset of families.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from exporter.daemon.engines.exposition import parse

LABEL_NAMES = st.sampled_from(["tp_rank", "dp_rank", "le_x", "model_name", "a", "B_2", "mode"])
LABEL_VALUES = st.text(alphabet=st.sampled_from(list('ab:/ -_.,={}"\\\n\tÅ€1')), max_size=12)
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-10**12, max_value=10**12),
    st.sampled_from(["+Inf", "-Inf", "NaN", "1e3", "1.5E-7", "-0.0", "2.227288e+06"]),
)
TIMESTAMPS = st.one_of(st.none(), st.integers(min_value=0, max_value=2 * 10**12))
PADDING = st.lists(st.sampled_from(["", "# a comment line", "#", "# TYPEX not a type line"]),
                   max_size=2)


def value_text(value: float | int | str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def label_sets(draw) -> dict[str, str]:
    names = draw(st.lists(LABEL_NAMES, unique=True, max_size=3))
    return {name: draw(LABEL_VALUES) for name in names}


def sample_line(draw, name: str, labels: dict[str, str]) -> str:
    label_text = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items())
    line = f"{name}{{{label_text}}}" if labels or draw(st.booleans()) else name
    line += " " + value_text(draw(VALUES))
    timestamp = draw(TIMESTAMPS)
    return line if timestamp is None else f"{line} {timestamp}"


@st.composite
def family_text(draw, index: int) -> tuple[str, list[str]]:
    prefix = draw(st.sampled_from(["", "sglang:", "sglang_", "vllm:"]))
    base = f"{prefix}family{index}"
    typ = draw(st.sampled_from(["counter", "gauge", "histogram", "summary"]))
    type_name = f"{base}_total" if typ == "counter" and draw(st.booleans()) else base
    lines = draw(PADDING)
    if draw(st.booleans()):
        lines.append(f"# HELP {type_name} Help with \"quotes\" and \\\\ backslash.")
    # An indented header must still be found when the parser looks families up with find.
    lines.append(draw(st.sampled_from(["", " ", "\t"])) + f"# TYPE {type_name} {typ}")
    for labels in draw(st.lists(label_sets(), max_size=3)):
        lines.extend(draw(PADDING))
        if typ == "histogram":
            for bound in ["0.1", "1.0", "+Inf"]:
                lines.append(sample_line(draw, f"{base}_bucket", {**labels, "le": bound}))
            lines.append(sample_line(draw, f"{base}_sum", labels))
            lines.append(sample_line(draw, f"{base}_count", labels))
        elif typ == "summary":
            lines.append(sample_line(draw, base, {**labels, "quantile": "0.5"}))
            lines.append(sample_line(draw, f"{base}_count", labels))
        else:
            lines.append(sample_line(draw, type_name, labels))
    return type_name, lines


@st.composite
def expositions(draw) -> tuple[str, set[str]]:
    names, lines = [], []
    for index in range(draw(st.integers(min_value=1, max_value=6))):
        name, family_lines = draw(family_text(index))
        names.append(name)
        lines.extend(family_lines)
    wanted = set(draw(st.lists(st.sampled_from(names), unique=True, min_size=1)))
    return "\n".join(lines) + "\n", wanted


def comparable(samples) -> list:
    return [(s.name, s.labels, "NaN" if math.isnan(s.value) else float(s.value))
            for s in samples]


@settings(max_examples=300, deadline=None)
@given(expositions())
def test_fast_parser_agrees_with_prometheus_client(case):
    text, wanted = case
    reference = list(text_string_to_metric_families(text))
    fast = parse(text, wanted)
    assert fast.malformed == []
    expected = {}
    for family in reference:
        type_name = (f"{family.name}_total" if family.type == "counter"
                     and f"{family.name}_total" in wanted else family.name)
        if type_name in wanted:
            expected[type_name] = (family.name, family.type, comparable(family.samples))
    got = {name: (f.name, f.type, comparable(f.samples)) for name, f in fast.families.items()}
    assert got == expected
