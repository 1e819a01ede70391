"""The HTML renderer: one self-contained page, readable offline (the timeline is inline
SVG drawn by matplotlib, the styles inline, no URL to fetch), with the report's tables.

The timeline, one time axis for all: the incidents as bars, one row per alert and
subject, red critical and orange warning; the longest stall per engine against the 10 s
line; each card's junction and sclk; the KV pool's and L2's occupancy. Blind spans are
grey across every panel.

matplotlib is the `html` extra (pyproject.toml): importing this module without it
raises ImportError, which the command turns into one line.
"""

from __future__ import annotations

import html
import io
from datetime import UTC, datetime

import matplotlib
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, date2num
from matplotlib.figure import Figure

from exporter.rigctl.report.model import Report
from exporter.rigctl.report.text import SUBJECT_LABELS, clock, duration, number

CRITICAL, WARNING, BLIND = "#d62728", "#ff7f0e", "#bbbbbb"
CURVES = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b")
VERDICT_COLOURS = {"ok": "#2ca02c", "warn": WARNING, "crit": CRITICAL, "unknown": "#777777"}
#: RigDecodeStarvation's line, drawn on the stall panel (exporter/thresholds.py).
STALL_LINE_LABEL = "starvation threshold"


def _when(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def timeline_svg(report: Report, stall_threshold: float) -> str:
    matplotlib.rcParams["svg.fonttype"] = "path"  # text as shapes: no font to fetch
    figure = Figure(figsize=(11, 9), layout="constrained")
    axes = figure.subplots(4, 1, sharex=True,
                           gridspec_kw={"height_ratios": [max(2, len(_rows(report))), 2, 2, 2]})
    incidents, stall, cards, cache = axes
    rows = _rows(report)
    for y, (row, severity) in enumerate(rows):
        for i in report.incidents:
            if _row(i) == row:
                end = i.end if i.end is not None else report.end
                # Bar widths in days: matplotlib's date unit.
                incidents.barh(y, (end - i.start) / 86400, left=date2num(_when(i.start)),
                               height=0.6, color=CRITICAL if severity == "critical" else WARNING)
    incidents.set_yticks(range(len(rows)), [r for r, _ in rows] or [])
    incidents.set_ylim(-0.5, max(len(rows), 1) - 0.5)
    incidents.invert_yaxis()
    incidents.set_title("incidents" if rows else "incidents: none", loc="left")

    timeline = report.timeline
    if timeline is not None:
        for n, (engine, points) in enumerate(timeline.stall.items()):
            stall.plot([_when(t) for t, _ in points], [v for _, v in points],
                       color=CURVES[n % len(CURVES)], label=f"{engine} longest stall")
        stall.axhline(stall_threshold, color=CRITICAL, linestyle="--", linewidth=1,
                      label=STALL_LINE_LABEL)
        longest = max(((v, t) for pts in timeline.stall.values() for t, v in pts), default=None)
        if longest is not None and longest[0] > 0:
            stall.annotate(f"{longest[0]:.1f} s", (_when(longest[1]), longest[0]),
                           textcoords="offset points", xytext=(4, -10))
        stall.set_ylabel("s")
        stall.set_title("longest decode stall", loc="left")
        twin = cards.twinx()
        for n, (card, points) in enumerate(timeline.junction.items()):
            cards.plot([_when(t) for t, _ in points], [v for _, v in points],
                       color=CURVES[n % len(CURVES)], label=f"{card} junction")
        for n, (card, points) in enumerate(timeline.sclk.items()):
            twin.plot([_when(t) for t, _ in points], [v / 1e9 for _, v in points],
                      color=CURVES[n % len(CURVES)], linestyle=":", label=f"{card} sclk")
        cards.set_ylabel("°C")
        twin.set_ylabel("sclk GHz")
        cards.set_title("cards: junction (solid), sclk (dotted)", loc="left")
        for n, (engine, points) in enumerate(timeline.kv.items()):
            cache.plot([_when(t) for t, _ in points], [v for _, v in points],
                       color=CURVES[n % len(CURVES)], label=f"{engine} KV pool")
        for n, (engine, points) in enumerate(timeline.l2.items()):
            cache.plot([_when(t) for t, _ in points], [v for _, v in points],
                       color=CURVES[(n + 2) % len(CURVES)], linestyle="--",
                       label=f"{engine} L2 (host)")
        cache.set_ylim(0, 1.05)
        cache.set_title("cache occupancy", loc="left")
        for ax in (stall, cards, cache):
            if ax.get_legend_handles_labels()[0]:
                ax.legend(loc="upper right", fontsize="small")
    for ax in axes:
        for b in report.blind:
            end = b.end if b.end is not None else report.end
            ax.axvspan(_when(b.start), _when(end), color=BLIND, alpha=0.5, linewidth=0)
        ax.grid(True, axis="x", alpha=0.3)
    locator = AutoDateLocator()
    cache.xaxis.set_major_locator(locator)
    cache.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    cache.set_xlim(_when(report.start), _when(report.end))
    cache.set_xlabel("UTC")
    out = io.StringIO()
    # No metadata block: its RDF names URLs, and the page names none.
    figure.savefig(out, format="svg", metadata={"Creator": None, "Date": None,
                                                "Format": None, "Type": None})
    svg = out.getvalue()
    return svg[svg.index("<svg"):]  # without the XML prolog and doctype, for inline use


def _row(incident) -> str:
    about = " ".join(incident.labels[k] for k in SUBJECT_LABELS if k in incident.labels)
    return f"{incident.alert} {about}".strip()


def _rows(report: Report) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for i in report.incidents:
        seen.setdefault(_row(i), i.severity)
    return list(seen.items())


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


STYLE = """body{font-family:sans-serif;margin:1.5em;color:#222;background:#fff}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.4em}
table{border-collapse:collapse}td,th{padding:2px 10px;border-bottom:1px solid #ddd;
text-align:left}.verdict{color:#fff;padding:2px 8px;border-radius:3px}"""


def render(report: Report, stall_threshold: float) -> str:
    verdict = report.verdict
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        f"<title>rig report {clock(report.start, day=True)} UTC</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>rig report {clock(report.start, day=True)} to {clock(report.end, day=True)} UTC "
        f"<span class=verdict style='background:{VERDICT_COLOURS[verdict]}'>"
        f"{verdict.upper()}</span></h1>",
        f"<p>{duration(report.end - report.start)}, rules replayed every "
        f"{report.eval_seconds:g} s in buckets of {report.step:g} s.</p>",
        "<h2>incidents</h2>",
        _table(("severity", "alert", "subject", "start", "end", "firing", "detail"), [
            (i.severity, i.alert, " ".join(f"{k}={i.labels[k]}" for k in SUBJECT_LABELS
                                             if k in i.labels),
             clock(i.start, day=True), clock(i.end), duration(i.seconds),
             "; ".join(x for x in (
                 f"longest stall {i.stall_seconds:.1f} s" if i.stall_seconds else "",
                 f"{i.agent} starved by {i.by}" if i.agent else "") if x))
            for i in report.incidents]) if report.incidents else "<p>none</p>",
        timeline_svg(report, stall_threshold),
    ]
    if report.blind:
        parts += ["<h2>blind spans (not known healthy)</h2>", _table(
            ("source", "start", "end"),
            [(b.source, clock(b.start, day=True), clock(b.end)) for b in report.blind])]
    parts += ["<h2>agents</h2>", _table(
        ("agent", "engine", "requests", "prompt", "cached", "out", "unbounded", "max gap",
         "max context", "starved", "by"),
        [(a.agent, a.engine, number(a.requests), number(a.prompt_tokens),
          number(a.cached_prompt_tokens), number(a.generated_tokens),
          number(a.unbounded_requests),
          "-" if a.max_token_gap_seconds is None else f"{a.max_token_gap_seconds:.1f} s",
          number(a.max_context_tokens), f"{a.starved_seconds:.0f} s",
          ", ".join(f"{k} {v:.0f} s" for k, v in a.starved_by.items())) for a in report.agents])]
    parts += ["<h2>cards</h2>", _table(
        ("card", "peak junction", "downclocked", "power-capped"),
        [(g.card, "-" if g.max_junction_celsius is None else f"{g.max_junction_celsius:.0f} °C",
          duration(g.downclocked_seconds), duration(g.power_capped_seconds))
         for g in report.gpus])]
    parts += ["<h2>engines</h2>", _table(
        ("engine", "kind", "longest stall", "prompt", "out", "L1 hits", "L2 hits", "L3 hits"),
        [(e.engine, e.kind, "-" if e.max_decode_stall_seconds is None
          else f"{e.max_decode_stall_seconds:.1f} s", number(e.prompt_tokens),
          number(e.generated_tokens), *(number(e.cache_hit_tokens.get(t))
                                         for t in ("L1", "L2", "L3")))
         for e in report.engines])]
    parts.append("</body></html>\n")
    return "\n".join(parts)
