"""What a scenario is: a timeline of steps in scenario seconds, and the alerts it
must raise and must not.

A scenario starts with a healthy lead-in, then the fault, and optionally a heal.
`fault_at` and `heal_at` say when (scenario seconds), so an end-to-end test can
time a notification from the fault. `expects` lists every alert the rules must
fire, with the labels that tell it apart (`signal`, `card`, `severity`, ...);
any other firing alert is a failure. `must_not` names the alerts whose
conditions the scenario comes close to (its near misses), for a reader and for
tests that check them one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.sim.rig.simrig import SimRig
from exporter.thresholds import Thresholds

#: The thresholds the scenarios are written against (the rules' defaults).
DEFAULTS = Thresholds()
#: Time after an alert's `for` that a fault keeps going, so that Prometheus sees
#: it fire after its rate windows fill and a scrape or two (scenario seconds).
MARGIN_SECONDS = 120.0
LEAD_IN_SECONDS = 60.0

Action = Callable[[SimRig], Any]


@dataclass(frozen=True)
class Step:
    at: float  # scenario seconds from the start
    phase: str  # "lead-in", "fault" or "heal"
    says: str  # one line for a person watching
    act: Action


@dataclass(frozen=True)
class Expect:
    """An alert that must fire, and labels it must carry."""

    alert: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    doc: str  # the real event it reproduces (the module docstring)
    steps: tuple[Step, ...]
    seconds: float  # total length, scenario seconds
    fault_at: float | None
    heal_at: float | None
    expects: tuple[Expect, ...]
    must_not: frozenset[str]


def lead_in() -> tuple[Step, ...]:
    return (Step(0.0, "lead-in", "healthy rig: two agents taking turns on 64K sessions",
                 SimRig.heal),)


def heal(at: float, says: str = "back to healthy") -> Step:
    return Step(at, "heal", says, SimRig.heal)


def fault_held(name: str, doc: str | None, says: str, act: Action, hold_seconds: float,
               expects: tuple[Expect, ...], must_not: set[str],
               heal_says: str = "back to healthy", heal_act: Action = SimRig.heal) -> Scenario:
    """The common timeline: a healthy lead-in, one fault held for `hold_seconds` (the
    longest `for` it must outlast) and MARGIN_SECONDS more, then a heal and
    MARGIN_SECONDS to watch the alerts resolve."""
    heal_at = LEAD_IN_SECONDS + hold_seconds + MARGIN_SECONDS
    return scenario(name, doc,
                    (*lead_in(), Step(LEAD_IN_SECONDS, "fault", says, act),
                     Step(heal_at, "heal", heal_says, heal_act)),
                    seconds=heal_at + MARGIN_SECONDS, expects=expects, must_not=must_not,
                    heal_at=heal_at)


def every(start: float, end: float, period: float, phase: str, says: str,
          act: Action) -> Iterator[Step]:
    """The same step every `period` seconds from `start` up to (not including) `end`."""
    at = start
    while at < end:
        yield Step(at, phase, says, act)
        at += period


def scenario(name: str, doc: str | None, steps: tuple[Step, ...], seconds: float,
             expects: tuple[Expect, ...], must_not: set[str],
             fault_at: float | None = LEAD_IN_SECONDS, heal_at: float | None = None) -> Scenario:
    """A Scenario whose summary is the first line of the module docstring."""
    text = (doc or "").strip()
    overlap = must_not & {e.alert for e in expects}
    if overlap:
        raise ValueError(f"{name}: {sorted(overlap)} both expected and forbidden")
    return Scenario(name=name, summary=text.splitlines()[0] if text else name, doc=text,
                    steps=tuple(sorted(steps, key=lambda s: s.at)), seconds=seconds,
                    fault_at=fault_at, heal_at=heal_at, expects=expects,
                    must_not=frozenset(must_not))
