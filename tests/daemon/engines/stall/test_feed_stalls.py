"""The forward-pass feed's state machine on made-up times, and the decoding of a message
as SGLang 0.5.23's publisher encodes it (tests/support/fpm_publisher.py)."""

from __future__ import annotations

import msgspec
import pytest

from exporter.daemon.engines.stall.feed import FeedError, ForwardPass, decode_message
from exporter.daemon.engines.stall.feed_stalls import FeedStalls
from tests.support.fpm_publisher import Message, pass_message


def frames(message: Message, seq: int) -> list[bytes]:
    message.counter_id = seq
    return [b"", seq.to_bytes(8, "big"), msgspec.msgpack.encode(message)]


def fed(kind: str, wall: float = 0.007) -> ForwardPass:
    return decode_message(frames(pass_message(kind, wall), 0))[1]


class Feed:
    """Plays passes into FeedStalls: each message taken `latency` after its pass ended,
    the socket found empty just before each (a publisher that keeps up)."""

    def __init__(self, latency: float = 0.001) -> None:
        self.stalls = FeedStalls(window_seconds=60.0)
        self.t = 100.0
        self.seq = 0
        self.latency = latency

    def run(self, kind: str, count: int = 1, wall: float = 0.007) -> None:
        for _ in range(count):
            drained = self.t + self.latency  # taken after the last one, then waited
            self.t += wall
            self.stalls.observe(self.t + self.latency, self.seq, fed(kind, wall), drained)
            self.seq += 1

    def reading(self, in_flight: float, at: float | None = None) -> None:
        at = self.t if at is None else at
        self.stalls.observe_in_flight(at - 0.02, at, in_flight)

    def state(self):  # noqa: ANN201
        return self.stalls.state(self.t, self.t)


def test_a_message_decodes_by_field_name_and_unknown_fields_are_skipped():
    seq, message = decode_message(frames(pass_message("mixed", 0.5), 41))
    assert seq == 41 and message.counter_id == 41
    assert message.kind == "mixed" and message.wall_time == 0.5
    assert message.scheduled_requests.sum_prefill_tokens == 4096
    # msgspec decodes a map by name, so field order and extra fields do not matter.
    shuffled = {"wall_time": 2.0, "version": 1, "future_field": [1, 2],
                "scheduled_requests": {"num_decode_requests": 3}}
    raw = [b"", (7).to_bytes(8, "big"), msgspec.msgpack.encode(shuffled)]
    assert decode_message(raw)[1].kind == "decode"


@pytest.mark.parametrize("raw, says", [
    ([b"", b"\0" * 8], "2 frames"),
    ([b"x", b"\0" * 8, b"\x80"], "empty topic"),
    ([b"", b"\0" * 8, b"\xc1"], "payload"),
    ([b"", b"\0" * 8, msgspec.msgpack.encode({"version": 2})], "schema version 2"),
    ([b"", b"\0" * 8, msgspec.msgpack.encode({"version": 1, "wall_time": "slow"})],
     "payload"),
])
def test_a_message_that_is_not_the_feeds_is_told(raw, says):
    with pytest.raises(FeedError, match=says):
        decode_message(raw)


def test_a_heartbeat_is_an_idle_pass():
    assert decode_message(frames(Message(), 0))[1].kind == "idle"


def test_decoding_at_its_cadence_is_no_stall_and_passes_are_counted_by_kind():
    feed = Feed()
    feed.reading(2)
    feed.run("decode", 500)
    feed.reading(2)
    feed.run("mixed", 3, wall=0.3)
    state = feed.state()
    assert state.max_recent_seconds == 0.0 and state.total_seconds == 0.0
    assert feed.stalls.figures(feed.t).passes == {"prefill": 0, "decode": 500, "mixed": 3,
                                                   "idle": 0}


def test_prefill_passes_between_decode_passes_are_a_stall_within_its_bounds():
    feed = Feed()
    feed.run("decode", 50)
    last_decode_end = feed.t
    feed.reading(1, at=feed.t + 0.5)
    feed.run("prefill", 1, wall=0.67)
    feed.reading(1)
    feed.run("prefill", 1, wall=2.28)
    feed.run("decode", 1)
    truth = feed.t - last_decode_end  # pass end to pass end, as the client sees tokens
    state = feed.state()
    assert state.max_recent_seconds <= truth <= state.max_recent_upper_seconds
    assert state.max_recent_upper_seconds - state.max_recent_seconds < 0.05
    run = feed.stalls.figures(feed.t).longest_prefill_run
    assert run.passes == 2 and run.seconds == pytest.approx(2.95)


