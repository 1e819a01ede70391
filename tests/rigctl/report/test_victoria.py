"""`rigctl report` reads VictoriaMetrics (the many-rigs deploy's store) as it reads
Prometheus: the same night imported into Debian's victoria-metrics gives the same
report, field for field."""

from __future__ import annotations

import io
import json
import time
import urllib.request
from pathlib import Path

from exporter.process.launch import Process, free_port, wait_ready
from exporter.rigctl import main
from exporter.rigctl.stack import tool
from tests.rigctl.report import night as n


def _report(url: str, start: float, end: float) -> dict:
    out = io.StringIO()
    code = main(["report", "--prometheus", url, "--rig", "night", "--start", str(start),
                 "--end", str(end), "--json"], out)
    assert code == 0, out.getvalue()
    return json.loads(out.getvalue())


def test_victoria_metrics_gives_the_same_report(tmp_path: Path) -> None:
    (tmp_path / "prometheus").mkdir()
    with n.night(tmp_path / "prometheus", rigs=("night",)) as history:
        from_prometheus = _report(history.url, history.start, history.end)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with Process("victoria-metrics", [
            tool("victoria-metrics"), f"-storageDataPath={tmp_path / 'vm'}",
            f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=1y",
            "-search.latencyOffset=0s", "-search.disableCache"],
            tmp_path / "victoria-metrics.log") as victoria:
        wait_ready(url + "/health", victoria)
        # Its Prometheus text import takes timestamps in milliseconds.
        lines = []
        for line in n.openmetrics(history.start, rigs=("night",)).splitlines():
            if not line.startswith("#"):
                head, value, seconds = line.rsplit(" ", 2)
                lines.append(f"{head} {value} {round(float(seconds) * 1000)}")
        urllib.request.urlopen(urllib.request.Request(
            url + "/api/v1/import/prometheus", data="\n".join(lines).encode(), method="POST"),
            timeout=120).read()
        urllib.request.urlopen(url + "/internal/force_flush", timeout=30).read()
        deadline = time.monotonic() + 30
        while True:  # until the import is searchable
            found = _report(url, history.start, history.end)
            if found["verdict"] != "unknown" or time.monotonic() > deadline:
                break
            time.sleep(1)
    assert found == from_prometheus
