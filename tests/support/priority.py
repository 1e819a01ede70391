"""The priority of the suite's CPU-bound tools that no test times.

The suite runs more workers than the machine has cores (docs/testing.md). promtool's unit tests
and the wheel's build are CPU-bound and nothing times them, while the workers beside
them time compressed scenarios: run niced, they leave the CPU to those first."""

NICED = ("nice", "-n", "10")
