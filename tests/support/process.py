"""For tests against a real exporter process: a simulated SGLang on its own thread
(the test's own code stays synchronous), waiting for a log line, and the listening
socket behind a port."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from exporter.process.launch import ExporterProcess
from exporter.sim.engine.server import SimServer
from exporter.sim.engine.state import SimEngine


class SimThread:
    """A SimServer on its own event loop and thread; entering gives its base URL."""

    def __init__(self, state: SimEngine) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = SimServer(state)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def wait_for_log(exporter: ExporterProcess, text: str, timeout: float = 10,
                 count: int = 1) -> None:
    """Until `text` appears `count` times in the exporter's log."""
    deadline = time.monotonic() + timeout
    while exporter.log().count(text) < count:
        assert time.monotonic() < deadline, exporter.log()
        time.sleep(0.05)


def listening_inode(port: int) -> int | None:
    """The inode of the IPv4 socket listening on 127.0.0.1:`port` (/proc/net/tcp), or
    None: the same inode before and after means the very same socket."""
    wanted = f"0100007F:{port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == wanted and fields[3] == "0A":  # 0A: TCP_LISTEN
            return int(fields[9])
    return None
