"""Fast parse path against prometheus_client's parser on the largest engine fixture.

    python bench/bench_parse.py

Prints the median time of each over many runs and the speedup (target: >= 20x).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter.daemon.engines.exposition import parse  # noqa: E402
from exporter.daemon.engines.mapping import SGLANG  # noqa: E402
from exporter.daemon.engines.normalise import wanted_names  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "engine"


def median_seconds(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    path = max(FIXTURES.glob("*.txt"), key=lambda p: p.stat().st_size)
    text = path.read_text()
    print(f"{path.name}: {len(text.splitlines())} lines, {len(text)} bytes")
    reference = median_seconds(lambda: list(text_string_to_metric_families(text)), 30)
    print(f"prometheus_client parser:               {reference * 1e3:8.2f} ms")
    for label, wanted in (
        ("fast path, scrape families", wanted_names(SGLANG, SGLANG.rules)),
        ("fast path, stall tracker's two", wanted_names(
            SGLANG, (SGLANG.decode_progress, SGLANG.running))),
    ):
        fast = median_seconds(lambda w=wanted: parse(text, w), 300)
        print(f"{label + ':':40s}{fast * 1e3:8.3f} ms  ({reference / fast:5.0f}x faster)")


if __name__ == "__main__":
    main()
