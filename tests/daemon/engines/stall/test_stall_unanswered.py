"""A stall the engine does not answer through: late (no answer within the tracker's
wait) or not at all (connection refused or reset), part-way through the stall
(docs/stall-tracker.md#honest-bounds).

No answer says nothing about decode, so the stall under way stays open, and the
next answer closes it if decode moved: the lower bound is what the answers saw, the
upper bound runs to the answer that saw decode move again. Ending the stall at the
last answer instead cut it short: a 12 s stall with the engine silent from its 4th
to its 8th second read as a 4 s one, below the starvation line. While the engine is
unreachable its source is down (rig_source_up 0): the outage has its own series.

A real exporter process reads a simulated SGLang on a thread of the test, as in
test_stall_process.py; for 4 s mid-stall the engine's /metrics trickles each body
over 3 s (Fault.SLOW_BODY, past the tracker's 2 s wait) or closes each connection
unanswered (Fault.REFUSE).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from exporter.process.launch import start_exporter
from exporter.sim.engine.state import Fault, SimEngine
from tests.scrape import ended_stall_bounds, scrape, value
from tests.support.process import SimThread, wait_for_log

STALL = 12.0
SILENT_FROM, SILENT_FOR = 4.0, 4.0  # seconds into the stall, and how long
LATE_BY = 3.0  # a late answer's delay, past the tracker's 2 s wait
IDS = {"engine": "main", "kind": "sglang"}


def bounds_with_a_silence(fault: Fault, log_dir: Path) -> tuple[float, float, float, bool]:
    """The exported (lower, upper) bounds of one true 12 s stall through which the
    engine's /metrics goes silent for 4 s, the longest gap its counter can show, and
    whether the engine's source was seen down."""
    engine = SimEngine(version="0.0.0.dev0")
    longest_gap = STALL + 2 / engine.decode_batches_per_second
    engine.running = 2
    engine.slow_body_seconds = LATE_BY
    sim = SimThread(engine)
    with sim as engine_url, start_exporter(
            ["--engine", f"main={engine_url}", "--no-collector.gpu", "--no-collector.host"],
            log_dir, name=f"stall-{fault}") as exporter:
        wait_for_log(exporter, "stall tracker plan", timeout=30)
        time.sleep(3.0)  # decoding, with polls at the budget's interval
        sim.loop.call_soon_threadsafe(engine.pause_decode, STALL)
        time.sleep(SILENT_FROM)
        engine.fault = fault
        time.sleep(SILENT_FOR)
        source_up = value(scrape(exporter.url), "rig_source_up", source="engine/main")
        engine.fault = Fault.NONE
        time.sleep(STALL - SILENT_FROM - SILENT_FOR)
        lower, upper = ended_stall_bounds(exporter.url, 20.0, exporter.log, **IDS)
        return lower, upper, longest_gap, source_up == 0.0


@pytest.mark.parametrize("fault", [Fault.SLOW_BODY, Fault.REFUSE], ids=["late", "refused"])
def test_a_silence_mid_stall_keeps_it_open_to_the_next_answer(fault, tmp_path):
    lower, upper, longest_gap, seen_down = bounds_with_a_silence(fault, tmp_path)
    print(f"{fault}: {lower:.2f}-{upper:.2f} s, middle {(lower + upper) / 2:.2f} s")
    # One stall, not the piece before the silence: it holds the true gap.
    assert lower <= longest_gap and upper >= STALL
    # The lower bound is what the answers saw: the last one before decode moved
    # again, a poll interval (0.25 s at the floor) or a slow answer before the end.
    assert lower >= STALL - 2.0
    # The upper bound runs to the answer that saw decode move: a poll or a late answer
    # after the stall's end, not the silence.
    assert upper <= longest_gap + LATE_BY + 1.0
    if fault == Fault.REFUSE:
        assert seen_down, "the outage shows as the engine's source down"