def test_a_gap_while_nothing_was_in_flight_is_no_stall():
    # A finished with the last decode pass; B arrived, prefilled and decodes: the feed
    # alone shows the same passes as a stall. The counters say nothing was in flight.
    feed = Feed()
    feed.run("decode", 50)
    feed.reading(0, at=feed.t + 0.5)
    feed.run("prefill", 2, wall=2.0)
    feed.run("decode", 3)
    assert feed.state().max_recent_seconds == 0.0


def test_a_gap_no_reading_saw_is_not_claimed():
    feed = Feed()
    feed.run("decode", 50)
    feed.run("prefill", 1, wall=3.0)
    feed.run("decode", 1)
    assert feed.state().max_recent_seconds == 0.0


def test_a_dropped_message_widens_the_bounds_honestly():
    feed = Feed()
    feed.run("decode", 20)
    start = feed.t
    feed.reading(1, at=feed.t + 0.2)
    feed.run("prefill", 1, wall=1.5)
    feed.seq += 3  # three messages lost: any of them may have been a decode pass
    feed.t += 0.3
    feed.run("prefill", 1, wall=2.5)
    feed.run("decode", 1)
    state = feed.state()
    assert feed.stalls.figures(feed.t).dropped == 3
    # The known runs are 1.5 s and 2.5 s + the last decode pass; the whole span is the top.
    assert state.max_recent_seconds == pytest.approx(2.507, abs=0.002)
    assert state.max_recent_upper_seconds >= feed.t - start
    assert state.max_recent_blind_seconds > 2.0
    # A run cut by a loss is two runs.
    assert feed.stalls.figures(feed.t).longest_prefill_run.passes == 1


def test_numbers_that_start_again_are_a_restart_and_nothing_spans_it():
    feed = Feed()
    feed.run("decode", 20)
    feed.reading(1, at=feed.t + 1.0)
    feed.seq = 0
    feed.t += 5.0
    feed.run("decode", 5)
    assert feed.state().max_recent_seconds == 0.0


def test_a_silent_feed_is_a_pass_under_way_while_requests_are_in_flight():
    feed = Feed()
    feed.run("decode", 20)
    last = feed.t
    for step in range(1, 17):  # 4 s of silence, read 4 times a second
        feed.reading(1, at=last + step * 0.25)
    now = last + 4.0
    state = feed.stalls.state(now, drained_at=now)
    assert state.current_seconds == pytest.approx(4.0, abs=0.03)
    assert state.current_upper_seconds >= 4.0
    # Until the socket is found empty, a message may be waiting: nothing is claimed past it.
    assert feed.stalls.state(now, drained_at=last + 0.5).current_seconds == 0.0


def test_a_silent_feed_and_a_failed_read_is_a_dead_engine_not_a_growing_stall():
    feed = Feed()
    feed.run("decode", 20)
    last = feed.t
    for step in range(1, 9):
        feed.reading(1, at=last + step * 0.25)
    feed.stalls.observe_unreachable(last + 2.3)
    later = last + 30.0
    state = feed.stalls.state(later, drained_at=later)
    assert state.current_seconds == 0.0
    # What was under way ends at the last reading that answered.
    assert state.max_recent_seconds == pytest.approx(2.0, abs=0.03)
    assert state.max_recent_upper_seconds <= 2.1


def test_heartbeats_end_a_gap_and_count_as_idle():
    feed = Feed()
    feed.run("decode", 20)
    feed.reading(1, at=feed.t + 0.5)
    feed.t += 1.0
    feed.run("idle", 3, wall=0.0)
    state = feed.state()
    assert state.current_seconds == 0.0
    assert feed.stalls.figures(feed.t).passes["idle"] == 3


def test_the_longest_prefill_run_leaves_the_window():
    feed = Feed()
    feed.run("prefill", 4, wall=1.0)
    feed.run("decode", 1)
    assert feed.stalls.figures(feed.t).longest_prefill_run.passes == 4
    feed.t += 61.0
    feed.run("decode", 1)
    assert feed.stalls.figures(feed.t).longest_prefill_run.passes == 0


def test_server_info_names_the_feed_only_while_it_is_on():
    from exporter.daemon.engines.info import EngineInfo, sglang_info

    on = {"version": "0.5.23", "enable_forward_pass_metrics": True,
          "forward_pass_metrics_ipc_name": "ipc:///run/sglang/fpm", "dp_size": 1}
    assert sglang_info(on).forward_pass_feed == "ipc:///run/sglang/fpm"
    assert sglang_info({**on, "forward_pass_metrics_ipc_name": None}).forward_pass_feed == ""
    assert sglang_info({**on, "enable_forward_pass_metrics": False}).forward_pass_feed is None
    # Not labels of rig_engine_info.
    assert "forward_pass_feed" not in EngineInfo.labels() and "dp_size" not in EngineInfo.labels()
