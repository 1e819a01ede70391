"""Basic auth cannot be turned against the sources: 400 wrong passwords, 200 at a
time, against a real exporter leave every authenticated scrape with gpu and host up,
and every one of them is answered (401, or 429 when the checks' queue is full) rather
than left waiting on a pile of bcrypt checks; a repeated wrong password costs no
check; an unknown user costs a check like a wrong password. Latencies are printed
here and measured in bench/bench_hostile.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import bcrypt
import pytest

from exporter.daemon.web import auth as web_auth
from exporter.daemon.web.auth import MAX_WAITING_CHECKS, BasicAuth
from exporter.process.launch import start_exporter
from tests.hardening.hostile import Scraper, basic_auth, p99, password_flood
from tests.support.sysfs_tree import SYSFS_FIXTURE

USER, PASSWORD = "prometheus", "correct horse battery staple"
# Cost 10 (a quarter of htpasswd's 12) keeps the flood short; the bench runs 12.
FLOOD_COST = 10
FLOOD, AT_A_TIME = 400, 200


def _web_config(tmp_path: Path, cost: int) -> Path:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=cost)).decode()
    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  {USER}: '{hashed}'\n")
    return path


def test_a_password_flood_blinds_no_authenticated_scrape(tmp_path: Path) -> None:
    args = ["--sysfs.root", str(SYSFS_FIXTURE), "--gpu.backend", "sysfs",
            "--web.config.file", str(_web_config(tmp_path, FLOOD_COST))]
    with start_exporter(args, tmp_path) as exporter, \
            Scraper(exporter.url, basic_auth(USER, PASSWORD)) as scraper:
        before = len(scraper.scrapes)
        flood = asyncio.run(password_flood(exporter.url, USER, FLOOD, AT_A_TIME))
        during = scraper.since(before)
        # The wrong passwords that were checked, again and again, 200 at a time: were
        # they checked anew, all but a few would be refused for the queue.
        checked = [i for i, status in flood.by_index.items() if status == 401]
        repeats = checked * (AT_A_TIME // max(1, len(checked)))
        again = asyncio.run(password_flood(exporter.url, USER, FLOOD, AT_A_TIME,
                                           only=repeats))
        long_password = asyncio.run(password_flood(exporter.url, USER, 1, 1,
                                                   prefix="x" * 100))
    failed = [s for s in during if not s.sees("gpu", "host")]
    print(f"\n{FLOOD} wrong passwords {AT_A_TIME} at a time (cost {FLOOD_COST}): "
          f"{dict(flood.statuses)}; {len(during)} authenticated scrapes meanwhile, "
          f"{len(failed)} missed gpu or host, p99 {p99([s.seconds for s in during]) * 1000:.0f}"
          f" ms; the {len(checked)} checked, {len(repeats)} times again: {dict(again.statuses)}")
    assert len(during) >= 5, during
    assert not failed, failed[:3]
    assert set(flood.statuses) <= {401, 429}, flood.statuses  # none gave up after 60 s
    assert checked, flood.statuses
    assert again.statuses == {401: len(repeats)}, again.statuses  # none waited for bcrypt
    assert long_password.statuses == {401: 1}  # over bcrypt's 72 bytes: no match, no 500
    assert "Traceback" not in exporter.log()


class CountingCheck:
    """bcrypt's own check, counting each call and the hash it was given."""

    def __init__(self) -> None:
        self.hashes: list[bytes] = []

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        self.hashes.append(hashed)
        return bcrypt.checkpw(password, hashed)


def _users() -> dict[str, bytes]:
    return {"cheap": bcrypt.hashpw(b"a", bcrypt.gensalt(rounds=4)),
            USER: bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=6))}


def test_an_unknown_user_costs_a_check_against_the_costliest_hash() -> None:
    users = _users()
    check = CountingCheck()
    auth = BasicAuth(users, check)
    assert asyncio.run(auth.check("nobody", PASSWORD)) is False
    assert asyncio.run(auth.check(USER, "wrong")) is False
    # The same work as a wrong password for the costliest user: the same hash.
    assert check.hashes == [users[USER], users[USER]]


def test_verdicts_are_remembered_and_identical_checks_share_one() -> None:
    check = CountingCheck()
    auth = BasicAuth(_users(), check)

    async def run() -> list[bool | None]:
        same = await asyncio.gather(*(auth.check(USER, "wrong") for _ in range(20)))
        return [*same, await auth.check(USER, "wrong"), await auth.check(USER, PASSWORD),
                await auth.check(USER, PASSWORD)]

    verdicts = asyncio.run(run())
    assert verdicts == [False] * 21 + [True, True]
    assert len(check.hashes) == 2  # one for the 21 wrong, one for the 2 right


def test_beyond_the_waiting_checks_a_request_is_refused_but_a_known_one_passes() -> None:
    check = CountingCheck()
    auth = BasicAuth(_users(), check)

    async def run() -> tuple[list[bool | None], bool | None]:
        assert await auth.check(USER, PASSWORD) is True
        distinct = [asyncio.ensure_future(auth.check(USER, f"wrong-{i}")) for i in range(20)]
        await asyncio.sleep(0)
        known = await auth.check(USER, PASSWORD)  # while the queue is full
        return await asyncio.gather(*distinct), known

    verdicts, known = asyncio.run(run())
    assert known is True
    in_flight = 1 + MAX_WAITING_CHECKS  # the one running and those waiting
    assert verdicts == [False] * in_flight + [None] * (20 - in_flight)
    assert len(check.hashes) == 1 + in_flight


def test_failures_never_push_a_success_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(web_auth, "REMEMBERED_FAILURES", 8)
    check = CountingCheck()
    auth = BasicAuth(_users(), check)

    async def run() -> bool | None:
        await auth.check(USER, PASSWORD)
        for i in range(30):
            await auth.check(USER, f"wrong-{i}")
        return await auth.check(USER, PASSWORD)

    assert asyncio.run(run()) is True
    assert len(check.hashes) == 31  # the success was not checked a second time
