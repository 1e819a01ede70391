"""Past one Prometheus: Prometheus scrapes a simulated rig through deploy/'s file_sd
layout and remote-writes to VictoriaMetrics (Debian's `victoria-metrics`, on
loopback, in a temporary directory); the rig's series come back from
VictoriaMetrics' PromQL API with their `rig` label.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

from exporter.process.launch import Process, free_port, start_exporter, wait_ready
from exporter.rigctl.stack import Monitoring, tool
from exporter.sim.rig.simrig import SimRig
from tests.e2e.stack import LoopThread

TIME_SCALE = 10.0


def vm_query(url: str, promql: str) -> list[dict]:
    query = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_remote_write_to_victoria_metrics_and_read_back(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        port = free_port()
        vm_url = f"http://127.0.0.1:{port}"
        victoria = Process(
            "victoria-metrics",
            [tool("victoria-metrics"), f"-storageDataPath={tmp_path / 'vm'}",
             f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=1d",
             # Points are queryable at once instead of after the default 30 s.
             "-search.latencyOffset=0s", "-search.disableCache"],
            tmp_path / "victoria-metrics.log",
        )
        stack.callback(victoria.stop)
        wait_ready(vm_url + "/health", victoria)

        loop = LoopThread()
        stack.callback(loop.stop)
        rig = SimRig(TIME_SCALE, directory=tmp_path / "rig")
        loop.run(rig.start())
        stack.callback(lambda: loop.run(rig.stop()))
        exporter = stack.enter_context(start_exporter(rig.exporter_args(), tmp_path / "rig"))

        monitoring = Monitoring(tmp_path / "monitoring", TIME_SCALE,
                                receiver_url="http://127.0.0.1:9")
        stack.callback(monitoring.stop)
        monitoring.start(remote_write_url=vm_url + "/api/v1/write")
        monitoring.write_targets([("remote", exporter.address)])

        deadline = time.monotonic() + 90
        while True:
            cards = vm_query(vm_url, 'rig_gpu_present{rig="remote"}')
            engines = vm_query(vm_url, 'rig_engine_running_requests{rig="remote"}')
            # A recording rule's output travels too (the store holds what the alerts
            # use); it comes a rule evaluation and a remote-write batch after the
            # scraped series it is made of.
            recorded = vm_query(vm_url, 'instance:rig_host_memory_available:ratio{rig="remote"}')
            if len(cards) == 2 and engines and recorded:
                break
            assert time.monotonic() < deadline, (
                f"not in VictoriaMetrics: {cards} {engines} {recorded}\n"
                f"{victoria.log()[-2000:]}")
            time.sleep(1)
        assert {c["metric"]["card"] for c in cards} == {"card1", "card2"}
        assert all(c["metric"]["job"] == "rig" and c["value"][1] == "1" for c in cards)
        # Two agents decoding, and the exporter's probe while it runs.
        assert engines[0]["metric"]["engine"] == "main" and engines[0]["value"][1] in ("2", "3")
        assert 0 < float(recorded[0]["value"][1]) <= 1  # a ratio of available memory
