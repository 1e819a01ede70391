"""A reload never drops a listener (docs/deploy.md#reloading): SIGHUP to a real exporter
with a stream tap in front of a simulated SGLang."""

from __future__ import annotations

import asyncio
import http.client
import json
import signal
import socket
import threading
import urllib.request
from pathlib import Path

import pytest

from exporter.config import Config, load_config
from exporter.daemon.runtime import Exporter
from exporter.process.launch import ExporterProcess, free_port, start_exporter
from exporter.sim.engine.state import SimEngine, StreamScript
from exporter.sim.rig.procfs_writer import HostSpec, write_proc
from tests.daemon.engines.helpers import running_sim
from tests.scrape import parse_samples, value
from tests.support.process import SimThread, listening_inode, wait_for_log

TOKENS = 40


def write_config(path: Path, engine_url: str, tap_port: int, **engine: object) -> None:
    extra = "".join(f"{key} = {json.dumps(v)}\n" for key, v in engine.items())
    path.write_text("[gpu]\nenabled = false\n[host]\nenabled = false\n"
                    "[health]\nsample_interval_seconds = 0\n"
                    f'[[engine]]\nname = "main"\nurl = "{engine_url}"\n'
                    f'tap_listen_address = "127.0.0.1:{tap_port}"\n{extra}')


def scrape(exporter: ExporterProcess) -> dict:
    with urllib.request.urlopen(exporter.url + "/metrics", timeout=10) as response:
        return parse_samples(response.read().decode())


