"""Basic auth that a flood of wrong passwords cannot turn against the sources.

A bcrypt check costs a quarter to half a second of CPU at cost 12, by design. So
(docs/configuration.md#what-a-password-check-costs):

- bcrypt runs on one thread of its own, a daemon that never holds a stop
  (docs/deploy.md#stopping), and never on a thread a source reads with;
- at most MAX_WAITING_CHECKS wait for that thread; beyond them a request is
  refused at once with 429 and Retry-After, which says "load", not "wrong
  password" (no password was checked);
- every verdict is remembered, keyed by a keyed BLAKE2b digest of user and
  password (never the password), so a repeated credential costs a lookup and
  identical checks in flight share one; failures cannot push successes out, so a
  flood does not make Prometheus pay bcrypt again;
- an unknown user is checked against a configured user's hash, and then refused:
  it costs what a wrong password costs, and its timing names no user (the
  exporter-toolkit checks a dummy hash for the same reason).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import queue
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor, Future
from typing import Any

import aiohttp
import bcrypt
from aiohttp import web

MAX_WAITING_CHECKS = 4  # 1-2 s of waiting at cost 12, behind the check running
REMEMBERED_SUCCESSES = 64
REMEMBERED_FAILURES = 4096  # 16-byte digests: about half a megabyte at most
RETRY_AFTER_SECONDS = 1

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CheckPassword = Callable[[bytes, bytes], bool]


class BasicAuth:
    """The users' bcrypt hashes, and what checking them has cost so far."""

    def __init__(self, users: Mapping[str, bytes],
                 checkpw: CheckPassword = bcrypt.checkpw) -> None:
        if not users:
            raise ValueError("basic auth needs at least one user")
        self.users = dict(users)
        self._checkpw = checkpw
        # The costliest hash: an unknown user's check then costs at least what a
        # wrong password of any configured user does.
        self._stand_in = max(self.users.values(), key=_cost)
        self._key = os.urandom(32)  # a digest means nothing outside this process
        self._granted: OrderedDict[bytes, None] = OrderedDict()
        self._denied: OrderedDict[bytes, None] = OrderedDict()
        self._checking: dict[bytes, asyncio.Future[bool]] = {}
        self._thread = _DaemonThread("bcrypt")

    async def check(self, user: str, password: str) -> bool | None:
        """True for a listed user's password, False otherwise; None when too many
        checks wait already (the caller refuses the request without a verdict)."""
        key = self._digest(user, password)
        for remembered, verdict in ((self._granted, True), (self._denied, False)):
            if key in remembered:
                remembered.move_to_end(key)
                return verdict
        pending = self._checking.get(key)
        if pending is None:
            if len(self._checking) > MAX_WAITING_CHECKS:  # one running, the rest waiting
                return None
            pending = self._checking[key] = asyncio.ensure_future(
                self._verify(key, user, password))
        # A client that hangs up does not cancel the check: its verdict is kept.
        return await asyncio.shield(pending)

    async def _verify(self, key: bytes, user: str, password: str) -> bool:
        hashed = self.users.get(user)
        loop = asyncio.get_running_loop()
        try:
            matched = await loop.run_in_executor(
                self._thread, self._matches, password.encode(),
                self._stand_in if hashed is None else hashed)
        finally:
            del self._checking[key]
        granted = matched and hashed is not None
        remembered, limit = ((self._granted, REMEMBERED_SUCCESSES) if granted
                             else (self._denied, REMEMBERED_FAILURES))
        remembered[key] = None
        if len(remembered) > limit:
            remembered.popitem(last=False)
        return granted

    def _matches(self, password: bytes, hashed: bytes) -> bool:
        try:
            return self._checkpw(password, hashed)
        except ValueError:  # bcrypt 5 refuses passwords over 72 bytes: none can match
            return False

    def _digest(self, user: str, password: str) -> bytes:
        digest = hashlib.blake2b(key=self._key, digest_size=16)
        name = user.encode()
        digest.update(len(name).to_bytes(4, "big") + name + password.encode())
        return digest.digest()

    def middleware(self) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
        """Every path needs a listed user's password, as with the exporter-toolkit."""

        @web.middleware
        async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
            credentials = _credentials(request.headers.get("Authorization", ""))
            verdict = False if credentials is None else await self.check(*credentials)
            if verdict is None:
                raise web.HTTPTooManyRequests(
                    text="Too many password checks waiting; retry shortly\n",
                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
            if not verdict:
                raise web.HTTPUnauthorized(
                    text="Unauthorized\n",
                    headers={"WWW-Authenticate": 'Basic realm="rig-exporter"'})
            return await handler(request)

        return authenticate


class _DaemonThread(Executor):
    """One daemon thread, for run_in_executor. ThreadPoolExecutor's threads are not
    daemons: Python joins them at exit, so a check under way would hold a stop."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]]] = (
            queue.SimpleQueue())
        threading.Thread(target=self._work, name=name, daemon=True).start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._jobs.put((future, functools.partial(fn, *args, **kwargs)))
        return future

    def _work(self) -> None:
        while True:
            future, job = self._jobs.get()
            if not future.set_running_or_notify_cancel():  # its waiter gave up
                continue
            try:
                future.set_result(job())
            except BaseException as exc:  # handed to the waiting coroutine
                future.set_exception(exc)


def _cost(hashed: bytes) -> int:
    """The cost of a "$2b$12$..." hash: 12."""
    try:
        return int(hashed.split(b"$")[2])
    except (IndexError, ValueError):
        return 0


def _credentials(header: str) -> tuple[str, str] | None:
    """User and password of a Basic header; None for any other or malformed one.
    aiohttp's decoder raises ValueError (UnicodeError included) for every bad form:
    no space, another scheme, non-ASCII or bad base64, no colon, non-UTF-8 bytes."""
    try:
        auth = aiohttp.BasicAuth.decode(header, encoding="utf-8")
    except ValueError:
        return None
    return auth.login, auth.password
