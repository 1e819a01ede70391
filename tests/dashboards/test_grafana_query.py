"""rigdev/grafana_query.py sends a query as Grafana's Prometheus data source does."""

from __future__ import annotations

import pytest

from rigdev.grafana_query import color_of, interval, request, round_interval


@pytest.mark.parametrize(("raw", "rounded"), [
    (1.0, 1), (12.0, 10), (14.0, 15), (36.0, 30), (45.0, 30), (46.0, 60), (216.0, 300),
    (864.0, 900), (3600.0, 3600),
])
def test_round_interval_follows_grafanas_table(raw: float, rounded: float) -> None:
    assert round_interval(raw) == rounded


def test_the_interval_is_never_under_the_scrape_interval() -> None:
    assert interval(3600, 100, 15) == 30  # grafanalib's 100 points over 1 h
    assert interval(3600, 1920, 15) == 15  # the data source's timeInterval floor


def test_a_range_query_is_aligned_to_its_step_and_fills_the_builtins() -> None:
    target = {"expr": 'max_over_time(x{rig=~"$rig"}[$__interval])'
                      ' + rate(y[$__rate_interval]) + z[$__range]', "refId": "A"}
    sent = request(target, 100, 1000.0, 1000.0 + 6 * 3600, 15.0, {"rig": "r1"})
    assert sent.step == 300 and sent.start == 900 and sent.end == 22500
    assert sent.expr == ('max_over_time(x{rig=~"r1"}[300s]) + rate(y[315s])'
                         ' + z[21600s]')


def test_an_instant_query_runs_at_the_end_of_the_range() -> None:
    sent = request({"expr": "up", "refId": "A", "instant": True}, 100, 0.0, 3600.0, 15.0)
    assert sent.step is None and sent.end == 3600.0


def test_a_value_takes_the_colour_of_the_last_step_it_reaches() -> None:
    steps = [{"color": "green", "value": None}, {"color": "orange", "value": 2.0},
             {"color": "red", "value": 10.0}]
    assert [color_of(v, steps) for v in (1.9, 2.0, 9.99, 10.0, float("nan"))] == [
        "green", "orange", "orange", "red", "green"]
