"""Speculative decoding as a reading: rig_engine_spec_accept_length and _ratio from
SGLang's spec_accept_length and spec_accept_rate gauges (0.5.23 metrics_collector.py),
absent where the engine has measured nothing (it writes 0 then)."""

from __future__ import annotations

import asyncio
import re

from exporter.daemon.engines.exposition import parse
from exporter.daemon.engines.mapping import TABLES
from exporter.daemon.engines.normalise import normalise, wanted_names
from tests.daemon.engines.helpers import SGLANG_MULTIPROC, SGLANG_SINGLE, VLLM, scrape, sim_state


def normalised(text: str, kind: str = "sglang") -> dict[str, float]:
    table = TABLES[kind]
    return normalise(parse(text, wanted_names(table, table.rules)), table).values


def with_values(text: str, length: str, rate: str) -> str:
    """The genuine capture with the two gauges set as an engine decoding with MTP writes."""
    text = re.sub(r"^(sglang:spec_accept_length\{[^}]*\}) \S+$", rf"\1 {length}", text,
                  flags=re.M)
    return re.sub(r"^(sglang:spec_accept_rate\{[^}]*\}) \S+$", rf"\1 {rate}", text, flags=re.M)


def test_the_captures_without_speculative_decoding_give_no_reading():
    for path in (SGLANG_SINGLE, SGLANG_MULTIPROC):
        text = path.read_text()
        assert re.search(r"^sglang:spec_accept_length\{.*\} 0\.0$", text, re.M)  # written
        values = normalised(text)
        assert "spec_accept_length" not in values and "spec_accept_ratio" not in values
    assert "spec_accept_length" not in normalised(VLLM.read_text(), "vllm")


def test_a_measured_acceptance_is_read():
    values = normalised(with_values(SGLANG_MULTIPROC.read_text(), "2.71", "0.5700"))
    assert values["spec_accept_length"] == 2.71 and values["spec_accept_ratio"] == 0.57
    # Every draft rejected: a length of 1 (the bonus token) and a rate of 0, both readings.
    values = normalised(with_values(SGLANG_SINGLE.read_text(), "1.0", "0.0"))
    assert values["spec_accept_length"] == 1.0 and values["spec_accept_ratio"] == 0.0


def test_the_exporter_serves_them_from_the_simulated_sglang():
    samples, _ = asyncio.run(scrape(sim_state(spec_accept_length=2.71, spec_accept_rate=0.57)))
    assert samples[("rig_engine_spec_accept_length", "bad", None)] == 2.71
    assert samples[("rig_engine_spec_accept_ratio", "bad", None)] == 0.57
    # The other engine runs without speculative decoding: no series, not a 0.
    assert ("rig_engine_spec_accept_length", "good", None) not in samples
    assert ("rig_engine_spec_accept_ratio", "good", None) not in samples
