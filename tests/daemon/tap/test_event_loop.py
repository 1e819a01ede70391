"""The exporter serves on uvloop where it is installed (the `fast` extra), and the same
without it: a stream through the tap of a real exporter process on either loop."""

from __future__ import annotations

import asyncio
import sys

import aiohttp
import pytest

from exporter.process import event_loop
from exporter.process.launch import free_port, start_exporter
from tests.daemon.tap.standin import Script, StandIn, stream_bytes
from tests.scrape import parse_samples
from tests.support.event_loop import exporter_python


def running_loop_module() -> str:
    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__

    return event_loop.run(which())


def test_uvloop_when_installed():
    import uvloop  # the `fast` extra, installed by setup.sh

    assert event_loop.loop_factory() is uvloop.new_event_loop
    assert running_loop_module().startswith("uvloop")


def test_asyncio_without_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)
    assert event_loop.loop_factory() is None
    assert running_loop_module().startswith("asyncio")


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_the_exporter_taps_a_stream_on_either_loop(tmp_path, loop):
    script = Script(shape="chat", first_token_seconds=0.01, gaps_seconds=(0.01,) * 4)
    standin = StandIn(script)
    tap_port = free_port()

    async def scenario(exporter_url: str) -> tuple[bytes, str]:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"http://127.0.0.1:{tap_port}/v1/chat/completions",
                                    json={"stream": True}) as response:
                body = await response.read()
            async with session.get(f"{exporter_url}/metrics") as response:
                return body, await response.text()

    async def main() -> tuple[bytes, str, str]:
        engine_url = await standin.start()
        exporter = start_exporter(
            ["--log.level", "debug", "--no-collector.gpu", "--no-collector.host",
             "--engine", f"main={engine_url},stall_tracker=false,"
                         f"tap_listen_address=127.0.0.1:{tap_port}"],
            tmp_path, wait=False, python=exporter_python(loop == "uvloop"))
        try:
            await asyncio.to_thread(exporter.wait_ready)
            body, metrics = await scenario(exporter.url)
            return body, metrics, exporter.log()
        finally:
            exporter.stop()
            await standin.stop()

    body, metrics, log = asyncio.run(main())
    head, frames = stream_bytes(script)
    assert body == head + b"".join(frames)
    ok = {(n, labels) for (n, labels), v in parse_samples(metrics).items()
          if n == "rig_stream_requests_total" and ("outcome", "ok") in labels and v == 1.0}
    assert len(ok) == 1, metrics
    assert f"event loop: {loop}" in log
