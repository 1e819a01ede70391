"""What a real exporter process writes to its log under hostile requests and failing
inputs: a bounded number of short lines, and every change of state
(docs/design.md#logs)."""

from __future__ import annotations

import asyncio
import random
import shutil
import threading
import time
import urllib.request
from pathlib import Path

from aiohttp import web

from exporter.process.launch import start_exporter
from exporter.process.log_limits import MAX_LINE_CHARS
from exporter.sim.rig.procfs_writer import HostSpec, write_proc
from tests.hardening import http_fuzz
from tests.scrape import parse_samples, value
from tests.support.sysfs_tree import SYSFS_FIXTURE, card_device

FUZZED_REQUESTS = 2000
SCRAPES = 200
# Start-up says about five lines; a line per kind of bad request comes on top.
MAX_LINES_UNDER_FUZZ = 40


def rig_files(tmp_path: Path) -> list[str]:
    shutil.copytree(SYSFS_FIXTURE, tmp_path / "sys", symlinks=True)
    write_proc(tmp_path / "proc", HostSpec())
    return ["--sysfs.root", str(tmp_path / "sys"), "--proc.root", str(tmp_path / "proc"),
            "--gpu.backend", "sysfs"]


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        return parse_samples(response.read().decode())


def assert_short(lines: list[str]) -> None:
    longest = max(lines, key=len)
    assert len(longest) <= MAX_LINE_CHARS, longest[:200]


def test_fuzzed_requests_write_a_bounded_number_of_short_lines(tmp_path: Path) -> None:
    with start_exporter(rig_files(tmp_path), tmp_path) as exporter:
        host, port = exporter.address.rsplit(":", 1)
        asyncio.run(http_fuzz.fuzz(host, int(port), FUZZED_REQUESTS))
        samples = scrape(exporter.url)  # and it still serves
        lines = exporter.log().splitlines()
    assert value(samples, "rig_source_up", source="gpu") == 1
    assert "Traceback" not in "\n".join(lines)
    assert len(lines) <= MAX_LINES_UNDER_FUZZ, "\n".join(lines[:60])
    assert any("bad request from 127.0.0.1" in line for line in lines)
    assert_short(lines)


class ChangingErrorEngine:
    """An engine whose every answer is HTTP 500 with 200 new random bytes, on its own
    loop and thread: the error text differs each scrape."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.rng = random.Random(7)
        self.runner: web.AppRunner | None = None

    async def _answer(self, request: web.Request) -> web.Response:
        return web.Response(status=500, body=self.rng.randbytes(200))

    async def _start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._answer)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    def __enter__(self) -> str:
        self.thread.start()
        return asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    def __exit__(self, *exc: object) -> None:
        assert self.runner is not None
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def test_an_engine_error_that_changes_each_scrape_is_told_once(tmp_path: Path) -> None:
    with ChangingErrorEngine() as engine_url, start_exporter(
            ["--engine", f"main={engine_url},stall_tracker=false", "--no-collector.gpu",
             "--no-collector.host"], tmp_path) as exporter:
        for _ in range(SCRAPES):
            samples = scrape(exporter.url)
        lines = exporter.log().splitlines()
    assert value(samples, "rig_source_up", source="engine/main") == 0
    down = [line for line in lines if "source engine/main down" in line]
    assert len(down) == 1, "\n".join(lines[:20])
    assert "HTTP 500" in down[0]
    assert len(lines) <= 10, "\n".join(lines[:20])
    assert_short(lines)


def test_a_card_file_that_fails_again_after_recovering_is_told_again(tmp_path: Path) -> None:
    busy = card_device(tmp_path / "sys", "card1") / "gpu_busy_percent"
    with start_exporter(rig_files(tmp_path), tmp_path) as exporter:
        good = busy.read_text()
        for text in ("garbage\n", good, "garbage\n", good):
            busy.write_text(text)
            # The GPU reading is served again for up to 1 s ([gpu] reading_max_age_seconds).
            time.sleep(1.2)
            samples = scrape(exporter.url)
        lines = exporter.log().splitlines()
    assert value(samples, "rig_gpu_busy_ratio", card="card1") == 0.99
    told = [line for line in lines if "card1: gpu_busy_percent" in line]
    failures = [line for line in told if "not an integer" in line]
    assert len(failures) == 2, "\n".join(told)
    assert sum("reads again" in line for line in told) == 2, "\n".join(told)
