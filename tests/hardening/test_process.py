"""The exporter as a long-running process: stopping, binding, logging, reloading."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
import urllib.request
from pathlib import Path

from exporter.process import launch
from exporter.process.launch import free_port, start_exporter
from exporter.sim.engine.state import Fault, SimEngine
from tests.scrape import parse_samples, value
from tests.support.process import SimThread, wait_for_log
from tests.support.sysfs_tree import SYSFS_FIXTURE


def test_sigterm_during_a_scrape_of_a_hung_engine_exits_within_2_s(tmp_path: Path) -> None:
    with SimThread(SimEngine(fault=Fault.HANG)) as engine_url, start_exporter(
        ["--engine", f"main={engine_url}", "--no-collector.gpu", "--no-collector.host"],
        tmp_path,
    ) as exporter:
        scrape = threading.Thread(
            target=lambda: _ignore_errors(lambda: urllib.request.urlopen(
                exporter.url + "/metrics", timeout=30)),
            daemon=True)
        scrape.start()
        time.sleep(0.5)  # the scrape now waits on the hung engine (8 s deadline)
        started = time.monotonic()
        exporter.popen.send_signal(signal.SIGTERM)
        exporter.popen.wait(timeout=10)
        assert time.monotonic() - started < 2.0, exporter.log()


def _ignore_errors(call) -> None:
    with contextlib.suppress(OSError):
        call()


def test_a_failed_bind_is_reported_and_never_logged_as_listening(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with start_exporter(["--no-collector.gpu", "--no-collector.host"], tmp_path,
                            address=f"127.0.0.1:{port}", wait=False) as exporter:
            assert exporter.popen.wait(timeout=20) == 1
    log = exporter.log()
    assert f"cannot listen on 127.0.0.1:{port}" in log
    assert "listening on" not in log


def test_a_free_port_is_chosen_below_the_kernels_own_choices(tmp_path: Path,
                                                             monkeypatch) -> None:
    ports = {free_port() for _ in range(20)}
    first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert all(10_000 <= port < first_ephemeral for port in ports)
    assert len(ports) == 20  # at random, and never one it chose lately
    for port in ports:  # each was free when chosen and is free again
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    # No room below the range (or no /proc): the kernel chooses, as before.
    (tmp_path / "range").write_text("1024\t65535\n")
    monkeypatch.setattr(launch, "_EPHEMERAL_RANGE", tmp_path / "range")
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))


def test_access_log_is_opt_in(tmp_path: Path) -> None:
    args = ["--no-collector.gpu", "--no-collector.host"]
    with start_exporter(args, tmp_path) as quiet:
        urllib.request.urlopen(quiet.url + "/metrics", timeout=10).read()
        time.sleep(0.2)
    assert '"GET /metrics' not in quiet.log()
    with start_exporter([*args, "--web.access-log"], tmp_path) as chatty:
        urllib.request.urlopen(chatty.url + "/metrics", timeout=10).read()
        time.sleep(0.2)
    assert '"GET /metrics' in chatty.log()


def test_an_empty_host_is_logged_as_all_interfaces(tmp_path: Path) -> None:
    port = free_port()
    with start_exporter(["--no-collector.gpu", "--no-collector.host"], tmp_path,
                        address=f":{port}", wait=False) as exporter:
        exporter.wait_ready()  # on 127.0.0.1: an empty host is every interface
    assert f"listening on port {port} on all interfaces (http)" in exporter.log()
    assert "http://:" not in exporter.log()


def test_engine_url_ending_in_metrics_is_refused_with_one_line(tmp_path: Path) -> None:
    with start_exporter(["--engine", "main=http://127.0.0.1:30000/metrics"], tmp_path,
                        wait=False) as exporter:
        assert exporter.popen.wait(timeout=20) == 2
    assert "engine[0].url" in exporter.log() and "without a path" in exporter.log()


def _scrape(url: str) -> dict:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        return parse_samples(response.read().decode())


def test_sighup_reloads_a_good_config_and_keeps_the_old_one_on_garbage(tmp_path: Path) -> None:
    config = tmp_path / "rig.toml"
    config.write_text(f'[gpu]\nbackend = "sysfs"\nsysfs_root = "{SYSFS_FIXTURE}"\n'
                      "[host]\nenabled = false\n")
    with start_exporter(["--config.file", str(config)], tmp_path) as exporter:
        assert value(_scrape(exporter.url), "rig_source_up", source="gpu") == 1

        config.write_text("this is [not toml\n")
        exporter.popen.send_signal(signal.SIGHUP)
        wait_for_log(exporter, "config not reloaded")
        assert exporter.popen.poll() is None
        assert value(_scrape(exporter.url), "rig_source_up", source="gpu") == 1

        config.write_text("[gpu]\nenabled = false\n[host]\nenabled = false\n")
        exporter.popen.send_signal(signal.SIGHUP)
        wait_for_log(exporter, "config reloaded")
        assert value(_scrape(exporter.url), "rig_source_up", source="gpu") is None
