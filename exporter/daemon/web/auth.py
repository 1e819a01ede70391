"""Basic auth that a flood of wrong passwords cannot turn against the sources.

A bcrypt check costs a quarter to half a second of CPU at cost 12, by design. So
(docs/configuration.md#what-a-password-check-costs):

- bcrypt runs one check at a time, on a daemon thread that never holds a stop
  (docs/deploy.md#stopping; exporter/process/daemon_thread.py), and never on a
  thread a source reads with;
- at most MAX_WAITING_CHECKS wait for their turn; beyond them a request is
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
import hashlib
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping

import aiohttp
import bcrypt
from aiohttp import web

from exporter.process.daemon_thread import in_daemon_thread
from exporter.process.in_flight import InFlightByKey

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
        self._checking: InFlightByKey[bytes, bool] = InFlightByKey()
        self._one_at_a_time = asyncio.Lock()  # bcrypt takes one core at most

    async def check(self, user: str, password: str) -> bool | None:
        """True for a listed user's password, False otherwise; None when too many
        checks wait already (the caller refuses the request without a verdict)."""
        key = self._digest(user, password)
        for remembered, verdict in ((self._granted, True), (self._denied, False)):
            if key in remembered:
                remembered.move_to_end(key)
                return verdict
        if key not in self._checking and len(self._checking) > MAX_WAITING_CHECKS:
            return None  # one running, the rest waiting
        # A client that hangs up does not cancel the check: its verdict is kept.
        return await self._checking(key, lambda: self._verify(key, user, password))

    async def _verify(self, key: bytes, user: str, password: str) -> bool:
        hashed = self.users.get(user)
        checked = self._stand_in if hashed is None else hashed
        async with self._one_at_a_time:  # first come, first checked
            matched = await in_daemon_thread(
                lambda: self._matches(password.encode(), checked), "bcrypt")
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
