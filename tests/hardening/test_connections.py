"""Connections cost bounded resources: 1,100 connections that never finish a request,
against an exporter held to systemd's soft limit of 1,024 open files, blind nothing.

The exporter reads the fixture cards' sysfs files and this machine's /proc on every
scrape, so a lack of descriptors would show as gpu or host down."""

from __future__ import annotations

import asyncio
import http.client
import socket
import ssl
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import trustme
from aiohttp import web

from exporter.daemon.web.listener import HEAD_DEADLINE_SECONDS, Listener
from exporter.process.launch import free_port, start_exporter
from tests.hardening.hostile import SOURCE_UP, Scraper, open_idle, wait_closed
from tests.support.event_loop import exporter_python
from tests.support.sysfs_tree import SYSFS_FIXTURE

pytestmark = pytest.mark.long_running(42)

IDLE = 1100
# Before any can have reached its deadline: an exporter that lets them pile up has run
# out of descriptors by then (about 1 s here).
HOLD_SECONDS = 3.0
SOURCES = ("gpu", "host")
ARGS = ["--sysfs.root", str(SYSFS_FIXTURE), "--gpu.backend", "sysfs"]


def _new_client_sees_the_sources(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=20, context=context) as response:
            body = response.read()
    except OSError:  # refused, reset, timed out
        return False
    up = {m[1].decode(): float(m[2]) for m in SOURCE_UP.finditer(body)}
    return all(up.get(s) == 1 for s in SOURCES)


@pytest.mark.parametrize(("open_files", "args", "uvloop"), [
    # systemd's default: soft 1024 under a higher hard limit, which the exporter takes.
    ((1024, 4096), [], True),
    # No room to raise it, and a connection cap above what the limit allows: the
    # exporter lowers the cap and keeps descriptors for the sources. On both loops.
    ((1024, 1024), ["--web.max-connections", "5000"], True),
    pytest.param((1024, 1024), ["--web.max-connections", "5000"], False,
                 marks=pytest.mark.slow),
], ids=["soft-1024-hard-4096", "soft-and-hard-1024", "soft-and-hard-1024-asyncio-loop"])
def test_idle_connections_blind_nothing(tmp_path: Path, open_files: tuple[int, int],
                                        args: list[str], uvloop: bool) -> None:
    with start_exporter([*ARGS, *args], tmp_path, open_files=open_files,
                        python=exporter_python(uvloop)) as exporter, \
            Scraper(exporter.url) as scraper:
        idle = open_idle("127.0.0.1", int(exporter.address.rsplit(":", 1)[1]), IDLE)
        opened = time.monotonic()
        time.sleep(HOLD_SECONDS)  # the server takes them from its backlog meanwhile
        during = [_new_client_sees_the_sources(exporter.url) for _ in range(5)]
        closed, last = wait_closed(idle, seconds=HEAD_DEADLINE_SECONDS + 25)
        after = [_new_client_sees_the_sources(exporter.url) for _ in range(20)]
    log = exporter.log()
    scrapes = scraper.scrapes
    failed = [s for s in scrapes if not s.sees(*SOURCES)]
    print(f"\nopen files {open_files[0]}:{open_files[1]}: {len(idle)} idle connections, "
          f"{closed} closed, the last {last - opened:.1f} s after they were all open; "
          f"{len(failed)} of {len(scrapes)} scrapes missed gpu or host; new clients served: "
          f"{sum(during)}/{len(during)} during, {sum(after)}/{len(after)} after")
    assert len(idle) >= IDLE * 0.9, f"only {len(idle)} connections opened"
    assert len(scrapes) >= 20, scrapes
    assert not failed, f"{len(failed)} of {len(scrapes)} scrapes: {failed[:3]}\n{log[-3000:]}"
    # The scraper kept one connection for the whole flood.
    assert scraper.connects == 1
    assert closed == len(idle), f"{len(idle) - closed} idle connections still open"
    assert all(during), during
    assert all(after), after
    assert "Too many open files" not in log
    if args:
        assert "lowered to fit the open-file limit of 1024" in log, log


