"""How long `rigctl report` takes over 8 hours and over 7 days of history, against a
real Prometheus serving it from disk (tests/rigctl/report/night.py: one rig, its two
cards, one engine and two agents, the night's incidents in its first two hours).

    python3 bench/bench_report.py [--scrape 15] [--repeat 3]

Prints, per range, the step the report chose, its query count, and its wall time
(the best and the worst of --repeat runs). The history is written at --scrape seconds
(default 15: a week at 5 s is 120,960 scrapes of ~45 series, which promtool takes a
long while to load); the rules are replayed at the deploy's 5 s either way, so the
replay's cost, which is in evaluation points, is the same.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from exporter.rigctl import main  # noqa: E402
from tests.rigctl.report.night import night  # noqa: E402

RANGES = {"8h": 8 * 3600, "7d": 7 * 86400}


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scrape", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        made = time.monotonic()
        with night(Path(tmp), hours=max(RANGES.values()) / 3600, scrape=args.scrape,
                   rigs=("night",)) as history:
            print(f"history: {max(RANGES.values()) / 86400:g} days at {args.scrape} s, "
                  f"loaded in {time.monotonic() - made:.0f} s")
            for name, seconds in RANGES.items():
                times, head = [], ""
                for _ in range(args.repeat):
                    out = io.StringIO()
                    began = time.monotonic()
                    code = main(["report", "--prometheus", history.url, "--rig", "night",
                                 "--start", str(history.end - seconds),
                                 "--end", str(history.end), "--timeout", "600"], out)
                    times.append(time.monotonic() - began)
                    head = out.getvalue().splitlines()[0]
                    assert code == 0, out.getvalue()
                print(f"{name}: {min(times):.1f} s best, {max(times):.1f} s worst; {head}")
    return 0


if __name__ == "__main__":
    sys.exit(run())
