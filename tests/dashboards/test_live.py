"""Every dashboard query, run by the real Prometheus against the simulated rig.

The stack (tests/dashboards/live.py): the simulated SGLang server, sysfs and /proc
trees, the real `rig-exporter` reading them, and Prometheus 2.42 scraping it every
second with the committed recording and alerting rules. Each panel query is sent
as Grafana would send it with every variable on All (`.+`) and `$__rate_interval`
at four scrape intervals (Grafana's floor for it). Each must parse and return at
least one series. Queries that can only return data during a fault run under it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.sim.rig.sysfs_writer import RIG_CARDS, write_card
from tests.dashboards.live import RIG, SCRAPE_SECONDS, Stack, running_stack
from tests.dashboards.queries import PanelQuery, committed, panel_queries, substitute, variables

RATE_INTERVAL = f"{4 * SCRAPE_SECONDS}s"

# Series that exist only while a fault is under way, and the scenario that makes them.
SCENARIO_ONLY = {"ALERTS": "thermal"}


def _families(expr: str) -> set[str]:
    return set(re.findall(r"\b(rig_\w+|ALERTS)\b", expr))


def _scenario(query: PanelQuery) -> str:
    return next((SCENARIO_ONLY[f] for f in _families(query.expr) if f in SCENARIO_ONLY),
                "healthy")


QUERIES = panel_queries()
HEALTHY = [q for q in QUERIES if _scenario(q) == "healthy"]
THERMAL = [q for q in QUERIES if _scenario(q) == "thermal"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("live")) as stack:
        # Recorded series over counters need two scrapes and a rule evaluation.
        for recorded in ("engine_tier:rig_engine_cache_hit_tokens:ratio_rate_window",
                         "engine:rig_engine_hicache_churn_tokens:rate_window",
                         "instance:rig_host_swap_io_bytes:rate_window",
                         f'rig_probe_success{{rig="{RIG}"}}',
                         "rig_stream_generated_tokens_total"):
            stack.wait_for(recorded, timeout=90)
        yield stack


def _finite(series: list[dict]) -> list[float]:
    values = (float(v) for s in series for _, v in s["values"])
    return [v for v in values if not math.isnan(v)]


def _series(stack: Stack, query: PanelQuery, deadline: float) -> list[dict]:
    """The query's result over the last 10 s, waiting (until `deadline`) for a series
    with a number in it (a quantile over a flat histogram is a series of NaN)."""
    expr = substitute(query.expr, RATE_INTERVAL, time_range="60s")
    while True:
        body = stack.query_range(expr)
        assert body["status"] == "success", f"{query.where}: {expr}\n{body.get('error')}"
        if _finite(body["data"]["result"]) or time.monotonic() > deadline:
            return body["data"]["result"]
        time.sleep(1)


def test_the_dashboards_have_queries() -> None:
    assert len(committed()) == 6
    assert len(HEALTHY) > 60 and THERMAL
    assert any("rig_host_cpu_temperature_celsius" in q.expr for q in HEALTHY)


def test_every_variable_has_values(stack: Stack) -> None:
    for dashboard in committed():
        for name, variable in variables(dashboard).items():
            if variable["type"] != "query":
                continue
            match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"])
            assert match, f"dashboard {dashboard['title']!r}, variable {name}: {variable['query']}"
            selector, label = match.groups()
            values = {s.get(label) for s in stack.series(substitute(selector, RATE_INTERVAL))}
            assert values - {None}, (
                f"dashboard {dashboard['title']!r}, variable {name}: no {label} values")


# Per-agent families exist only once an agent's request told the tap its counts (the
# last prompt, say); the healthy rig's agents may not have sent one yet, and their
# tiles then say "no agents". A query on such a family is judged once it has samples.
# So are llama.cpp's own families (docs/metrics.md#llamacpp-slots) on the live stack's
# SGLang rig: tests/sim/test_llamacpp_front.py reads them from a llama.cpp rig. So are
# the forward-pass feed's (docs/stall-tracker.md#the-forward-pass-feed), which the
# simulated SGLang does not publish: tests/daemon/engines/stall/test_feed_process.py
# reads them from a publisher of the feed.
AGENT_FAMILY = re.compile(r"\brig_agent_[a-z_]+|\brig_engine_(?:slot_[a-z_]+|decode_calls_total"
                          r"|decode_stall_feed_[a-z_]+|decode_stall_prefill_run_[a-z_]+)")


def _samples_of_every_agent_family(expr: str, exported: str) -> bool:
    return all(re.search(rf"^{name}[{{ ]", exported, re.M)
               for name in AGENT_FAMILY.findall(expr))


def test_every_panel_query_returns_series(stack: Stack) -> None:
    exported = stack.exposition()
    queries = [q for q in HEALTHY if _samples_of_every_agent_family(q.expr, exported)]
    deadline = time.monotonic() + 30
    empty = [q.where + ": " + q.expr
             for q in queries if not _finite(_series(stack, q, deadline))]
    assert not empty, "no series with a number:\n" + "\n".join(empty)


def test_starvation_shows_on_the_gap_panels(stack: Stack) -> None:
    """An 8 s decode pause with requests running reaches the token-gap panels as at
    least 3 s. The stall tracker reads /metrics here under a 2 % engine-render budget,
    so it polls every render time / 0.018 (1-2 s for this body on a loaded 2-core
    box; docs/stall-tracker.md#where-the-counters-come-from) and sees a pause to within that."""
    gaps = next(q for q in QUERIES
                if q.panel.startswith("Longest token gap") and "stall_max" in q.expr)
    stack.sim.call(lambda: stack.sim.server.state.pause_decode(8))
    deadline = time.monotonic() + 60
    longest = 0.0
    while longest < 3 and time.monotonic() < deadline:
        time.sleep(1)
        for series in _series(stack, gaps, deadline):
            longest = max([longest, *(float(v) for _, v in series["values"])])
    assert longest >= 3, f"{gaps.where}: the longest stall read {longest} s"


def test_thermal_scenario_queries(stack: Stack, tmp_path: Path) -> None:
    """card2's junction at 106 °C (limit 110) and sclk at 65 % of its max under load:
    RigGpuHot and RigGpuThermalDownclock go pending, and the alert panels show them."""
    hot = dataclasses.replace(RIG_CARDS[1], junction_mc=106_000, sclk_hz=1_500_000_000)
    write_card(stack.sysfs_root, hot)
    stack.wait_for('ALERTS{alertname="RigGpuHot", card="card2"}', timeout=60)
    deadline = time.monotonic() + 30
    for query in THERMAL:
        names = {s["metric"].get("alertname") for s in _series(stack, query, deadline)}
        assert "RigGpuHot" in names, f"{query.where}: alerts shown {names}"
