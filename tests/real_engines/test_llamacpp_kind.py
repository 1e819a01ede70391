"""kind = "llamacpp" served end to end against a real llama-server: the collector on
its /metrics, /props and /slots, the tap on its native /completion, cached tokens per
agent, and the stall tracker's bounds against a client's own gap measurement through
the tap (docs/facts/llamacpp.md, docs/stall-tracker.md#llamacpp).

The stall is a real prefill: agent A decodes while agent B's fresh 16,384-token
prompt is read in batches of `-b 2048` on one thread (`-t 1`), each batch stopping A
once (measured 3.6-4.5 s a batch on this box).
"""

from __future__ import annotations

import asyncio
import random

import aiohttp
import pytest

from exporter.streams import StreamMeter
from tests.support.real_engines import (
    RealEngine,
    Timeline,
    agent_session,
    agent_stream,
    solo_exporter,
    token_ids,
)

pytestmark = pytest.mark.real_engine

#: The client's gap and the tracker's bounds are read at different places: the frame
#: leaves the server after n_decoded moved, and crosses the tap. This much either side.
EDGE_SECONDS = 0.3
#: A may decode this many tokens: more than it gets through B's prefill (8-10 s with
#: -t 2, more with one thread), within the 32k context the slots share with B's 16k.
#: It hangs up a second after B's answer.
A_TOKENS = 12_000
B_PROMPT_TOKENS = 16_384
#: A's answer in ASCII (a GBNF grammar): llama-server sends no frame for a token that
#: leaves incomplete UTF-8 (`validate_utf8` in tools/server/server-context.cpp), and a
#: random model's byte tokens once held A's frames back across two of B's batches, a
#: 16.7 s gap for the client while decode moved between them (the tracker: 8.0-8.5 s).
ASCII_ONLY = "root ::= [a-z ]+"


async def native_stream(session: aiohttp.ClientSession, url: str, agent: str, body: dict,
                        timeline: Timeline | None = None,
                        until: asyncio.Event | None = None) -> StreamMeter:
    """One agent's stream on llama-server's native /completion, through the tap."""
    return await agent_stream(session, url + "/completion", agent, body, timeline, until)


@pytest.mark.timeout(900)  # a 16k prefill on one thread of a shared 2-core box
@pytest.mark.parametrize("llama_engine", [("-b", "2048", "-t", "1")], indirect=True)
def test_llamacpp_kind_end_to_end(llama_engine: RealEngine) -> None:
    rng = random.Random(29)
    short, fresh = token_ids(64, rng), token_ids(B_PROMPT_TOKENS, rng)

    async def scenario():
        async with solo_exporter(llama_engine, "llamacpp") as solo, \
                agent_session() as session:
            url = solo.url
            # Cached tokens per agent: the same prompt twice, on the same slot.
            warm = await native_stream(session, url, "a", {"prompt": short, "n_predict": 8})
            again = await native_stream(session, url, "a", {"prompt": short, "n_predict": 8})
            idle = await solo.scrape()
            # A decodes; 2 s later B's fresh 16k prompt arrives.
            b_done = asyncio.Event()
            timeline = Timeline()
            async with timeline.watching():
                a = asyncio.create_task(native_stream(session, url, "a", {
                    "prompt": short[:16], "n_predict": A_TOKENS, "ignore_eos": True,
                    "grammar": ASCII_ONLY}, timeline, until=b_done))
                await asyncio.sleep(2.0)
                decoding = await solo.scrape()
                timeline.mark("B sent")
                b = await native_stream(session, url, "b", {"prompt": fresh, "n_predict": 4},
                                        timeline)
                timeline.mark("B done")
                during = await solo.scrape()
                await asyncio.sleep(1.0)  # A decodes on, then hangs up
                b_done.set()
                a_meter = await a
                timeline.mark("A done")
                await asyncio.sleep(2.0)  # llama-server notices the hang-up, releases A
                after = await solo.scrape()
            print("\n" + timeline.describe("a", solo.stalls()))
        return warm, again, idle, decoding, b, during, a_meter, after, timeline

    warm, again, idle, decoding, b, during, a, after, timeline = asyncio.run(scenario())

    # The tap reads the native frames: counts from tokens_predicted, the cached part
    # of the prompt from timings.cache_n (at least one token is always evaluated).
    assert warm.timer.timing().tokens == 8 and warm.prompt_tokens == 64
    assert again.cached_tokens == 63
    assert idle["rig_agent_cached_prompt_tokens_total[agent=alpha]"] == 63 + (
        warm.cached_tokens or 0)
    assert idle["rig_agent_prompt_tokens_total[agent=alpha]"] == 128
    # The collector: whole prompts, as the agents' own counts say.
    assert idle["rig_engine_prompt_tokens_total"] >= 128
    assert idle["rig_engine_cache_hit_tokens_total[tier=L1]"] >= 63
    assert idle["rig_engine_context_length_tokens"] == 32_768
    assert idle["rig_engine_decode_stall_plan_info"] == 1
    # While A decodes: one slot processing, its request growing; no stall.
    assert decoding["rig_engine_running_requests"] == 1
    busy = [k for k, v in decoding.items() if k.startswith("rig_engine_slot_processing") and v]
    assert len(busy) == 1
    assert decoding["rig_engine_decode_stall_seconds"] == 0

    # The stall tracker against A's own gaps, measured through the tap.
    gaps = a.timer.timing()
    longest = gaps.max_gap_seconds
    low, high = (after["rig_engine_decode_stall_max_seconds"],
                 after["rig_engine_decode_stall_max_upper_seconds"])
    print(f"\nA's longest gap {longest:.3f} s; tracker's bounds [{low:.3f}, {high:.3f}] s, "
          f"longest blind span {after['rig_engine_decode_stall_max_blind_seconds']:.3f} s; "
          f"B's TTFT {b.timer.timing().ttft_seconds:.2f} s; "
          f"stalled total {after['rig_engine_decode_stalled_seconds_total']:.2f} s")
    assert longest > 1.0  # a real stall, not decode's cadence
    # Void if the test's own process stood still across the gap: the pause is its own.
    assert not timeline.stood_still_within(*timeline.longest_pause("a")), \
        "the test's own event loop stood still across A's longest pause (the timeline above)"
    assert low - EDGE_SECONDS <= longest <= high + EDGE_SECONDS
    assert high - low <= 2 * 0.25 + EDGE_SECONDS  # two polls apart, and their answers
    assert after["rig_engine_decode_stalled_seconds_total"] >= low
    # The token counters moved when the requests ended, not during them.
    assert during["rig_engine_generation_tokens_total"] <= idle[
        "rig_engine_generation_tokens_total"] + 4
    assert after["rig_engine_generation_tokens_total"] >= (
        idle["rig_engine_generation_tokens_total"] + 4 + (a.timer.tokens or 0))