def stream(tap_port: int, path: str = "/v1/completions", tokens: int = TOKENS) -> bytes:
    """One streamed completion through the tap, the whole body (raises if it is cut)."""
    connection = http.client.HTTPConnection("127.0.0.1", tap_port, timeout=30)
    try:
        # The body both APIs read: /v1/completions and SGLang's /generate.
        connection.request("POST", path, body=json.dumps(
            {"prompt": "hi", "text": "hi", "max_tokens": tokens,
             "sampling_params": {"max_new_tokens": tokens}, "stream": True}),
            headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200, response.read()
        return response.read()
    finally:
        connection.close()


def frames(body: bytes) -> list[bytes]:
    return [line for line in body.split(b"\n") if line.startswith(b"data: ")]


def reload(exporter: ExporterProcess, times: int = 1) -> None:
    done = exporter.log().count("SIGHUP: config reloaded")
    exporter.popen.send_signal(signal.SIGHUP)
    wait_for_log(exporter, "SIGHUP: config reloaded", count=done + times)


def tap_up(exporter: ExporterProcess) -> float | None:
    return value(scrape(exporter), "rig_source_up", source="tap/main")


def served_ok(exporter: ExporterProcess) -> float | None:
    return value(scrape(exporter), "rig_stream_requests_total", engine="main", kind="sglang",
                 outcome="ok")


def refused(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture
def engine_url():
    script = StreamScript(first_token_seconds=0.05, default_gap_seconds=0.05)
    with SimThread(SimEngine(stream=script)) as url:
        yield url


def test_an_unchanged_tap_keeps_its_socket_and_its_counts(tmp_path: Path,
                                                          engine_url: str) -> None:
    config, port = tmp_path / "rig.toml", free_port()
    write_config(config, engine_url, port)
    with start_exporter(["--config.file", str(config)], tmp_path) as exporter:
        wait_for_log(exporter, "stall tracker on SGLang")
        stream(port, tokens=3)
        socket_before = listening_inode(port)
        assert socket_before is not None and served_ok(exporter) == 1

        reload(exporter)
        assert listening_inode(port) == socket_before
        assert tap_up(exporter) == 1 and served_ok(exporter) == 1
        assert len(frames(stream(port, tokens=3))) == 3 + 1  # and [DONE]
        assert served_ok(exporter) == 2
    log = exporter.log()
    assert "cannot listen" not in log, log
    # The engine was kept too: its stall tracker did not start over.
    assert log.count("stall tracker on SGLang") == 1, log


def test_a_stream_in_flight_through_a_reload_completes(tmp_path: Path,
                                                       engine_url: str) -> None:
    config, port = tmp_path / "rig.toml", free_port()
    write_config(config, engine_url, port)
    with start_exporter(["--config.file", str(config)], tmp_path) as exporter:
        bodies: list[bytes] = []
        client = threading.Thread(target=lambda: bodies.append(stream(port)))
        client.start()  # about 2 s of tokens
        wait_for_log(exporter, "stall tracker on SGLang")
        reload(exporter)
        in_flight_at_reload = client.is_alive()
        client.join(30)
        assert tap_up(exporter) == 1
    assert in_flight_at_reload
    assert bodies and len(frames(bodies[0])) == TOKENS + 1, exporter.log()
    assert bodies[0].rstrip().endswith(b"data: [DONE]")


def test_a_changed_tap_on_the_same_port_serves_its_new_engine(tmp_path: Path,
                                                              engine_url: str) -> None:
    config, port = tmp_path / "rig.toml", free_port()
    write_config(config, engine_url, port)
    second = SimThread(SimEngine(stream=StreamScript(first_token_seconds=0.01)))
    with second as second_url, start_exporter(["--config.file", str(config)],
                                              tmp_path) as exporter:
        stream(port, tokens=2)
        write_config(config, second_url, port)
        reload(exporter)
        assert len(frames(stream(port, "/generate", tokens=2))) == 2 + 1
        assert len(second.server.generate_requests) == 1
        assert tap_up(exporter) == 1
    assert "cannot listen" not in exporter.log(), exporter.log()


def test_a_tap_moved_to_a_new_port_leaves_the_old_one(tmp_path: Path, engine_url: str) -> None:
    config, old, new = tmp_path / "rig.toml", free_port(), free_port()
    write_config(config, engine_url, old)
    with start_exporter(["--config.file", str(config)], tmp_path) as exporter:
        write_config(config, engine_url, new)
        reload(exporter)
        assert refused(old)
        assert len(frames(stream(new, tokens=2))) == 2 + 1
        assert tap_up(exporter) == 1


def test_a_failed_bind_keeps_the_old_tap_and_says_the_reload_was_partial(
        tmp_path: Path, engine_url: str) -> None:
    config, old = tmp_path / "rig.toml", free_port()
    write_config(config, engine_url, old)
    taken = socket.socket()
    with start_exporter(["--config.file", str(config)], tmp_path) as exporter:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        new = taken.getsockname()[1]
        stream(old, tokens=2)
        socket_before = listening_inode(old)
        write_config(config, engine_url, new)
        exporter.popen.send_signal(signal.SIGHUP)
        wait_for_log(exporter, "SIGHUP: config reloaded in part")
        assert f"tap main stays on 127.0.0.1:{old}" in exporter.log(), exporter.log()
        assert listening_inode(old) == socket_before
        assert tap_up(exporter) == 1 and served_ok(exporter) == 1
        assert len(frames(stream(old, tokens=2))) == 2 + 1

        taken.close()  # the port is free: the next SIGHUP moves the tap
        reload(exporter)
        assert refused(old)
        assert len(frames(stream(new, tokens=2))) == 2 + 1
        assert tap_up(exporter) == 1


@pytest.mark.parametrize(("change", "replaced"), [
    ({}, set()),
    ({"gpu": {"expected_cards": 1}}, {"gpu"}),
    ({"host": {"proc_root": "/nonexistent"}}, {"host"}),
    ({"engine": {"probe_interval_seconds": 120}}, {"engine/main", "probe/main"}),
    ({"engine": {"tap_listen_address": "new"}}, {"tap/main"}),
    ({"engine": {"stall_window_seconds": 30}}, {"engine/main", "probe/main", "tap/main"}),
])
def test_a_reload_rebuilds_only_the_sources_whose_settings_changed(
        tmp_path: Path, sysfs_root: Path, change: dict, replaced: set[str]) -> None:
    """Every kind of source is kept when the settings it is built from are unchanged."""
    write_proc(tmp_path / "proc", HostSpec())

    def config(url: str, change: dict) -> Config:
        engine = {"name": "main", "url": url, "probe_interval_seconds": 60,
                  "tap_listen_address": f"127.0.0.1:{ports['old']}", **change.get("engine", {})}
        if engine["tap_listen_address"] == "new":
            engine["tap_listen_address"] = f"127.0.0.1:{ports['new']}"
        return load_config({
            "gpu": {"backend": "sysfs", "sysfs_root": str(sysfs_root), **change.get("gpu", {})},
            "host": {"proc_root": str(tmp_path / "proc"), **change.get("host", {})},
            "engine": [engine]})

    ports = {"old": free_port(), "new": free_port()}

    async def scenario() -> tuple[dict[str, object], dict[str, object], list[str]]:
        async with running_sim() as sim:
            exporter = Exporter(config(sim.url, {}))
            await exporter.start()
            try:
                before = {s.name: s for s in exporter.sources}
                problems = await exporter.reconfigure(config(sim.url, change))
                return before, {s.name: s for s in exporter.sources}, problems
            finally:
                await exporter.close()

    before, after, problems = asyncio.run(scenario())
    assert problems == []
    assert set(after) == set(before) == {"gpu", "host", "engine/main", "probe/main", "tap/main"}
    assert {name for name in after if after[name] is not before[name]} == replaced
    # A kept probe reads the session of the engine it belongs to, a new one of the new.
    assert after["probe/main"].engine is after["engine/main"]
