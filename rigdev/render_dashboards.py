"""Draw the dashboards from a live run of the simulated rig, as Grafana would (roughly).

    python -m rigdev.render_dashboards --scenario thermal-downclock --at 150 --out /tmp/render
    python -m rigdev.render_dashboards --scenario hicache-thrash --at 300 --dashboard overview \\
        --out docs/img --name overview-hicache-thrash

Grafana cannot run here, so this plays a scenario (exporter/sim/scenarios) on the
simulated rig with the real exporter, Prometheus and the committed rules, then sends
every panel's queries as Grafana sends them (rigdev/grafana_query.py: the step
from the range and the panel's maxDataPoints, `$__interval`, `$__rate_interval`,
`$__range`) over the whole run, and draws each panel where its gridPos puts it: graphs
with their units and dashed threshold lines (on the series they judge), tiles coloured
by their thresholds, state timelines by their value mappings, heatmaps by bucket. One
PNG per dashboard, `<out>/<name>.png` (default name: `<dashboard>-<scenario>`).

At `--time-scale` 1 (the default) every value and threshold is the rig's own; faster,
the dashboard is generated from the scaled thresholds and its rule windows scaled as
the run's rules are (alerts/timescale.py), so colours stay right while rates read
faster and stalls shorter. Needs the `render` extra (matplotlib).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import re
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from alerts.timescale import scaled_expr, scaled_thresholds
from dashboards.generate import build, sources
from exporter.process.launch import start_exporter
from exporter.rigctl.stack import Monitoring, WebhookReceiver
from exporter.sim.rig.simrig import SimRig
from exporter.sim.scenarios import SCENARIOS
from exporter.sim.scenarios.player import play
from exporter.thresholds import Thresholds
from rigdev.grafana_query import color_of, request, steps_of

SCRAPE_SECONDS = 1.0  # Monitoring's Prometheus
WARMUP_SECONDS = 8.0
# Grafana's named colours (its dark theme's).
COLORS = {"green": "#73BF69", "orange": "#FF9830", "red": "#F2495C", "blue": "#5794F2",
          "transparent": "#00000000", "dark-orange": "#FA6400"}
PALETTE = ["#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9",
           "#705DA0", "#37872D", "#FADE2A"]
BACKGROUND, PANEL, TEXT = "#111217", "#181b1f", "#ccccdc"
COLUMN_INCHES, ROW_INCHES = 0.62, 0.36


# ------------------------------------------------------------------- units
_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BYTES = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def _si(value: float, unit: str) -> str:
    for size, prefix in _SI:
        if abs(value) >= size:
            return f"{value / size:.3g} {prefix}{unit}".rstrip()
    return f"{value:.3g} {unit}".rstrip()


def fmt(value: float, unit: str) -> str:
    """`value` as Grafana shows it in `unit` (the units these dashboards use)."""
    if math.isnan(value):
        return "NaN"
    if unit.startswith("suffix:"):
        return f"{value:.4g}{unit[len('suffix:'):]}"
    if unit == "percentunit":
        return f"{value * 100:.3g}%"
    if unit in ("bytes", "Bps"):
        suffix = "/s" if unit == "Bps" else ""
        for size, name in _BYTES:
            if abs(value) >= size:
                return f"{value / size:.3g} {name}{suffix}"
        return f"{value:.3g} B{suffix}"
    if unit == "s":
        return f"{value * 1000:.3g} ms" if 0 < abs(value) < 1 else f"{value:.3g} s"
    simple = {"celsius": "°C", "watt": "W", "hertz": "Hz", "ops": "ops/s", "reqps": "req/s",
              "rotrpm": "rpm", "short": "", "none": ""}
    return _si(value, simple.get(unit, ""))


# ------------------------------------------------------------------- queries
class Source:
    """The run's Prometheus, queried as Grafana would for one rig."""

    def __init__(self, url: str, rig: str, start: float, end: float, time_scale: float) -> None:
        self.url, self.rig, self.start, self.end = url, rig, start, end
        self.time_scale = time_scale

    def frames(self, panel: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(target, series) for each series of each query; a series has `metric` and
        `values` ([t, v] pairs; one pair for an instant query)."""
        out = []
        for target in panel.get("targets", []):
            scaled = dict(target, expr=scaled_expr(target["expr"], self.time_scale))
            req = request(scaled, panel.get("maxDataPoints", 100), self.start, self.end,
                          SCRAPE_SECONDS, {"rig": self.rig})
            if req.step is None:
                params = {"query": req.expr, "time": f"{req.end:.3f}"}
                path = "query"
            else:
                params = {"query": req.expr, "start": f"{req.start:.3f}",
                          "end": f"{req.end:.3f}", "step": f"{req.step:g}"}
                path = "query_range"
            url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
            with urllib.request.urlopen(url, timeout=60) as reply:
                body = json.load(reply)
            if body["status"] != "success":
                raise RuntimeError(f"{panel['title']}: {body.get('error')}")
            for series in body["data"]["result"]:
                values = [series["value"]] if "value" in series else series["values"]
                out.append((target, {"metric": series["metric"],
                                     "values": [(float(t), float(v)) for t, v in values]}))
        return out


def legend(target: dict[str, Any], metric: dict[str, str]) -> str:
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""),
                  target.get("legendFormat") or "")
    return " ".join(text.split()) or target["refId"]


# ------------------------------------------------------------------- drawing
def _unit_of(panel: dict[str, Any], ref: str) -> str:
    config = panel.get("fieldConfig", {})
    for override in config.get("overrides", []):
        if override["matcher"] == {"id": "byFrameRefID", "options": ref}:
            for prop in override["properties"]:
                if prop["id"] == "unit":
                    return prop["value"]
    return config.get("defaults", {}).get("unit", "short")


def _lines_of(panel: dict[str, Any], ref: str) -> list[dict[str, Any]]:
    """The threshold steps drawn as dashed lines on query `ref`."""
    for override in panel["fieldConfig"].get("overrides", []):
        if override["matcher"] == {"id": "byFrameRefID", "options": ref}:
            props = {p["id"]: p["value"] for p in override["properties"]}
            if props.get("custom.thresholdsStyle", {}).get("mode") == "dashed":
                return props["thresholds"]["steps"][1:]
    return []


def _limit_line(panel: dict[str, Any], name: str) -> bool:
    return any(o["matcher"]["id"] == "byRegexp" and re.fullmatch(o["matcher"]["options"], name)
               for o in panel["fieldConfig"].get("overrides", []))


def _title(ax: Any, panel: dict[str, Any]) -> None:
    ax.set_title(panel["title"], color=TEXT, fontsize=7, loc="left", pad=3)


def _right_axis(panel: dict[str, Any], ref: str) -> bool:
    return any(o["matcher"] == {"id": "byFrameRefID", "options": ref}
               and {"id": "custom.axisPlacement", "value": "right"} in o["properties"]
               for o in panel["fieldConfig"].get("overrides", []))


def _minutes(value: float, _: Any = None) -> str:
    return f"{int(value)}:{round(value * 60) % 60:02d}"


def _timeseries(ax: Any, panel: dict[str, Any], frames: list, start: float) -> None:
    unit = panel["fieldConfig"]["defaults"].get("unit", "short")
    drawn = set()
    right = None
    for i, (target, series) in enumerate(frames):
        name = legend(target, series["metric"])
        xs = [(t - start) / 60 for t, _ in series["values"]]
        ys = [v for _, v in series["values"]]
        style = {"color": COLORS["red"], "linestyle": "--"} if _limit_line(panel, name) else {
            "color": PALETTE[i % len(PALETTE)]}
        on = ax
        if _right_axis(panel, target["refId"]):
            if right is None:
                right = ax.twinx()
                right.tick_params(colors=TEXT, labelsize=5)
                right.yaxis.set_major_formatter(lambda v, _: fmt(v, unit))
                right.set_ylim(bottom=0)
            on = right
        on.plot(xs, ys, linewidth=1, label=name[:40], **style)
        for step in _lines_of(panel, target["refId"]):
            if (target["refId"], step["value"]) not in drawn:
                ax.axhline(step["value"], color=COLORS.get(step["color"], step["color"]),
                           linestyle="--", linewidth=0.8)
                drawn.add((target["refId"], step["value"]))
    defaults = panel["fieldConfig"]["defaults"]
    if "min" in defaults:
        ax.set_ylim(bottom=defaults["min"])
    if "max" in defaults:
        ax.set_ylim(top=defaults["max"])
    ax.yaxis.set_major_formatter(lambda v, _: fmt(v, unit))
    ax.xaxis.set_major_formatter(_minutes)
    if frames:
        handles = [h for a in (ax, right) if a is not None for h in a.get_lines()
                   if not h.get_label().startswith("_")]
        ax.legend(handles=handles, fontsize=4.5, loc="upper left", frameon=False,
                  labelcolor=TEXT, ncol=2)
    else:
        ax.text(0.5, 0.5, "No data", color=TEXT, ha="center", va="center",
                transform=ax.transAxes, fontsize=7)


def _stat(ax: Any, panel: dict[str, Any], frames: list) -> None:
    from matplotlib.patches import Rectangle

    ax.set_axis_off()
    boxes = []
    for target, series in frames:
        value = series["values"][-1][1]
        steps = steps_of(panel, target["refId"])
        text = fmt(value, _unit_of(panel, target["refId"]))
        for mapping in panel["fieldConfig"]["defaults"].get("mappings", []):
            found = mapping.get("options", {}).get(f"{value:g}")
            if found:
                text = found["text"]
        boxes.append((legend(target, series["metric"]), text, color_of(value, steps)))
    if not boxes:
        boxes = [("", panel["fieldConfig"]["defaults"].get("noValue", "No data"), "transparent")]
    width = 1 / len(boxes)
    for i, (name, text, color) in enumerate(boxes):
        ax.add_patch(Rectangle((i * width + 0.01, 0.02), width - 0.02, 0.8,
                               color=COLORS.get(color, color), transform=ax.transAxes))
        size = 8 if len(boxes) <= 2 else 6
        ax.text(i * width + width / 2, 0.55, text, ha="center", va="center", fontsize=size,
                color="white", weight="bold", transform=ax.transAxes)
        ax.text(i * width + width / 2, 0.2, name[:28], ha="center", va="center",
                fontsize=4.5, color="white", transform=ax.transAxes)


def _state_timeline(ax: Any, panel: dict[str, Any], frames: list, start: float,
                    end: float) -> None:
    mappings = {}
    for mapping in panel["fieldConfig"]["defaults"].get("mappings", []):
        for value, shown in mapping.get("options", {}).items():
            mappings[float(value)] = shown
    names = []
    for row, (target, series) in enumerate(frames):
        names.append(legend(target, series["metric"])[:40])
        values = series["values"]
        for (t0, v), (t1, _) in zip(values, [*values[1:], (end, 0.0)], strict=True):
            shown = mappings.get(v, {})
            color = COLORS.get(shown.get("color", "blue"), shown.get("color", "blue"))
            ax.barh(row, (t1 - t0) / 60, left=(t0 - start) / 60, color=color, height=0.8)
    ax.set_yticks(range(len(names)), names, fontsize=4.5, color=TEXT)
    ax.set_xlim(0, (end - start) / 60)
    ax.xaxis.set_major_formatter(_minutes)
    if not frames:
        ax.text(0.5, 0.5, panel["fieldConfig"]["defaults"].get("noValue", "No data"),
                color=TEXT, ha="center", va="center", transform=ax.transAxes, fontsize=7)


def _heatmap(ax: Any, panel: dict[str, Any], frames: list, start: float) -> None:
    rows = sorted(((float(s["metric"].get("le", "inf")), s) for _, s in frames),
                  key=lambda r: r[0])
    if not rows:
        ax.text(0.5, 0.5, "No data", color=TEXT, ha="center", va="center",
                transform=ax.transAxes, fontsize=7)
        return
    times = sorted({t for _, s in rows for t, _ in s["values"]})
    grid = [[dict(s["values"]).get(t, 0.0) for t in times] for _, s in rows]
    ax.pcolormesh([(t - start) / 60 for t in times], range(len(rows)), grid, cmap="Oranges",
                  shading="nearest")
    ax.set_yticks(range(len(rows)), [fmt(le, "s") for le, _ in rows], fontsize=4)
    ax.xaxis.set_major_formatter(_minutes)


def draw(dashboard: dict[str, Any], source: Source, path: Path, caption: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    fig = plt.figure(figsize=(24 * COLUMN_INCHES, rows * ROW_INCHES + 0.5),
                     facecolor=BACKGROUND)
    height = rows * ROW_INCHES + 0.5
    fig.text(0.01, 1 - 0.15 / height, f"{dashboard['title']} — {caption}", color=TEXT,
             fontsize=9, va="top")
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        left, width = g["x"] / 24 + 0.004, g["w"] / 24 - 0.008
        top = (0.45 + g["y"] * ROW_INCHES) / height
        panel_h = g["h"] * ROW_INCHES / height
        if panel["type"] == "row":
            fig.text(left, 1 - top - panel_h / 2, panel["title"], color=TEXT, fontsize=8,
                     weight="bold", va="center")
            continue
        pad = 0.32 / height  # room for the title
        # Room for the y-axis labels: tick values, or a timeline's row names.
        margin = {"stat": 0.0, "state-timeline": 0.1}.get(panel["type"], 0.035)
        right = 0.035 if any(_right_axis(panel, t["refId"]) for t in panel["targets"]) else 0
        ax = fig.add_axes((left + margin, 1 - top - panel_h + 0.22 / height,
                           width - margin - right - (0.005 if margin else 0),
                           panel_h - pad - 0.22 / height), facecolor=PANEL)
        ax.tick_params(colors=TEXT, labelsize=5)
        for spine in ax.spines.values():
            spine.set_color("#2c3235")
        _title(ax, panel)
        frames = source.frames(panel)
        kind = panel["type"]
        if kind == "timeseries":
            _timeseries(ax, panel, frames, source.start)
        elif kind == "stat":
            _stat(ax, panel, frames)
        elif kind == "state-timeline":
            _state_timeline(ax, panel, frames, source.start, source.end)
        elif kind == "heatmap":
            _heatmap(ax, panel, frames, source.start)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=72, facecolor=BACKGROUND)
    plt.close(fig)


# ------------------------------------------------------------------- the run
async def run(scenario_name: str, at: float, time_scale: float, workdir: Path,
              dashboards: list[str], out: Path, name: str | None) -> list[Path]:
    scenario = SCENARIOS[scenario_name]
    receiver = WebhookReceiver()
    await receiver.start()
    rig = SimRig(time_scale, directory=workdir / "rig", tick_seconds=0.25)
    await rig.start()
    monitoring = Monitoring(workdir / "monitoring", time_scale, receiver.url)
    written = []
    with contextlib.ExitStack() as stack:
        exporter = stack.enter_context(start_exporter(
            rig.exporter_args(compress_stall_window=time_scale != 1.0), workdir,
            wait=False))
        exporter.wait_ready()
        stack.callback(monitoring.stop)
        monitoring.start()
        monitoring.write_targets([(scenario.name, exporter.address)])
        started = time.time()
        await asyncio.sleep(WARMUP_SECONDS)
        await play(rig, scenario, stop_at=at)
        await asyncio.sleep(2 * SCRAPE_SECONDS)  # the last scrape and rule evaluation
        ended = time.time()
        t = Thresholds() if time_scale == 1.0 else scaled_thresholds(Thresholds(), time_scale)
        source = Source(monitoring.prometheus_url, scenario.name, started, ended, time_scale)
        caption = (f"scenario {scenario.name}, {at:g} s in (time scale {time_scale:g}),"
                   " simulated rig")
        for dashboard_source in sources():
            short = dashboard_source.name.removesuffix(".dashboard.py")
            if dashboards and short not in dashboards:
                continue
            path = out / f"{name or f'{short}-{scenario.name}'}.png"
            draw(build(dashboard_source, t), source, path, caption)
            written.append(path)
    await rig.stop()
    await receiver.stop()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    parser.add_argument("--at", type=float, help="scenario seconds to play (default: all)")
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--dashboard", action="append", default=[],
                        help="overview, decode, hicache, gpus or host (default: all)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--name", help="the PNG's name (one dashboard only)")
    args = parser.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("rigdev.render_dashboards: needs matplotlib: pip install '.[html]'",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rig-render-") as tmp:
        written = asyncio.run(run(args.scenario, args.at or SCENARIOS[args.scenario].seconds,
                                  args.time_scale, Path(tmp), args.dashboard, args.out,
                                  args.name))
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
