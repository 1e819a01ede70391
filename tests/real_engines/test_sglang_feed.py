"""The stall plan forward_pass_feed against the real SGLang 0.5.23 for the CPU
(docs/stall-tracker.md#the-forward-pass-feed), beside the counter plans on the same
stall.

SGLang is started with its default scheduler flags and the feed on
(`--enable-forward-pass-metrics --forward-pass-metrics-ipc-name ipc://PATH`; on the CPU
the tier's SGLang venv gives DeviceTimer a host-clock event, tests/real_engines/
sglang_cpu). A decodes, B's fresh 12,288-token prompt arrives (three 4,096-token
chunks, run back to back without mixed chunk); three exporters watch at once: one
subscribed to the feed (with metrics_dir for its in-flight readings), one on
metrics_dir alone, one on /metrics alone. The feed's bracket must hold A's longest
client-side gap and be at most FEED_WIDTH_SECONDS wide.

It runs on the tier's SGLang launcher (`sglang_server`, tests/support/real_engines.py),
which the branch that installs SGLang in the tier brings. The two counter-plan
exporters set `forward_pass_metrics_ipc = "off"`: /server_info names the feed, and
they would find it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Iterator

import pytest

from exporter.config import AgentConfig, Config, EngineConfig, GpuConfig, HostConfig
from exporter.daemon.engines.source import EngineSource
from exporter.daemon.runtime import Exporter
from exporter.process.launch import free_port
from tests.support.real_engines import (
    MODEL,
    SOLO,
    SOLO_STALL_WINDOW_SECONDS,
    RealEngine,
    Solo,
    Timeline,
    agent_session,
    agent_stream,
    token_ids,
)

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(900)]

CHUNK_TOKENS = 4096
B_PROMPT_TOKENS = 3 * CHUNK_TOKENS
A_PROMPT_TOKENS = 16
A_TOKENS = 8000
#: The acceptance's width for the feed's bracket of the default-flags stall.
FEED_WIDTH_SECONDS = 0.3
#: The client's gap and the feed's bounds are read at two ends of one path: a pass's
#: end in the scheduler, a frame's arrival after the detokenizer, the tokenizer and
#: the tap. The path's time is in both ends of the gap; its jitter is not.
EDGE_SECONDS = 0.1


@pytest.fixture(scope="module")
def sglang(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealEngine, str]]:
    """The engine, and the feed's base name."""
    # The SGLang launcher of the tier (branch `sglang`): imported here, where the tier
    # needs it, so that the default suite collects this module without it.
    from tests.support.real_engines import sglang_server

    workdir = tmp_path_factory.mktemp("sglang-feed")
    feed = f"ipc://{workdir}/fpm"
    with sglang_server(("--enable-forward-pass-metrics", "--forward-pass-metrics-ipc-name",
                        feed), workdir, workdir / "prometheus-multiproc") as engine:
        yield engine, feed


@contextlib.asynccontextmanager
async def exporter_of(engine: RealEngine, feed: str, metrics_dir: bool) -> AsyncIterator[Solo]:
    """An in-process exporter of the engine with a tap; `feed` its
    forward_pass_metrics_ipc ("off": the counter plan alone, though /server_info
    names the feed), with or without the engine's metrics_dir."""
    tap = f"127.0.0.1:{free_port()}"
    table = EngineConfig(name=SOLO, url=engine.url, kind="sglang", tap_listen_address=tap,
                         stall_window_seconds=SOLO_STALL_WINDOW_SECONDS,
                         metrics_dir=str(engine.metrics_dir) if metrics_dir else "",
                         forward_pass_metrics_ipc=feed,
                         agents=(AgentConfig("alpha", header_name="X-Agent", header_value="a"),))
    exporter = Exporter(Config(gpu=GpuConfig(enabled=False), host=HostConfig(enabled=False),
                               engines=(table,)))
    await exporter.start()
    try:
        yield Solo(exporter, f"http://{tap}")
    finally:
        await exporter.close()


def completion(prompt: list[int], tokens: int) -> dict:
    return {"model": MODEL, "prompt": prompt, "max_tokens": tokens, "ignore_eos": True}


def plan(solo: Solo) -> str:
    (engine,) = (s for s in solo.exporter.sources if isinstance(s, EngineSource))
    assert engine.stall is not None and engine.stall.plan is not None
    return engine.stall.plan.name


def test_the_feeds_bracket_holds_as_gap_and_is_narrow(
        sglang: tuple[RealEngine, str]) -> None:
    engine, feed = sglang
    rng = random.Random(47)
    short, fresh = token_ids(A_PROMPT_TOKENS, rng), token_ids(B_PROMPT_TOKENS, rng)
    timeline = Timeline()

    async def scenario() -> tuple[dict, dict, dict, list[str], dict]:
        async with exporter_of(engine, feed, metrics_dir=True) as fed, \
                exporter_of(engine, "off", metrics_dir=True) as files, \
                exporter_of(engine, "off", metrics_dir=False) as scraped, \
                agent_session() as session:
            async with timeline.watching():
                b_done = asyncio.Event()
                a = asyncio.create_task(agent_stream(
                    session, fed.url + "/v1/completions", "a", completion(short, A_TOKENS),
                    timeline, until=b_done))
                await asyncio.sleep(3.0)
                decoding = await fed.scrape()
                timeline.mark("B sent")
                await agent_stream(session, fed.url + "/v1/completions", "b",
                                   completion(fresh, 4), timeline)
                timeline.mark("B done")
                await asyncio.sleep(1.5)
                b_done.set()
                await a
                await asyncio.sleep(3.0)
                ended = [await solo.scrape() for solo in (fed, files, scraped)]
                plans = [plan(solo) for solo in (fed, files, scraped)]
            print("\nfeed: " + timeline.describe("a", fed.stalls()))
        return decoding, *ended, plans

    decoding, fed, files, scraped, plans = asyncio.run(scenario())
    paused_from, paused_to = timeline.longest_pause("a")
    longest = paused_to - paused_from
    brackets = {}
    for name, ended in (("feed", fed), ("metrics_dir", files), ("/metrics", scraped)):
        low, high = (ended["rig_engine_decode_stall_max_seconds"],
                     ended["rig_engine_decode_stall_max_upper_seconds"])
        brackets[name] = (low, high)
        print(f"{name}: A's longest gap {longest:.3f} s, the bracket [{low:.3f}, {high:.3f}] s "
              f"({high - low:.3f} s wide)")
    print(f"feed: longest prefill-only run "
          f"{fed['rig_engine_decode_stall_prefill_run_max_seconds']:.2f} s over "
          f"{fed['rig_engine_decode_stall_prefill_run_max_passes']:.0f} passes, "
          f"{fed['rig_engine_decode_stall_feed_dropped_messages_total']:.0f} messages lost")
    assert plans == ["forward_pass_feed", "http_in_flight", "http_in_flight"]
    assert decoding["rig_engine_decode_stall_seconds"] == 0
    low, high = brackets["feed"]
    assert high - low <= FEED_WIDTH_SECONDS
    assert low - EDGE_SECONDS <= longest <= high + EDGE_SECONDS
    # B's three chunks ran back to back: one run of prefill-only passes.
    assert fed["rig_engine_decode_stall_prefill_run_max_passes"] >= B_PROMPT_TOKENS // CHUNK_TOKENS
    assert not timeline.stood_still_within(paused_from, paused_to), \
        "the test's own event loop stood still across A's longest pause (the timeline above)"
