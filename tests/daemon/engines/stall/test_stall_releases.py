"""The stall tracker's acceptance timelines, on the releases they name, in both reading
modes (docs/stall-tracker.md#tested-against-the-releases).

Each plays through real prometheus_client multiprocess files and, for the /metrics
mode, SGLang-style rendering over loopback HTTP (tests/daemon/engines/stall/release_timeline.py).
"""

from __future__ import annotations

import pytest

from tests.daemon.engines.stall.release_timeline import MODES, RENDER_COST, play

#: Releases docs/stall-tracker.md's table says can see a starvation, one per signal range.
SEEING_RELEASES = ("0.5.5", "0.5.7", "0.5.10", "0.5.16", "0.5.23")


def decoding(streaming: int = 2, non_streaming: int = 0):
    return lambda p: p.start_requests(streaming=streaming, non_streaming=non_streaming)


@pytest.mark.parametrize("mode", MODES)
def test_1_normal_decoding_on_0_5_5_is_no_stall(mode):
    """0.5.5 has no decode pass counter: the streamed-token count carries progress."""
    out = play("0.5.5", mode, 20.0, {0.0: decoding()})
    assert out.longest_current < 2.0
    assert out.final.max_recent_seconds < 2.0


@pytest.mark.parametrize("mode", MODES)
def test_2_burst_then_idle_with_the_gauge_stuck_on_0_5_10(mode):
    """After the burst num_running_reqs stays at 2 for 30 s; HTTP in-flight says 0."""
    out = play("0.5.10", mode, 40.0, {0.0: decoding(), 5.0: lambda p: p.finish_all()})
    assert out.longest_current == 0.0
    assert out.final.total_seconds == 0.0


@pytest.mark.parametrize("version", ["0.5.5", "0.5.7"])
def test_2_burst_then_idle_before_http_in_flight(version):
    """Before 0.5.10 the tokenizer's finished count takes the stuck gauge down."""
    out = play(version, "files", 40.0, {0.0: decoding(), 5.0: lambda p: p.finish_all()})
    assert out.final.total_seconds == 0.0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
def test_3_mixed_chunk_prefill_while_decode_continues(version, mode):
    """Mixed batches go through the prefill path: the decode counter stands still for
    20 s, the streamed tokens keep coming."""
    out = play(version, mode, 30.0, {0.0: decoding(), 3.0: lambda p: p.long_prefill(20.0)},
               mixed_chunk=True)
    assert out.longest_current < 2.0
    assert out.final.max_recent_seconds < 2.0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("version", SEEING_RELEASES)
def test_true_starvation_of_12_s_is_measured(version, mode):
    """Decode and the inter-token count flat while a 12 s prefill runs: the stall lies
    within its bounds, whose middle is within half their width of it; the width is
    the poll interval before the stall plus the floor the tracker polls at while
    decode stands still, plus the two renders that bracket it (each reading is known
    only from its ask to its answer)."""
    out = play(version, mode, 25.0, {0.0: decoding(), 5.1: lambda p: p.long_prefill(12.0)})
    ((_, lower, upper),) = out.stalls
    assert lower <= 12.0 <= upper
    renders = 2 * RENDER_COST if mode == "metrics" else 0.0
    assert upper - lower <= out.resolution_seconds + 0.25 + renders + 1e-6
    assert (lower + upper) / 2 == pytest.approx(12.0, abs=(upper - lower) / 2)
    assert out.final is not None and out.final.max_recent_seconds == lower
    assert out.final.current_seconds == 0.0


@pytest.mark.parametrize("mode", MODES)
def test_4_hang_then_recovery_is_no_stall(mode):
    """/metrics and the scheduler stop for 10 s, then both come back."""
    out = play("0.5.23", mode, 25.0, {0.0: decoding(), 5.1: lambda p: p.hang(10.0)})
    assert out.longest_current <= 0.5
    assert out.final.max_recent_seconds <= 0.5


def test_files_mode_costs_the_engine_no_render():
    out = play("0.5.23", "files", 10.0, {0.0: decoding()})
    assert out.renders == 0
    assert out.resolution_seconds == 0.25


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reported", ["0.0.0.dev0", "0.5.24.dev7+gf84475c"])
def test_a_source_tree_build_reads_a_true_12_s_stall(reported, mode):
    """0.5.23's families under a version that names no release: the families decide
    the plan, and a 12 s starvation reads within [11, 13] s (the middle of its
    bounds, as the alerts judge it)."""
    out = play("0.5.23", mode, 25.0, {0.0: decoding(), 5.0: lambda p: p.long_prefill(12.0)},
               reported_version=reported)
    assert out.plan is not None and out.plan.name == "http_in_flight"
    assert out.requests.get("/v1/loads") == 1  # the one probe at start
    ((_, lower, upper),) = out.stalls
    assert lower <= 12.0 <= upper
    assert 11.0 <= (lower + upper) / 2 <= 13.0


def test_a_source_tree_before_0_5_10_falls_back_to_the_guard_and_sees_the_stall():
    """0.5.9 under `0.0.0.dev0`: http_requests_active exists but lets a stream go at
    its headers. Taken at its word, two streams would read as nothing in flight; the
    tokens they receive show it, and the finished guard sees the starvation."""
    out = play("0.5.9", "files", 25.0, {0.0: decoding(), 5.0: lambda p: p.long_prefill(12.0)},
               reported_version="0.0.0.dev0")
    assert out.plan is not None and out.plan.name == "finished_guard"
    ((_, lower, upper),) = out.stalls
    assert lower <= 12.0 <= upper and upper - lower <= 0.5 + 1e-6
