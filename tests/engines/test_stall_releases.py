"""The stall tracker's acceptance timelines, on the releases they name, in both reading
modes (docs/stall-tracker.md#tested-against-the-releases).

Each plays through real prometheus_client multiprocess files and, for the /metrics
mode, SGLang-style rendering over loopback HTTP (tests/engines/release_timeline.py).
"""

from __future__ import annotations

import pytest

from tests.engines.release_timeline import MODES, play

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
    """Decode and the inter-token count flat while a 12 s prefill runs."""
    out = play(version, mode, 25.0, {0.0: decoding(), 5.0: lambda p: p.long_prefill(12.0)})
    tolerance = max(1.0, out.resolution_seconds)
    assert out.longest_current == pytest.approx(12.0, abs=tolerance)
    assert out.final.max_recent_seconds == pytest.approx(12.0, abs=tolerance)
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
