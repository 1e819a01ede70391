"""No invented stalls (docs/stall-tracker.md#requests-in-flight): bursts that end idle,
on every plan, and a speculative non-streaming request where no pass counter sees it.

Played through the release playback (real prometheus_client multiprocess files,
tests/support/sglang_release.py) on a simulated clock; decode never stops while a
request runs, so every stall the tracker reports here is false.
"""

from __future__ import annotations

import pytest

from tests.daemon.engines.stall.release_timeline import play

pytestmark = pytest.mark.long_running(30)

#: The bursts' pattern (count, which stream, offsets) repeats every 84 bursts and holds
#: all 77 combinations: the default suite plays each twice, the slow tier's 300 each
#: three or four times (docs/stall-tracker.md's measurement).
PATTERN = 84
BURSTS = 2 * PATTERN
BURST_EVERY = 8.0
LOG_INTERVAL = 40
#: The plan each release gets (docs/stall-tracker.md#signals-by-feature).
PLANS = {"0.5.5": "streamed_tokens", "0.5.7": "finished_guard", "0.5.9": "finished_guard",
         "0.5.23": "http_in_flight"}


def burst(index: int):
    """2-4 requests, streaming and not, finishing on every step offset from -3 to +3
    around a decode log (every 40 steps), one or two logs apart: the finishes the
    decode log still counts, and those it does not."""
    count = 2 + index % 3
    streams = [(index + i) % 4 != 3 for i in range(count)]
    offsets = [((index // 3 + 5 * i) % 7) - 3 + LOG_INTERVAL * (i % 2) for i in range(count)]

    def start(p) -> None:
        first_log = (p.decode_steps // LOG_INTERVAL + 1) * LOG_INTERVAL + LOG_INTERVAL // 2
        # Each request finishes `offset` steps after a log step at least 20 steps away.
        target = first_log - first_log % LOG_INTERVAL
        after = [target + offset - p.decode_steps for offset in offsets]
        order = sorted(range(count), key=lambda i: not streams[i])  # streaming ones first
        p.start_requests(streaming=sum(streams), non_streaming=count - sum(streams),
                         finish_after=[after[i] for i in order])

    return start


def bursts(count: int):
    return {index * BURST_EVERY: burst(index) for index in range(count)}


#: Each plan once by default; 0.5.9 shares 0.5.7's plan, and 300 bursts are the slow tier's.
RUNS = [pytest.param(v, BURSTS, id=v) for v in ("0.5.5", "0.5.7", "0.5.23")] + [
    pytest.param(v, 300, id=f"{v}-300", marks=pytest.mark.slow) for v in PLANS]


@pytest.mark.parametrize(("version", "count"), RUNS)
def test_idle_ending_bursts_invent_no_stall(version, count):
    out = play(version, "files", count * BURST_EVERY, bursts(count))
    assert out.plan is not None and out.plan.name == PLANS[version]
    false = [stall for stall in out.stalls if (stall[1] + stall[2]) / 2 >= 2.0]
    assert false == []
    assert out.longest_current < 2.0


@pytest.mark.parametrize("version", ["0.5.7", "0.5.23"])
def test_idle_ending_bursts_read_over_metrics_invent_no_stall(version):
    out = play(version, "metrics", PATTERN * BURST_EVERY, bursts(PATTERN))
    assert [s for s in out.stalls if (s[1] + s[2]) / 2 >= 2.0] == []


@pytest.mark.parametrize("version", ["0.5.5", "0.5.6"])
def test_a_speculative_non_streaming_request_alone_is_not_a_stall(version):
    """No decode pass counter before 0.5.7: a non-streaming request reaches the
    tokenizer when its length lands on a multiple of 50, and steps of 1-4 tokens jump
    over most of them. The decode log (every 40 steps) is what shows it decoding."""
    out = play(version, "files", 300.0,
               {0.0: lambda p: p.start_requests(non_streaming=1)},
               speculative_tokens=(1, 2, 3, 4), seed=7)
    assert out.plan is not None and out.plan.name == "streamed_tokens"
    assert [s for s in out.stalls if (s[1] + s[2]) / 2 >= 2.0] == []
    assert out.longest_current < 2.0
