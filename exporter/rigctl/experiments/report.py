"""Saved bench results side by side: one row per label, like the owner's table
(docs/facts/rig.md#decode-starvation), or two results compared figure by figure.

A rate is printed with its unit: tokens per second where the stream counted every
frame, frames per second otherwise (docs/rigctl.md#where-the-token-counts-come-from).
Results saved before `tokens_from` existed were all counted frame by frame.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
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


def tokens_from(record: dict[str, Any]) -> str:
    return record.get("tokens_from", "continuous_usage")


def _unit_rate(tokens: float | None, frames: float | None) -> str:
    """The rate in tokens where known, else in frames, with its unit."""
    if tokens is not None:
        return f"{tokens:.1f} tok/s"
    return "-" if frames is None else f"{frames:.1f} fr/s"


def _engine(record: dict[str, Any]) -> str:
    return " ".join(filter(None, (record.get("engine_kind"), record.get("engine_version")))) or "-"


def print_table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]], out: TextIO) -> None:
    rows = list(rows)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    for row in (header, *rows):
        print("  ".join(cell.rjust(width) if i else cell.ljust(width)
                        for i, (cell, width) in enumerate(zip(row, widths, strict=True))),
              file=out)


STARVATION_FIGURES: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("A max gap s", lambda r: _seconds(r["a_max_gap_seconds"])),
    ("A p95 gap s", lambda r: _seconds(r["a_p95_gap_seconds"], 3)),
    ("A rate before B", lambda r: _unit_rate(r["a_tokens_per_second_before_b"],
                                             r.get("a_frames_per_second_before_b"))),
    ("A rate during B", lambda r: _unit_rate(r["a_tokens_per_second_during_b"],
                                             r.get("a_frames_per_second_during_b"))),
    ("B TTFT s", lambda r: _seconds(r["b_ttft_seconds"])),
    ("context", lambda r: str(r["context_tokens"])),
    ("tokens from", tokens_from),
    ("engine", _engine),
)


def _sweep_figures(point: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return (
        ("ITL p50 s", _seconds(point["itl_p50_seconds"], 3)),
        ("ITL p99 s", _seconds(point["itl_p99_seconds"], 3)),
        ("max gap s", _seconds(point["max_gap_seconds"])),
        ("TTFT p50 s", _seconds(point["ttft_p50_seconds"])),
        ("prefill tok/s", _rate(point["prefill_tokens_per_second"])),
        ("decode rate", _unit_rate(point["decode_tokens_per_second"],
                                   point.get("decode_frames_per_second"))),
    )


def print_starvation(records: list[dict[str, Any]], out: TextIO) -> None:
    print_table(
        ("label", *(name for name, _ in STARVATION_FIGURES)),
        ((r.get("label") or "-", *(figure(r) for _, figure in STARVATION_FIGURES))
         for r in records),
        out)


def print_sweep(records: list[dict[str, Any]], out: TextIO) -> None:
    print_table(
        ("label", "concurrency", *(name for name, _ in _sweep_figures(_BLANK_POINT)),
         "tokens from"),
        ((r.get("label") or "-", str(p["concurrency"]),
          *(value for _, value in _sweep_figures(p)), p.get("tokens_from", tokens_from(r)))
         for r in records for p in r["points"]),
        out)


_BLANK_POINT: dict[str, Any] = {key: None for key in (
    "itl_p50_seconds", "itl_p99_seconds", "max_gap_seconds", "ttft_p50_seconds",
    "prefill_tokens_per_second", "decode_tokens_per_second")}


def print_comparison(first: dict[str, Any], second: dict[str, Any], out: TextIO) -> None:
    """Two results of one experiment, figure by figure: two engines (one TP2 engine
    against two single-card ones) or one engine under two flag sets."""
    if first["experiment"] != second["experiment"]:
        raise ReportError(f"cannot compare a {first['experiment']} result with a "
                          f"{second['experiment']} one")
    names = (first.get("label") or first["engine"], second.get("label") or second["engine"])
    if first["experiment"] == "starvation":
        rows = [("B's engine", first.get("b_engine") or "A's", second.get("b_engine") or "A's")]
        rows += [(name, figure(first), figure(second)) for name, figure in STARVATION_FIGURES]
    else:
        rows = []
        by_concurrency = {p["concurrency"]: p for p in second["points"]}
        for point in first["points"]:
            other = by_concurrency.get(point["concurrency"])
            other_figures = dict(_sweep_figures(other)) if other else {}
            rows += [(f"c={point['concurrency']} {name}", value, other_figures.get(name, "-"))
                     for name, value in _sweep_figures(point)]
        rows.append(("tokens from", tokens_from(first), tokens_from(second)))
    print_table(("", *names), rows, out)


def compare_labels(path: Path, labels: tuple[str, str], out: TextIO) -> None:
    """The last saved result of each label, compared."""
    records = list(read_results(path))
    chosen = []
    for label in labels:
        matching = [r for r in records if r.get("label") == label]
        if not matching:
            known = sorted({r.get("label") or "" for r in records} - {""})
            raise ReportError(f"{path}: no result labelled {label!r} "
                              f"(labels: {', '.join(known) or 'none'})")
        chosen.append(matching[-1])
    print_comparison(chosen[0], chosen[1], out)


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
