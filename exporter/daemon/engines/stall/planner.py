"""The stall tracker's plan over an engine's lifetime: chosen from the evidence at
start, chosen again as evidence arrives (a family created at first use, a stream the
HTTP in-flight count does not see), each plan logged once with its evidence."""

from __future__ import annotations

import dataclasses
import logging
from typing import Protocol, TypeVar

from exporter.daemon.engines.stall.evidence import Evidence
from exporter.daemon.engines.stall.plans import Choice, Counters, SignalPlan, choose
from exporter.daemon.engines.stall.progress import Progress, ProgressView

log = logging.getLogger(__name__)


#: What the plan reads progress from: Counters, or llama.cpp's slots.
Shown_contra = TypeVar("Shown_contra", contravariant=True)


class SignalChooser(Protocol[Shown_contra]):
    """What the poller asks of a plan's keeper: SGLang's Planner, vLLM's StepPlanner,
    llama.cpp's SlotsPlanner."""

    engine: str
    choice: Choice

    @property
    def plan(self) -> SignalPlan | None: ...

    def progress(self, counters: Shown_contra, now: float) -> Progress | None: ...


class Planner:
    """Holds the evidence and the plan chosen from it, re-chosen as evidence arrives:
    a family that appears (most are created at first use) or a stream the HTTP
    in-flight count does not see. Each plan is logged once, with its evidence."""

    def __init__(self, engine: str, evidence: Evidence) -> None:
        self.engine = engine
        self.evidence = evidence
        self.choice = choose(evidence)
        self.view = None if self.choice.plan is None else ProgressView(self.choice.plan)
        self._announced: tuple[SignalPlan | None, str] | None = None
        if self.choice.final:
            self._announce()

    @property
    def plan(self) -> SignalPlan | None:
        return self.choice.plan

    def progress(self, counters: Counters, now: float) -> Progress | None:
        """The poll's progress under the plan in force; None while there is none."""
        families = self.evidence.families | counters.families
        # Once found, a shortfall stays: the guard's view has no HTTP check of its own.
        shortfall = self.evidence.http_shortfall or (
            self.view.http_shortfall if self.view is not None else "")
        if families != self.evidence.families or shortfall != self.evidence.http_shortfall:
            self.evidence = dataclasses.replace(self.evidence, families=families,
                                                http_shortfall=shortfall)
            choice = choose(self.evidence)
            if choice.plan is None:
                self.view = None
            elif self.view is None:
                self.view = ProgressView(choice.plan)
            else:  # the same view: the guard's memory carries over
                self.view.plan = choice.plan
            self.choice = choice
        self._announce()
        return None if self.view is None else self.view.progress(counters, now)

    def _announce(self) -> None:
        plan = self.choice.plan
        key = (plan, self.evidence.http_shortfall)
        if key == self._announced or (self._announced is not None and plan is None
                                      and self._announced[0] is None):
            return
        self._announced = key
        if plan is None:
            log.warning("engine %s: no stall tracker plan: %s (%s): rig_engine_decode_stall_* "
                        "stay absent", self.engine, self.choice.note, self.evidence.summary())
            return
        shortfall = self.evidence.http_shortfall
        log.info("engine %s: stall tracker plan %s (progress %s, in flight %s)%s; evidence: "
                 "%s; blind spots: %s", self.engine, plan.name, plan.progress, plan.in_flight,
                 f", since {shortfall}" if shortfall else "", self.evidence.summary(),
                 self.choice.note)
