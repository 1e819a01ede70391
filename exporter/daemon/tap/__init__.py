"""The stream tap (docs/tap.md): an opt-in reverse proxy in front of one engine that
times every frame of every real streamed response. `proxy` moves the bytes, `state`
folds each stream's timing into bounded aggregates, `source` runs it as `tap/<name>`.

`tap_readings(snapshot)` is what other views read (the landing page, /api/health):
per tapped engine, `active` streams in flight and `max_gap_seconds`, the worst gap
between tokens of its window (`window_seconds`), a gap still open included.
"""

from __future__ import annotations

from exporter.daemon.snapshot import Snapshot
from exporter.daemon.tap.state import TapReading

__all__ = ["TapReading", "tap_readings"]


def tap_readings(snapshot: Snapshot) -> list[TapReading]:
    return [r for r in snapshot.readings() if isinstance(r, TapReading)]
