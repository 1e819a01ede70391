"""No stall lost to the step: a 47 s decode stall (the rig's own, docs/facts/rig.md)
shows as starvation on every decode and overview panel that draws the stall tracker,
at 1 h, 6 h and 24 h, wherever the stall falls in Grafana's step grid.

A real Prometheus serves a day of the tracker's gauges (tests/dashboards/stall_day.py);
each panel's queries are sent as Grafana sends them (rigdev/grafana_query.py: the
step from the range and the panel's maxDataPoints, start and end rounded to it), for
renders whose end moves through one step, and the panel must reach the 10 s starvation
line in every one of them. With grafanalib's maxDataPoints of 100 and plain gauges,
the tracker's line showed in a third of 6 h renders (bench/bench_dashboard_aliasing.py).

The agents dashboard's gauges of a maximum likewise (the longest gap, the oldest request
and first-token wait, the largest response): each event of the day, one agent holding
the engine 11 minutes while another waits 3, must reach its alert's line in every render.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.dashboards.queries import committed
from tests.dashboards.stall_day import (
    CRITICAL,
    RANGES,
    RENDERS,
    Prometheus,
    agent_maxima,
    renders,
    stall_day,
    stall_panels,
)

PANELS = stall_panels(committed())
AGENT_MAXIMA = agent_maxima(committed())


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    with stall_day(tmp_path_factory.mktemp("aliasing")) as prometheus:
        yield prometheus


def test_the_stall_panels_are_found() -> None:
    assert {"Rig: decode and latency › Longest token gap: probe, stream tap, stall tracker",
            "Rig: decode and latency › Stall tracker: stall under way and its resolution",
            "Rig: overview › Decode: longest gap"} <= set(PANELS), sorted(PANELS)


@pytest.mark.parametrize("span", sorted(RANGES))
@pytest.mark.parametrize("title", sorted(PANELS))
def test_a_47s_stall_shows_at_every_range(prometheus: Prometheus, title: str,
                                          span: str) -> None:
    highest = renders(prometheus, PANELS[title], RANGES[span])
    missed = [value for value in highest if value < CRITICAL]
    assert not missed, (f"{title} at {span}: the stall reads {highest} s, under"
                        f" {CRITICAL:g} s in {len(missed)} of {RENDERS} renders")


def test_the_agents_maxima_are_found() -> None:
    assert {"Longest token gap per agent › rig_agent_max_token_gap_seconds",
            "Requests in flight and their age › rig_agent_longest_request_seconds",
            "Requests in flight and their age › rig_agent_longest_first_token_wait_seconds",
            "Largest response in flight › rig_agent_response_tokens_max",
            "Largest response in flight › rig_agent_unbounded_response_tokens_max",
            } == set(AGENT_MAXIMA), sorted(AGENT_MAXIMA)


@pytest.mark.parametrize("span", sorted(RANGES))
@pytest.mark.parametrize("query", sorted(AGENT_MAXIMA))
def test_an_agents_peak_shows_at_every_range(prometheus: Prometheus, query: str,
                                             span: str) -> None:
    panel, line = AGENT_MAXIMA[query]
    highest = renders(prometheus, panel, RANGES[span])
    missed = [value for value in highest if value < line]
    assert not missed, (f"{query} at {span}: the peak reads {highest}, under {line:g}"
                        f" in {len(missed)} of {RENDERS} renders")