def test_the_soft_open_file_limit_is_raised_to_the_hard_one(tmp_path: Path) -> None:
    with start_exporter(ARGS, tmp_path, open_files=(1024, 4096)) as exporter:
        limits = Path(f"/proc/{exporter.popen.pid}/limits").read_text()
    (line,) = [x for x in limits.splitlines() if x.startswith("Max open files")]
    assert line.split()[3:5] == ["4096", "4096"], line


def test_tls_handshakes_that_never_start_count_and_end(tmp_path: Path) -> None:
    """A connection to the TLS port that never sends its ClientHello holds a slot
    and a descriptor: it is counted, closed at the deadline, and shed for a client
    that does the handshake."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    web_config = tmp_path / "web.yml"
    web_config.write_text("tls_server_config: {cert_file: cert.pem, key_file: key.pem}\n")
    client = ssl.create_default_context()
    ca.configure_trust(client)
    with start_exporter([*ARGS, "--web.config.file", str(web_config),
                         "--web.max-connections", "20"], tmp_path, scheme="https",
                        context=client) as exporter:
        # Half of them send a plain-text request head instead, which ends theirs at once.
        idle = open_idle("127.0.0.1", int(exporter.address.rsplit(":", 1)[1]), 80)
        served = [_new_client_sees_the_sources(exporter.url, client) for _ in range(5)]
        closed, _ = wait_closed(idle, seconds=HEAD_DEADLINE_SECONDS + 25)
    assert len(idle) == 80
    assert all(served), served
    assert closed == len(idle), f"{len(idle) - closed} connections still open"


class ListenerOnAThread:
    """A Listener in front of a small aiohttp app on its own loop and thread: /slow
    answers once `release` is called, / at once."""

    def __init__(self, limit: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.listener = Listener("127.0.0.1", free_port(), None, limit)
        self.gate = asyncio.Event()

    def __enter__(self) -> ListenerOnAThread:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    async def _start(self) -> None:
        async def slow(request: web.Request) -> web.Response:
            await self.gate.wait()
            return web.Response(text="slow\n")

        async def fast(request: web.Request) -> web.Response:
            return web.Response(text="fast\n")

        app = web.Application(middlewares=[self.listener.middleware()])
        app.router.add_get("/slow", slow)
        app.router.add_get("/", fast)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await self.listener.start(self.runner.server)

    def release(self) -> None:
        self.loop.call_soon_threadsafe(self.gate.set)

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            await self.listener.close()
            await self.runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.listener.port, timeout=20)


def _get(connection: http.client.HTTPConnection, path: str = "/") -> bytes:
    connection.request("GET", path)
    return connection.getresponse().read()


def test_at_the_limit_a_new_connection_sheds_one_without_a_request_first() -> None:
    with ListenerOnAThread(limit=2) as server:
        scraper = server.connection()
        assert _get(scraper) == b"fast\n"  # now an idle kept-alive connection
        silent = socket.create_connection(("127.0.0.1", server.listener.port))
        time.sleep(0.2)
        newcomer = server.connection()
        assert _get(newcomer) == b"fast\n"
        silent.settimeout(5)
        assert silent.recv(1) == b""  # the one that never sent a request went
        assert _get(scraper) == b"fast\n"  # the kept-alive scraper stayed
        silent.close()


def test_at_the_limit_with_every_request_in_flight_a_new_one_waits_its_turn() -> None:
    with ListenerOnAThread(limit=2) as server:
        results: list[bytes] = []
        busy = [threading.Thread(target=lambda: results.append(
            _get(server.connection(), "/slow"))) for _ in range(2)]
        for thread in busy:
            thread.start()
        time.sleep(0.3)
        waiting = threading.Thread(target=lambda: results.append(_get(server.connection())))
        waiting.start()
        time.sleep(0.5)
        assert results == [] and server.listener.open == 2  # the third is in the backlog
        server.release()
        for thread in [*busy, waiting]:
            thread.join(20)
        assert sorted(results) == [b"fast\n", b"slow\n", b"slow\n"]
