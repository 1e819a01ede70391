"""The checkout the tests run from, and an environment whose Python imports it: for
commands run in a subprocess (rigctl, rig-exporter) by tests in any folder."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
