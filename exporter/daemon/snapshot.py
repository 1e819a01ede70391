"""The contract every source keeps, and the one place that runs them.

A source reads one thing (a card tree, /proc, an engine) and returns a plain
dataclass. It never imports prometheus_client. `read_all` runs every source
concurrently under one deadline, so a slow or broken source costs the scrape
its own readings and nothing else.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from exporter.process.log_limits import Conditions

log = logging.getLogger(__name__)

class SourceError(Exception):
    """A source could not produce a reading; the message says why, for the log."""


class Source(Protocol):
    """Something that produces one reading per scrape."""

    #: The `source` label of rig_source_up: `gpu`, `host`, `engine/<name>`, `probe/<name>`.
    name: str

    async def read(self) -> object:
        """Return a plain-data reading, or raise (SourceError for expected failures)."""
        ...


@dataclass(frozen=True)
class SourceResult:
    """What one source gave for one scrape."""

    name: str
    reading: object | None
    duration_seconds: float
    error: str | None = None

    @property
    def up(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Snapshot:
    """Everything a scrape read, in source order."""

    results: tuple[SourceResult, ...]

    def readings(self) -> Iterable[object]:
        return (r.reading for r in self.results if r.reading is not None)


async def read_source(source: Source, deadline_seconds: float,
                      conditions: Conditions | None = None) -> SourceResult:
    """One source's reading or error; `conditions` tells its changes of state."""
    started = time.monotonic()
    unexpected: Exception | None = None
    try:
        # asyncio.timeout rather than wait_for: on Python 3.11 wait_for can swallow a
        # cancellation that lands as the read completes, and the exporter then never
        # stops (CPython gh-86296; docs/stall-tracker.md#stopping).
        async with asyncio.timeout(deadline_seconds):
            reading = await source.read()
    except TimeoutError:
        error = f"no answer within {deadline_seconds:g} s"
    except SourceError as exc:
        error = str(exc)
    except Exception as exc:  # a bug or an unforeseen input must not blank the other sources
        unexpected = exc
        error = f"{type(exc).__name__}: {exc}"
    else:
        if conditions is not None:
            conditions.ok(source.name)
        return SourceResult(source.name, reading, time.monotonic() - started)
    if conditions is not None:
        # A bug's kind is its exception's class, whatever its message says this time.
        kind = type(unexpected).__name__ if unexpected is not None else None
        conditions.failed(source.name, error, kind=kind, exc=unexpected)
    return SourceResult(source.name, None, time.monotonic() - started, error)


class SourceRunner:
    """Reads all sources concurrently, and logs each source going down or coming back.

    Changes are logged, not every failure, so a down engine does not write a line per
    scrape; a failure that goes on is told again once an interval with its count
    (exporter/process/log_limits.py). `conditions` carries that state over a reload.
    """

    def __init__(self, sources: Iterable[Source], deadline_seconds: float,
                 conditions: Conditions | None = None) -> None:
        self.sources = tuple(sources)
        self.deadline_seconds = deadline_seconds
        self.conditions = conditions or Conditions(
            log, down="source {subject} down: {message}", up="source {subject} recovered")

    async def snapshot(self) -> Snapshot:
        results = await asyncio.gather(
            *(read_source(s, self.deadline_seconds, self.conditions) for s in self.sources)
        )
        return Snapshot(tuple(results))
