"""The decode stall tracker: in simulated time against the simulator, and once in real time.

The simulated-time tests share one fake clock between the simulated engine (whose
decode batches advance with it) and the tracker, and poll over real loopback HTTP
every 0.25 simulated seconds, so a 47 s pause costs well under a second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import Config, GpuConfig, HostConfig
from exporter.daemon.collector import families
from exporter.daemon.engines.fetch import get_text
from exporter.daemon.engines.normalise import EngineMetrics
from exporter.daemon.engines.source import EngineReading
from exporter.daemon.engines.stall.evidence import Evidence
from exporter.daemon.engines.stall.planner import Planner
from exporter.daemon.engines.stall.readers import MetricsBody, MetricsReader
from exporter.daemon.engines.stall.tracker import DecodeStallTracker, StallPoller, StallState
from exporter.daemon.runtime import Exporter
from exporter.sim.engine.state import Fault, SimEngine
from tests.daemon.engines.helpers import engine_config, running_sim
from tests.support.clock import FakeClock

TICK = 0.25


Events = dict[float, Callable[[SimEngine], None]]


def simulate(seconds: float, events: Events, running: int = 2) -> tuple[StallState, float]:
    """Run the scenario for `seconds` of simulated time; return the final state and the
    longest `current` stall seen on the way."""

    async def scenario() -> tuple[StallState, float]:
        clock = FakeClock()
        state = SimEngine(clock=clock)
        state.running = running
        start = clock.now
        async with running_sim(state) as server, aiohttp.ClientSession() as session:
            body = MetricsBody(lambda: get_text(session, server.url + "/metrics"), clock)
            planner = Planner("main", Evidence(state.version))
            poller = StallPoller(MetricsReader(body, TICK), planner,
                                 clock=clock)
            pending = sorted(events.items())
            longest_current = 0.0
            while clock.now - start <= seconds:
                while pending and pending[0][0] <= clock.now - start:
                    pending.pop(0)[1](state)
                await poller.poll_once()
                longest_current = max(longest_current, poller.state().current_seconds)
                clock.now += TICK
            return poller.state(), longest_current

    return asyncio.run(scenario())


def pause(seconds: float) -> Callable[[SimEngine], None]:
    return lambda state: state.pause_decode(seconds)


@pytest.mark.parametrize("pause_seconds", [47.0, 4.0])
def test_scripted_pause_with_two_running_requests(pause_seconds):
    final, longest = simulate(pause_seconds + 10, {3.1: pause(pause_seconds)})
    assert longest == pytest.approx(pause_seconds, abs=0.5)
    assert final.max_recent_seconds == pytest.approx(pause_seconds, abs=0.5)
    assert final.total_seconds == pytest.approx(pause_seconds, abs=0.5)
    assert final.current_seconds == 0.0  # decode resumed


def test_stall_under_way_is_reported_while_it_lasts():
    final, _ = simulate(20.0, {5.0: pause(100.0)})
    assert final.current_seconds == pytest.approx(15.0, abs=0.5)
    assert final.total_seconds == pytest.approx(final.current_seconds)


def test_engine_restart_mid_run_is_not_a_stall():
    final, longest = simulate(20.0, {8.0: SimEngine.restart})
    assert (longest, final.max_recent_seconds, final.total_seconds) == (0.0, 0.0, 0.0)


def test_idle_engine_is_not_stalled():
    final, longest = simulate(30.0, {}, running=0)
    assert (longest, final.total_seconds) == (0.0, 0.0)


def test_engine_off_the_network_is_not_a_stall():
    def drop(state: SimEngine) -> None:
        state.fault = Fault.REFUSE
        state.pause_decode(15.0)  # nothing decodes while it is gone

    def back(state: SimEngine) -> None:
        state.fault = Fault.NONE

    final, longest = simulate(30.0, {5.0: drop, 20.0: back})
    assert (longest, final.total_seconds) == (0.0, 0.0)


class TestTrackerRules:
    def test_max_forgets_stalls_older_than_60_s(self):
        tracker = DecodeStallTracker()
        tracker.observe(0.0, 10, running=1)
        for t in (1.0, 2.0, 3.0):
            tracker.observe(t, 10, running=1)
        tracker.observe(4.0, 11, running=1)
        assert tracker.state(4.0).max_recent_seconds == 3.0
        assert tracker.state(63.5).max_recent_seconds == 0.0
        assert tracker.state(63.5).total_seconds == 3.0

    def test_a_compressed_window_forgets_sooner(self):
        tracker = DecodeStallTracker(window_seconds=6.0)
        for t, progress in ((0.0, 10), (1.0, 10), (3.0, 10), (4.0, 11)):
            tracker.observe(t, progress, running=1)
        # The stall ended at the last stalled poll (3 s): gone 6 s later.
        assert tracker.state(8.5).max_recent_seconds == 3.0
        assert tracker.state(9.5).max_recent_seconds == 0.0

    @pytest.mark.parametrize(("window", "help_text"), [
        (None, "Longest decode stall in the last 60 s, at least."),
        (6.0, "Longest decode stall in the last 6 s, at least."),
    ])
    def test_the_longest_stall_family_says_its_window(self, window, help_text):
        tracker = DecodeStallTracker() if window is None else DecodeStallTracker(window)
        reading = EngineReading("sglang", "main", EngineMetrics(), None, tracker.state(0.0))
        (longest,) = [f for f in families(reading)
                      if f.name == "rig_engine_decode_stall_max_seconds"]
        assert longest.documentation == help_text

    def test_going_idle_ends_a_stall_at_the_last_stalled_poll(self):
        tracker = DecodeStallTracker()
        tracker.observe(0.0, 5, running=2)
        tracker.observe(2.0, 5, running=2)
        tracker.observe(2.25, 5, running=0)
        # Ended between the last stalled poll and the idle one: at most 2.25 s.
        assert tracker.state(2.25) == StallState(0.0, 2.0, 2.0, 0.0, 2.25,
                                                 max_recent_blind_seconds=2.0)

    def test_counter_reset_rebaselines(self):
        tracker = DecodeStallTracker()
        tracker.observe(0.0, 500, running=2)
        tracker.observe(0.25, 3, running=2)
        tracker.observe(0.5, 9, running=2)
        assert tracker.state(0.5).total_seconds == 0.0


def test_real_time_pause_end_to_end(cpu_load):
    """Real clock, real background task, real exporter render: a 3 s pause."""

    async def scenario() -> str:
        state = SimEngine(token_usage=0.3)
        state.running = 2
        async with running_sim(state) as server:
            config = Config(gpu=GpuConfig(enabled=False), host=HostConfig(enabled=False),
                            engines=(engine_config(server.url),))
            exporter = Exporter(config)
            await exporter.start()
            try:
                await asyncio.sleep(0.6)
                state.pause_decode(3.0)
                await asyncio.sleep(3.0)
                # Then until the tracker has polled after the pause (its interval is
                # the budget's, longer when this machine is loaded); bounded.
                for _ in range(40):
                    text = exporter.render(await exporter.snapshot()).decode()
                    if "rig_engine_decode_stall_seconds{" in text and (
                            'engine="main",kind="sglang"} 0.0' in text.split(
                                "rig_engine_decode_stall_seconds{")[1].split("\n")[0]):
                        break
                    await asyncio.sleep(0.25)
                return text
            finally:
                await exporter.close()

    text = asyncio.run(scenario())
    values = {(s.name, s.labels.get("source")): s.value
              for f in text_string_to_metric_families(text) for s in f.samples}
    assert values[("rig_source_up", "engine/main")] == 1.0
    # Read over /metrics, the tracker polls as the 2 % budget allows; a stall's two
    # ends are each known to within a poll, and the poll interval moves with this
    # machine's load, so the real-time check is coarse (the exact ones are simulated).
    resolution = values[("rig_engine_decode_stall_resolution_seconds", None)]
    longest = values[("rig_engine_decode_stall_max_seconds", None)]
    assert 1.0 <= longest <= 3.0 + resolution + 0.25
    assert values[("rig_engine_decode_stalled_seconds_total", None)] == pytest.approx(longest)
    assert values[("rig_engine_decode_stall_seconds", None)] == 0.0
