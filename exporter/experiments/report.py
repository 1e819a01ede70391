"""Saved bench results side by side: one row per label, like the owner's table
(docs/facts/rig.md#decode-starvation)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO


class ReportError(Exception):
    pass


def read_results(path: Path) -> Iterator[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ReportError(f"{path}: {exc.strerror or exc}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ReportError(f"{path}:{number}: not JSON ({exc})") from exc
        if not isinstance(record, dict) or "experiment" not in record:
            raise ReportError(f"{path}:{number}: not a rigctl bench result")
        yield record


def _seconds(value: float | None, places: int = 2) -> str:
    return "-" if value is None else f"{value:.{places}f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]], out: TextIO) -> None:
    rows = list(rows)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    for row in (header, *rows):
        print("  ".join(cell.rjust(width) if i else cell.ljust(width)
                        for i, (cell, width) in enumerate(zip(row, widths, strict=True))),
              file=out)


def print_starvation(records: list[dict[str, Any]], out: TextIO) -> None:
    print_table(
        ("label", "A max gap s", "A p95 gap s", "A tok/s before B", "A tok/s during B",
         "B TTFT s", "context"),
        ((r.get("label") or "-", _seconds(r["a_max_gap_seconds"]),
          _seconds(r["a_p95_gap_seconds"], 3), _rate(r["a_tokens_per_second_before_b"]),
          _rate(r["a_tokens_per_second_during_b"]), _seconds(r["b_ttft_seconds"]),
          str(r["context_tokens"])) for r in records),
        out)


def print_sweep(records: list[dict[str, Any]], out: TextIO) -> None:
    print_table(
        ("label", "concurrency", "ITL p50 s", "ITL p99 s", "max gap s", "TTFT p50 s",
         "prefill tok/s", "decode tok/s"),
        ((r.get("label") or "-", str(p["concurrency"]), _seconds(p["itl_p50_seconds"], 3),
          _seconds(p["itl_p99_seconds"], 3), _seconds(p["max_gap_seconds"]),
          _seconds(p["ttft_p50_seconds"]), _rate(p["prefill_tokens_per_second"]),
          _rate(p["decode_tokens_per_second"]))
         for r in records for p in r["points"]),
        out)


def print_report(path: Path, out: TextIO) -> None:
    records = list(read_results(path))
    if not records:
        raise ReportError(f"{path}: no results")
    starvation = [r for r in records if r["experiment"] == "starvation"]
    sweeps = [r for r in records if r["experiment"] == "sweep"]
    if starvation:
        print_starvation(starvation, out)
    if starvation and sweeps:
        print(file=out)
    if sweeps:
        print_sweep(sweeps, out)
