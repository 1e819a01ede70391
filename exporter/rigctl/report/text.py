"""The text renderer: a terminal's report, incidents first. A quiet night is one
screen: the headline, no incident, the blind spans, then one line per agent, card and
engine."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TextIO

from exporter.rigctl.report.model import VERDICT_OF_SEVERITY, Report

#: How a word is painted for its status (ok, warn, crit, unknown): the command's
#: terminal colours, or plain.
Paint = Callable[[str, str], str]


def plain(text: str, status: str) -> str:
    return text

SUBJECT_LABELS = ("engine", "card", "agent", "source", "sensor", "tier", "signal")


def clock(t: float | None, *, day: bool = False) -> str:
    if t is None:
        return "…"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S" if day else "%H:%M:%S")


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _table(rows: list[tuple[str, ...]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(),
              file=out)


def render(report: Report, out: TextIO, paint: Paint = plain) -> None:
    span = report.end - report.start
    word = paint(report.verdict.upper(), report.verdict)
    print(f"rig report {clock(report.start, day=True)} to {clock(report.end, day=True)} UTC "
          f"({duration(span)}, step {report.step:g} s, {report.queries} queries): {word}, "
          f"{len(report.incidents)} incident(s)", file=out)
    if report.verdict == "unknown" and not report.blind and not report.agents \
            and not report.gpus and not report.engines:
        print("no data from the exporter in this range: nothing can be judged", file=out)
        return
    print("\nincidents", file=out)
    if not report.incidents:
        print("  none", file=out)
    for i in report.incidents:
        status = VERDICT_OF_SEVERITY[i.severity]
        about = " ".join(f"{k}={i.labels[k]}" for k in SUBJECT_LABELS if k in i.labels)
        extra = ""
        if i.stall_seconds is not None:
            extra += f"; longest stall {i.stall_seconds:.1f} s"
        if i.agent is not None:
            extra += f"; agent {i.agent} starved by {i.by}"
        print(f"  {paint(status.upper().ljust(4), status)}  {clock(i.start)}-"
              f"{clock(i.end)}  {duration(i.seconds):>7}  {i.alert}  {about}{extra}", file=out)
    if report.blind:
        print("\nblind (no data from the exporter: not known healthy)", file=out)
        for b in report.blind:
            end = b.end if b.end is not None else report.end
            print(f"  {b.source}  {clock(b.start)}-{clock(b.end)}  {duration(end - b.start)}",
                  file=out)
    if report.agents:
        print("\nagents", file=out)
        rows = [("AGENT", "ON", "REQUESTS", "PROMPT", "CACHED", "OUT", "UNBOUNDED", "MAX GAP",
                 "MAX CONTEXT", "STARVED (BY)")]
        for a in report.agents:
            by = ", ".join(f"{k} {v:.0f} s" for k, v in sorted(a.starved_by.items(),
                                                                key=lambda kv: -kv[1]))
            rows.append((a.agent, a.engine, number(a.requests), number(a.prompt_tokens),
                         number(a.cached_prompt_tokens), number(a.generated_tokens),
                         number(a.unbounded_requests),
                         "-" if a.max_token_gap_seconds is None
                         else f"{a.max_token_gap_seconds:.1f} s",
                         number(a.max_context_tokens),
                         f"{a.starved_seconds:.0f} s" + (f" ({by})" if by else "")))
        _table(rows, out)
    if report.gpus:
        print("\ncards", file=out)
        rows = [("CARD", "PEAK JUNCTION", "DOWNCLOCKED", "POWER-CAPPED")]
        rows += [(g.card, "-" if g.max_junction_celsius is None
                  else f"{g.max_junction_celsius:.0f} °C", duration(g.downclocked_seconds),
                  duration(g.power_capped_seconds)) for g in report.gpus]
        _table(rows, out)
    if report.engines:
        print("\nengines", file=out)
        rows = [("ENGINE", "KIND", "LONGEST STALL", "PROMPT", "OUT", "HITS L1", "L2", "L3")]
        rows += [(e.engine, e.kind, "-" if e.max_decode_stall_seconds is None
                  else f"{e.max_decode_stall_seconds:.1f} s", number(e.prompt_tokens),
                  number(e.generated_tokens),
                  *(number(e.cache_hit_tokens.get(t)) for t in ("L1", "L2", "L3")))
                 for e in report.engines]
        _table(rows, out)
