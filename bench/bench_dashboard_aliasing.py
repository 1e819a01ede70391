"""How often a 47 s stall shows as starvation on the stall panels, per range: the
committed dashboards against those of a git ref (main by default), over a day of the
tracker's gauges in a real Prometheus (tests/dashboards/stall_day.py).

    python3 bench/bench_dashboard_aliasing.py [--ref main]

Prints, per panel and range, the share of renders (the stall at 8 phases of the step
grid) whose highest value reaches the 10 s starvation line, and Grafana's step.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dashboards.generate import json_path, sources  # noqa: E402
from rigdev.grafana_query import interval  # noqa: E402
from tests.dashboards.stall_day import (  # noqa: E402
    CRITICAL,
    RANGES,
    SCRAPE_SECONDS,
    renders,
    stall_day,
    stall_panels,
)

ROOT = Path(__file__).resolve().parents[1]


def at_ref(ref: str) -> list[dict]:
    out = []
    for source in sources():
        path = json_path(source).relative_to(ROOT)
        text = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
        out.append(json.loads(text))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="main")
    args = parser.parse_args()
    committed = [json.loads(json_path(s).read_text()) for s in sources()]
    with tempfile.TemporaryDirectory() as tmp, stall_day(Path(tmp)) as prometheus:
        for name, dashboards in ((args.ref, at_ref(args.ref)), ("this tree", committed)):
            print(f"## {name}")
            for title, panel in sorted(stall_panels(dashboards).items()):
                cells = []
                for span, seconds in sorted(RANGES.items(), key=lambda kv: kv[1]):
                    highest = renders(prometheus, panel, seconds)
                    shown = sum(v >= CRITICAL for v in highest) / len(highest)
                    step = interval(seconds, panel.get("maxDataPoints", 100), SCRAPE_SECONDS)
                    cells.append(f"{span} {shown:4.0%} (step {step:g} s)")
                print(f"{title}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
