"""The real-engine tier's own witness (tests/support/real_engines.py Timeline): a test
process that stood still must say so, or a pause of its own reads as the engine's.
No engine needed: this runs in the default suite."""

from __future__ import annotations

import asyncio
import time

from tests.support.real_engines import LOOP_STILL_SECONDS, Timeline


def test_a_blocked_event_loop_is_noted_with_its_stack() -> None:
    timeline = Timeline()

    async def scenario() -> None:
        async with timeline.watching():
            await asyncio.sleep(0.2)
            timeline.arrived("a")
            time.sleep(LOOP_STILL_SECONDS * 2.5)  # what a starved or blocked loop does
            timeline.arrived("a")
            await asyncio.sleep(0.2)

    asyncio.run(scenario())

    (at, seconds), = timeline.loop_still
    assert seconds >= LOOP_STILL_SECONDS * 2
    # A's pause lies across the standstill: its measurement is void.
    assert timeline.stood_still_within(*timeline.longest_pause("a")) == [(at, seconds)]
    assert not timeline.stood_still_within(0.0, at - 0.01)
    # The thread was free to tick (the loop, not the process, stood still), and
    # faulthandler named the blocking line.
    assert not timeline.thread_still
    assert "test_timeline.py" in timeline.stacks
    assert "stood still" in timeline.describe("a", [])


def test_a_loop_that_keeps_ticking_notes_nothing() -> None:
    timeline = Timeline()

    async def scenario() -> None:
        async with timeline.watching():
            await asyncio.sleep(0.5)

    asyncio.run(scenario())
    assert timeline.loop_still == [] and timeline.stacks == ""
    assert "stood still" not in timeline.describe("a", [])
