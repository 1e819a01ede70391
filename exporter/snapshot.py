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


async def read_source(source: Source, deadline_seconds: float) -> SourceResult:
    started = time.monotonic()
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
        log.exception("source %s failed", source.name)
        error = f"{type(exc).__name__}: {exc}"
    else:
        return SourceResult(source.name, reading, time.monotonic() - started)
    return SourceResult(source.name, None, time.monotonic() - started, error)


class SourceRunner:
    """Reads all sources concurrently, and logs each source going down or coming back.

    Logging changes rather than every failure keeps a down engine from writing a line
    per scrape (Prometheus scrapes every 15 s).
    """

    def __init__(self, sources: Iterable[Source], deadline_seconds: float) -> None:
        self.sources = tuple(sources)
        self.deadline_seconds = deadline_seconds
        self._last_error: dict[str, str | None] = {}

    async def snapshot(self) -> Snapshot:
        results = await asyncio.gather(
            *(read_source(s, self.deadline_seconds) for s in self.sources)
        )
        for result in results:
            self._log_change(result.name, result.error)
        return Snapshot(tuple(results))

    def _log_change(self, name: str, error: str | None) -> None:
        previous = self._last_error.get(name)
        if error == previous:
            return
        self._last_error[name] = error
        if error is None:
            log.info("source %s recovered", name)
        else:
            log.warning("source %s down: %s", name, error)
