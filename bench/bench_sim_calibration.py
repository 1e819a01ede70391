"""The scheduler model's calibration: the owner's starvation experiment per policy in
simulated time, against the owner's figures (docs/facts/rig.md#decode-starvation;
the table in docs/simulator.md).

    .venv/bin/python bench/bench_sim_calibration.py
"""

from __future__ import annotations

import sys

from loopback import ROOT

sys.path.insert(0, str(ROOT))  # tests.support, the experiment

from tests.support.sim_starvation import calibration_table  # noqa: E402


def main() -> None:
    """Print the calibration table against docs/facts/rig.md#decode-starvation."""
    print(f"| policy | A's max gap: owner | model | error | B's TTFT: owner | model | error "
          f"| A tok/s while B prefills |\n|{'---|' * 8}")
    for name, gap, sim_gap, ttft, sim_ttft, during in calibration_table():
        print(f"| {name} | {gap:.2f} s | {sim_gap:.2f} s | {sim_gap / gap - 1:+.1%} "
              f"| {ttft:.2f} s | {sim_ttft:.2f} s | {sim_ttft / ttft - 1:+.1%} "
              f"| {during:.1f} |")


if __name__ == "__main__":
    main()

