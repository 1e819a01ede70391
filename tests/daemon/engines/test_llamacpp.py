"""llama.cpp as an engine kind, on the captures of a real llama-server
(tests/fixtures/llamacpp/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.config import load_config
from exporter.daemon.engines.exposition import parse
from exporter.daemon.engines.info import llamacpp_info
from exporter.daemon.engines.mapping import LLAMACPP
from exporter.daemon.engines.normalise import normalise, wanted_names
from exporter.daemon.engines.slots import parse_slots
from exporter.daemon.engines.stall.slots import SlotsProgress
from exporter.daemon.snapshot import SourceError

FIXTURES = Path(__file__).parents[2] / "fixtures" / "llamacpp"


def normalised(name: str):
    text = (FIXTURES / name).read_text()
    return text, normalise(parse(text, wanted_names(LLAMACPP, LLAMACPP.rules)), LLAMACPP)


def value(text: str, name: str) -> float:
    """The sample line as written (prometheus_client's parser would rename the
    counter-typed n_tokens_max)."""
    (line,) = [ln for ln in text.splitlines() if ln.startswith(name + " ")]
    return float(line.split()[1])


@pytest.mark.parametrize("name", ["metrics_idle.txt", "metrics_busy.txt", "during_metrics.txt"])
def test_metrics_map_onto_the_rig_schema(name):
    text, m = normalised(name)
    assert m.problems == []
    assert m.values["running_requests"] == value(text, "llamacpp:requests_processing")
    assert m.values["queued_requests"] == value(text, "llamacpp:requests_deferred")
    # The whole prompt: llama.cpp counts the cached part apart.
    assert m.values["prompt_tokens_total"] == (
        value(text, "llamacpp:prompt_tokens_total")
        + value(text, "llamacpp:prompt_tokens_cached_total"))
    assert m.values["generation_tokens_total"] == value(text, "llamacpp:tokens_predicted_total")
    assert m.tiers["cache_hit_tokens_total"] == {
        "L1": value(text, "llamacpp:prompt_tokens_cached_total")}
    assert m.values["decode_calls_total"] == value(text, "llamacpp:n_decode_total")
    # Typed counter, read as the maximum it is.
    assert m.values["max_sequence_tokens"] == value(text, "llamacpp:n_tokens_max")
    # Not rates: averages since whoever asked /metrics last.
    assert not any("tokens_seconds" in family for family in m.values)
    # Speculative decoding off: its counters read 0, so no reading.
    assert not any(family.startswith("spec_") for family in m.values)


def test_busy_counters_stand_still_during_a_prefill():
    """The capture during a 12,288-token prefill: the token counters have not moved
    (they move when a request finishes), n_decode_total has (every batch)."""
    _, during = normalised("during_metrics.txt")
    assert during.values["prompt_tokens_total"] == 0
    assert during.values["decode_calls_total"] > 0


def test_speculative_counters_read_once_drafts_exist():
    text = (FIXTURES / "metrics_busy.txt").read_text()
    text = (text.replace("spec_decode_num_draft_tokens_total 0",
                         "spec_decode_num_draft_tokens_total 40")
                .replace("spec_decode_num_accepted_tokens_total 0",
                         "spec_decode_num_accepted_tokens_total 31")
                .replace("spec_decode_num_drafts_total 0", "spec_decode_num_drafts_total 10"))
    m = normalise(parse(text, wanted_names(LLAMACPP, LLAMACPP.rules)), LLAMACPP)
    assert (m.values["spec_draft_tokens_total"], m.values["spec_accepted_tokens_total"],
            m.values["spec_verify_steps_total"]) == (40, 31, 10)


def test_props_give_build_model_and_slot_context():
    props = json.loads((FIXTURES / "during_props.txt").read_text())
    info = llamacpp_info(props)
    assert info.version == "b1-0c1e570"
    assert info.model == "models/tiny.gguf"
    assert info.context_length_tokens == 32768
    assert info.speculative == ""


def test_slots_during_a_prefill():
    slots = parse_slots((FIXTURES / "during_slots.txt").read_text())
    assert [s.id for s in slots] == [0, 1, 2, 3]
    assert {s.context_tokens for s in slots} == {32768}
    prefilling = slots[3]
    assert prefilling.processing and prefilling.decoded_tokens == 0
    assert prefilling.request_tokens == 12288
    assert [s.request_tokens for s in slots[:3]] == [0, 0, 0]


def test_slots_busy_without_kvu():
    slots = parse_slots((FIXTURES / "slots_busy.json").read_text())
    assert {s.context_tokens for s in slots} == {8192}
    busy = [s for s in slots if s.processing]
    assert [(s.id, s.decoded_tokens, s.request_tokens) for s in busy] == [(1, 319, 325 + 319)]
    # An idle slot keeps its last task's numbers, but holds no request.
    assert slots[2].task == 26 and slots[2].request_tokens == 0


@pytest.mark.parametrize("body", ['{"error": {"code": 501, "message": "This server does not '
                                  'support slots endpoint."}}', "[{\"id\": 0}]", "nope"])
def test_slots_refused_or_malformed(body):
    with pytest.raises(SourceError):
        parse_slots(body)


def _slots(*states: tuple[int, bool, int, int]) -> list:
    return parse_slots(json.dumps([
        {"id": i, "n_ctx": 100, "is_processing": busy, "id_task": task,
         "n_prompt_tokens": 5, "next_token": [{"n_decoded": decoded}]}
        for i, (_, busy, task, decoded) in enumerate(states)]))


def test_progress_only_grows_across_tasks():
    view = SlotsProgress()
    first = view.progress(_slots((0, True, 7, 10), (1, True, 8, 0)))
    assert (first.decode, first.in_flight) == (10, 1)  # slot 1 waits for its first token
    same = view.progress(_slots((0, True, 7, 10), (1, True, 8, 0)))
    assert same.decode == 10 and same.in_flight == 1  # standing still: a stall if it lasts
    # Slot 0 takes a new task: its n_decoded starts again, progress does not drop.
    after = view.progress(_slots((0, True, 9, 3), (1, True, 8, 4)))
    assert after.decode == 10 + 3 + 4 and after.in_flight == 2
    idle = view.progress(_slots((0, False, 9, 3), (1, False, 8, 4)))
    assert idle.decode == after.decode and idle.in_flight == 0


def test_config_accepts_llamacpp():
    config = load_config({"engine": [{"name": "solo", "url": "http://127.0.0.1:8080",
                                      "kind": "llamacpp"}]})
    assert config.engines[0].kind == "llamacpp"
