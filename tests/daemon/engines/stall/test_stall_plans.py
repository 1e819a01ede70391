"""The stall tracker's signals, chosen from what the engine shows
(docs/stall-tracker.md#signals-by-feature)."""

from __future__ import annotations

import logging

import pytest

from exporter.daemon.engines.stall.evidence import Evidence, ServerFlags, read_version
from exporter.daemon.engines.stall.planner import Planner
from exporter.daemon.engines.stall.plans import (
    FINISHED_GUARD,
    HTTP_IN_FLIGHT,
    STREAMED_TOKENS,
    Counters,
    choose,
)

PASSES = "cuda_graph_passes_total"
HTTP = "http_requests_active"
RUNNING = "num_running_reqs"


@pytest.mark.parametrize(("text", "exact", "floor"), [
    ("0.5.10.post1", (0, 5, 10), (0, 5, 10)),
    ("0.5.23", (0, 5, 23), (0, 5, 23)),
    ("0.5.23+cu124", (0, 5, 23), (0, 5, 23)),
    ("0.0.0.dev0", None, (0, 5, 7)),
    ("0.5.24.dev7+gf84475c", None, (0, 5, 23)),
    ("0.5.24.dev7+gf84475c.d20260611", None, (0, 5, 23)),
    ("0.5.24rc1", None, (0, 5, 23)),
    ("0.6.0.dev3", None, (0, 5, 10**6)),
    ("f84475c", None, None),
    ("", None, None),
])
def test_what_a_version_says(text, exact, floor):
    clue = read_version(text)
    assert (clue.exact, clue.floor) == (exact, floor)


@pytest.mark.parametrize(("version", "families", "loads", "plan"), [
    # Releases: the version breaks the ties the families leave.
    ("0.5.5", (), None, STREAMED_TOKENS),
    ("0.5.6.post2", (), None, STREAMED_TOKENS),
    ("0.5.7", (), None, FINISHED_GUARD),
    # http_requests_active exists from 0.5.8, but counts a stream to its end only
    # from 0.5.10: a release that names 0.5.8-0.5.9 keeps the guard.
    ("0.5.9", (PASSES, HTTP), True, FINISHED_GUARD),
    ("0.5.10.post1", (), None, HTTP_IN_FLIGHT),
    ("0.5.23", (), None, HTTP_IN_FLIGHT),
    # Source trees: the families decide.
    ("0.0.0.dev0", (RUNNING,), None, FINISHED_GUARD),
    ("0.0.0.dev0", (RUNNING, PASSES, HTTP), True, HTTP_IN_FLIGHT),
    ("0.5.24.dev7+gf84475c", (), None, HTTP_IN_FLIGHT),
    ("f84475c", (RUNNING,), None, STREAMED_TOKENS),
    ("f84475c", (RUNNING, PASSES), None, FINISHED_GUARD),
    ("f84475c", (RUNNING,), True, HTTP_IN_FLIGHT),  # /v1/loads: 0.5.8 or later
    ("f84475c", (RUNNING, "full_token_usage"), None, HTTP_IN_FLIGHT),
    # A feature beats the version it contradicts.
    ("0.5.5", (PASSES,), None, FINISHED_GUARD),
])
def test_plan_by_feature(version, families, loads, plan):
    choice = choose(Evidence(version, families=frozenset(families), loads_route=loads))
    assert choice.plan == plan


@pytest.mark.parametrize("version", ["0.5.4", "0.4.6"])
def test_releases_older_than_those_read_get_no_plan_for_good(version):
    choice = choose(Evidence(version, families=frozenset({RUNNING, PASSES})))
    assert choice.plan is None and choice.final and "older than 0.5.5" in choice.note


def test_no_release_and_no_family_yet_waits():
    choice = choose(Evidence("f84475c"))
    assert choice.plan is None and not choice.final and "num_running_reqs" in choice.note


def test_blind_spots_follow_the_flags():
    spec = choose(Evidence("0.5.5", ServerFlags(speculative="EAGLE", decode_log_interval=40)))
    assert "speculative steps jump over most multiples of 50" in spec.note
    assert "40 decode batches" in spec.note
    mixed = choose(Evidence("0.5.23", ServerFlags(mixed_chunk=True)))
    assert "mixed-chunk decode of non-streaming requests" in mixed.note
    assert "mixed-chunk" not in choose(Evidence("0.5.23")).note
    provisional = choose(Evidence("0.0.0.dev0", families=frozenset({HTTP})))
    assert "until tokens flow while it reads 0" in provisional.note


def test_the_planner_chooses_again_as_families_appear_and_logs_each_plan_once(caplog):
    planner = Planner("main", Evidence("f84475c"))
    with caplog.at_level(logging.INFO, logger="exporter.daemon.engines.stall.planner"):
        assert planner.progress(Counters(), 0.0) is None  # nothing to go on yet
        assert planner.progress(Counters(), 0.25) is None
        planner.progress(Counters(running=1.0, families=frozenset({RUNNING})), 0.5)
        assert planner.plan == STREAMED_TOKENS
        planner.progress(Counters(running=1.0, families=frozenset({RUNNING})), 0.75)
        planner.progress(Counters(running=1.0, decode_passes=3.0,
                                  families=frozenset({RUNNING, PASSES})), 1.0)
        assert planner.plan == FINISHED_GUARD
    messages = [r.getMessage() for r in caplog.records]
    assert [m.split(" plan")[0] for m in messages] == [
        "engine main: no stall tracker", "engine main: stall tracker",
        "engine main: stall tracker"]
    assert "stay absent" in messages[0]


def test_tokens_flowing_past_a_zero_http_count_fall_back_to_the_guard(caplog):
    """A tree before 0.5.10 under an unparsed version, or a route the count does not
    cover: the HTTP in-flight count reads 0 while tokens reach clients."""
    planner = Planner("main", Evidence("0.0.0.dev0", families=frozenset({RUNNING, HTTP})))
    assert planner.plan == HTTP_IN_FLIGHT
    with caplog.at_level(logging.INFO, logger="exporter.daemon.engines.stall.planner"):
        for poll in range(8):
            progress = planner.progress(Counters(running=2.0, streamed_tokens=50.0 * poll,
                                                 http_active=0.0, finished=0.0,
                                                 families=frozenset({RUNNING, HTTP})),
                                        poll * 1.0)
    assert planner.plan == FINISHED_GUARD
    assert progress is not None and progress.in_flight == 2.0  # the guard counts them
    assert any("tokens reached clients for" in r.getMessage() for r in caplog.records)


def test_one_short_request_between_polls_keeps_the_http_count():
    planner = Planner("main", Evidence("0.5.23"))
    for poll, (tokens, http) in enumerate([(0, 0), (40, 0), (40, 1), (80, 1), (90, 0),
                                           (90, 0), (95, 0), (95, 0)]):
        planner.progress(Counters(running=1.0, streamed_tokens=float(tokens),
                                  http_active=float(http), finished=0.0), poll * 1.0)
    assert planner.plan == HTTP_IN_FLIGHT
