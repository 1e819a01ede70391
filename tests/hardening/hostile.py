"""Hostile clients, for tests/hardening and bench/bench_hostile.py: connections that
never finish a request, a flood of wrong passwords, and the kept-alive scraper whose
every scrape must still see the sources while they run."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import http.client
import re
import selectors
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp

SOURCE_UP = re.compile(rb'^rig_source_up\{source="([a-z/]+)"\} ([0-9.e+-]+)$', re.MULTILINE)
# A request head that never ends: the blank line that closes it never comes.
PARTIAL_HEAD = b"GET /metrics HTTP/1.1\r\nHost: rig\r\nUser-Agent: slowloris\r\n"


def basic_auth(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@dataclass(frozen=True)
class Scrape:
    status: int | None  # None: no answer (the error says why)
    up: dict[str, float]
    seconds: float
    connection: int  # which TCP connection served it: the scraper's count of connects
    error: str = ""

    def sees(self, *sources: str) -> bool:
        return self.status == 200 and all(self.up.get(s) == 1 for s in sources)


@dataclass
class Scraper:
    """Scrapes /metrics back to back over one kept-alive connection (http.client), with
    basic auth when `authorization` is given, on its own thread, until stopped. After
    a failure it reconnects, and the failure is recorded."""

    url: str
    authorization: str | None = None
    scrapes: list[Scrape] = field(default_factory=list)
    connects: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.scrapes and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _connection(self) -> http.client.HTTPConnection:
        parts = urlsplit(self.url)
        self.connects += 1
        return http.client.HTTPConnection(parts.hostname, parts.port, timeout=20)

    def _run(self) -> None:
        headers = {"Authorization": self.authorization} if self.authorization else {}
        connection = self._connection()
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                connection.request("GET", "/metrics", headers=headers)
                response = connection.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException) as exc:
                self.scrapes.append(Scrape(None, {}, time.perf_counter() - started,
                                           self.connects, f"{type(exc).__name__}: {exc}"))
                connection.close()
                connection = self._connection()
                continue
            up = {m[1].decode(): float(m[2]) for m in SOURCE_UP.finditer(body)}
            self.scrapes.append(Scrape(response.status, up, time.perf_counter() - started,
                                       self.connects))
            time.sleep(0.005)  # a busy scraper, not a second flood
        connection.close()

    def since(self, index: int) -> list[Scrape]:
        return self.scrapes[index:]


def open_idle(host: str, port: int, count: int, batch: int = 50,
              seconds: float = 20.0) -> list[socket.socket]:
    """`count` connections that never finish a request: every other one sends the
    start of a request head, the rest send nothing. They connect `batch` at a time,
    each batch once the previous one is through, so that they pass the server's
    listen backlog rather than overflow it; `seconds` bounds it all. The ones that
    never connected are closed and left out."""
    connected: list[socket.socket] = []
    deadline = time.monotonic() + seconds
    for first in range(0, count, batch):
        selector = selectors.DefaultSelector()
        for i in range(first, min(first + batch, count)):
            sock = socket.socket()
            sock.setblocking(False)
            if sock.connect_ex((host, port)) not in (0, errno.EINPROGRESS):
                sock.close()
                continue
            selector.register(sock, selectors.EVENT_WRITE, i % 2 == 0)
        while selector.get_map() and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.5):
                sock = key.fileobj
                selector.unregister(sock)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                    sock.close()
                    continue
                if key.data:
                    with contextlib.suppress(OSError):
                        sock.send(PARTIAL_HEAD)
                connected.append(sock)
        for key in list(selector.get_map().values()):
            key.fileobj.close()
        selector.close()
    return connected


def wait_closed(sockets: list[socket.socket], seconds: float) -> tuple[int, float]:
    """Wait until the server has closed every socket (EOF or reset), for at most
    `seconds`; returns how many it closed, and when (time.monotonic()) the last one
    closed. The sockets are closed on return."""
    selector = selectors.DefaultSelector()
    for sock in sockets:
        selector.register(sock, selectors.EVENT_READ)
    started = time.monotonic()
    closed, last = 0, started
    while selector.get_map() and time.monotonic() - started < seconds:
        for key, _ in selector.select(timeout=0.5):
            sock = key.fileobj
            try:
                data = sock.recv(65536)
            except OSError:  # reset
                data = b""
            if data:
                continue  # an answer (a 408 or an error page), then the close
            selector.unregister(sock)
            closed += 1
            last = time.monotonic()
    selector.close()
    for sock in sockets:
        sock.close()
    return closed, last


@dataclass
class Flood:
    """What a password flood got back."""

    statuses: Counter = field(default_factory=Counter)
    by_index: dict[int, int | str] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)


async def password_flood(url: str, user: str, count: int, concurrency: int,
                         prefix: str = "wrong", only: list[int] | None = None) -> Flood:
    """`count` requests with distinct wrong passwords for `user` (PREFIX-0, PREFIX-1,
    ...; with `only`, just those indices), `concurrency` at a time, each on its own
    connection."""
    flood = Flood()
    gate = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=60)

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        async with gate:
            started = time.perf_counter()
            try:
                async with session.get(url + "/metrics", headers={
                        "Authorization": basic_auth(user, f"{prefix}-{i}")}) as response:
                    await response.read()
                    outcome: int | str = response.status
            except (aiohttp.ClientError, TimeoutError) as exc:
                outcome = type(exc).__name__
            flood.seconds.append(time.perf_counter() - started)
            flood.statuses[outcome] += 1
            flood.by_index[i] = outcome

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(one(session, i) for i in (range(count) if only is None
                                                          else only)))
    return flood


def share(scrapes: list[Scrape], *sources: str) -> float:
    """The fraction of scrapes that saw every one of `sources` up."""
    return sum(s.sees(*sources) for s in scrapes) / len(scrapes) if scrapes else 0.0


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * 0.99) - 1)] if ordered else float("nan")
