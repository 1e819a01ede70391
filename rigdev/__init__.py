"""Tools for developing rig telemetry, not part of the installed product: they run
from a checkout (the dashboards' renderer and the PromQL evaluator behind it)."""
