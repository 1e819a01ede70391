"""The exporter serves on uvloop where it is installed (the `fast` extra), and the same
without it: a stream through the tap of a real exporter process on either loop."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import aiohttp
import pytest

from exporter import event_loop
from tests.exporter_process import REPO, wait_until_serving
from tests.scrape import free_port, parse_samples
from tests.tap.standin import Script, StandIn, stream_bytes

HIDE_UVLOOP = "import sys; sys.modules['uvloop'] = None"  # `import uvloop` then fails


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
    prelude = HIDE_UVLOOP if loop == "asyncio" else "import sys"
    port, tap_port = free_port(), free_port()
    log_path = tmp_path / "exporter.log"

    async def scenario(engine_url: str) -> tuple[bytes, str]:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"http://127.0.0.1:{tap_port}/v1/chat/completions",
                                    json={"stream": True}) as response:
                body = await response.read()
            async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                return body, await response.text()

    async def main() -> tuple[bytes, str]:
        engine_url = await standin.start()
        with open(log_path, "w") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-c", f"{prelude}; import runpy; "
                 "runpy.run_module('exporter', run_name='__main__')",
                 "--web.listen-address", f"127.0.0.1:{port}", "--log.level", "debug",
                 "--no-collector.gpu", "--no-collector.host",
                 "--engine", f"main={engine_url},stall_tracker=false,"
                             f"tap_listen_address=127.0.0.1:{tap_port}"],
                cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            await asyncio.to_thread(wait_until_serving, f"http://127.0.0.1:{port}", process,
                                    log_path)
            return await scenario(engine_url)
        finally:
            process.kill()
            process.wait()
            await standin.stop()

    body, metrics = asyncio.run(main())
    head, frames = stream_bytes(script)
    assert body == head + b"".join(frames)
    ok = {(n, labels) for (n, labels), v in parse_samples(metrics).items()
          if n == "rig_stream_requests_total" and ("outcome", "ok") in labels and v == 1.0}
    assert len(ok) == 1, metrics
    assert f"event loop: {loop}" in log_path.read_text()
