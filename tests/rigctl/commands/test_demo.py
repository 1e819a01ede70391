"""`rigctl demo --list` and the default tour, without running it (tests/e2e/test_demo.py
runs it)."""

from __future__ import annotations

import io
import re

import pytest

from exporter.rigctl import main
from exporter.rigctl.commands.demo import HEALTHY_SECONDS, TOUR
from exporter.sim.scenarios import SCENARIOS

DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def seconds(text: str) -> int:
    match = DURATION.fullmatch(text)
    assert match and text, text
    hours, minutes, rest = (int(part or 0) for part in match.groups())
    return hours * 3600 + minutes * 60 + rest


def listing(*args: str) -> list[str]:
    out = io.StringIO()
    assert main(["demo", "--list", *args], out) == 0
    return out.getvalue().splitlines()


def rows(lines: list[str]) -> dict[str, list[str]]:
    """Scenario name -> its row's fields (the tour's mark dropped)."""
    return {fields[0]: [f for f in fields[1:] if f != "*"]
            for fields in (line.split() for line in lines) if fields[0] in SCENARIOS}


@pytest.mark.parametrize("speed", [10.0, 25.0])
def test_list_gives_each_scenarios_length_in_rig_time_and_real_time(speed: float) -> None:
    table = rows(listing("--speed", f"{speed:g}"))
    assert set(table) == set(SCENARIOS)
    for name, scenario in SCENARIOS.items():
        # A scenario without an alert to show is watched for its first minutes only.
        played = scenario.seconds if scenario.expects else HEALTHY_SECONDS
        rig, real = table[name][:2]
        assert abs(seconds(rig) - played) <= 0.5, (name, rig)
        assert abs(seconds(real) - played / speed) <= 0.5, (name, real)
        assert " ".join(table[name][2:]) == scenario.summary


def test_the_default_tour_shows_hicache_thrash_among_the_four_failures() -> None:
    lines = listing()
    marked = [line.split()[0] for line in lines if line.split()[1:2] == ["*"]]
    assert sorted(marked, key=TOUR.index) == list(TOUR) and len(set(marked)) == len(marked)
    assert {"prefill-starves-decode", "thermal-downclock", "hicache-thrash",
            "swap-storm"} <= set(marked)
    total = re.search(r"the default tour: (\S+) of rig time, (\S+) at x10", lines[-1])
    assert total, lines[-1]
    tour_seconds = sum(SCENARIOS[n].seconds if SCENARIOS[n].expects else HEALTHY_SECONDS
                       for n in TOUR)
    assert abs(seconds(total.group(1)) - tour_seconds) <= 0.5
    assert abs(seconds(total.group(2)) - tour_seconds / 10) <= 0.5
