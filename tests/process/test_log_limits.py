"""exporter/process/log_limits.py on a clock the test moves: what is told, what is counted."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterator

import pytest

from exporter.daemon.snapshot import SourceError, SourceRunner
from exporter.process import log_limits
from exporter.process.log_limits import (
    MAX_CHANGES_PER_INTERVAL,
    MAX_LINE_CHARS,
    MAX_MESSAGE_CHARS,
    CappedFormatter,
    Conditions,
    Events,
    RequestErrors,
    kind_of,
    shorten,
)
from tests.support.clock import FakeClock as Clock

HOUR = 3600.0


@pytest.fixture
def clock() -> Clock:
    return Clock()


class Lines:
    """The records the test logged so far (caplog keeps one list per test phase)."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog

    def __len__(self) -> int:
        return len(self.caplog.records)

    def __getitem__(self, index: int) -> logging.LogRecord:
        return self.caplog.records[index]

    def __iter__(self) -> Iterator[logging.LogRecord]:
        return iter(self.caplog.records)


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture) -> Lines:
    caplog.set_level(logging.DEBUG, logger="test.limits")
    return Lines(caplog)


@pytest.fixture(autouse=True)
def hourly() -> Iterator[None]:
    log_limits.set_repeat_interval(HOUR)
    yield
    log_limits.set_repeat_interval(log_limits.REPEAT_INTERVAL_SECONDS)


def conditions(clock: Clock) -> Conditions:
    return Conditions(logging.getLogger("test.limits"), down="{subject} down: {message}",
                      up="{subject} recovered", clock=clock)


def garbage(rng: random.Random) -> str:
    """An engine's HTTP 500 body, different bytes each time, as fetch.py words it."""
    head = rng.randbytes(200).decode("utf-8", "replace")
    return f"GET http://127.0.0.1:30000/metrics: HTTP 500 {head!r}"


def test_a_failure_that_goes_on_is_told_once_then_counted_once_an_interval(
        clock: Clock, lines: Lines) -> None:
    told = conditions(clock)
    for _ in range(240):  # an hour of 15 s scrapes
        told.failed("engine/main", "HTTP 500")
        clock.now += 15
    assert [r.getMessage() for r in lines] == ["engine/main down: HTTP 500"]
    told.failed("engine/main", "HTTP 500")
    assert lines[-1].getMessage() == ("engine/main down: HTTP 500 "
                                      "(again, 239 times in the last 60 min)")
    assert len(lines) == 2


def test_an_error_whose_bytes_change_each_scrape_is_one_failure(
        clock: Clock, lines: Lines) -> None:
    told, rng = conditions(clock), random.Random(6)
    for _ in range(1000):
        told.failed("engine/main", garbage(rng))
        clock.now += 1
    assert len(lines) == 1
    assert len(lines[0].getMessage()) <= MAX_MESSAGE_CHARS


def test_each_change_of_state_is_told_and_a_recurrence_after_recovery_too(
        clock: Clock, lines: Lines) -> None:
    told = conditions(clock)
    told.failed("card1: gpu_busy_percent", "Input/output error")
    clock.now += 30
    told.ok("card1: gpu_busy_percent")
    clock.now += 5 * HOUR
    told.failed("card1: gpu_busy_percent", "Input/output error")
    assert [r.getMessage() for r in lines] == [
        "card1: gpu_busy_percent down: Input/output error",
        "card1: gpu_busy_percent recovered after 30 s",
        "card1: gpu_busy_percent down: Input/output error",
    ]
    assert [r.levelno for r in lines] == [logging.WARNING, logging.INFO, logging.WARNING]


def test_another_reason_while_down_is_a_change(clock: Clock,
                                              lines: Lines) -> None:
    told = conditions(clock)
    told.failed("gpu", "cannot list /sys/class/drm: Permission denied")
    told.failed("gpu", "no answer within 8 s")
    assert len(lines) == 2


def test_a_flapping_subject_is_bounded_and_its_last_word_is_the_state_now(
        clock: Clock, lines: Lines) -> None:
    told = conditions(clock)
    for _ in range(1000):
        told.failed("host", "HTTP 500")
        clock.now += 1
        told.ok("host")
        clock.now += 1
    assert len(lines) == MAX_CHANGES_PER_INTERVAL
    clock.now += HOUR
    told.ok("host")  # still fine, an hour on: one line says how much went untold
    assert len(lines) == MAX_CHANGES_PER_INTERVAL + 1
    assert lines[-1].getMessage().startswith("host recovered (")
    assert "not logged: flapping" in lines[-1].getMessage()


def test_a_traceback_at_most_once_per_type_and_interval(
        clock: Clock, lines: Lines) -> None:
    told = conditions(clock)
    for index in range(100):
        try:
            raise ValueError(f"bad value {index}")
        except ValueError as exc:
            told.failed("gpu", str(exc), kind="ValueError", exc=exc)
        clock.now += 1
    assert sum(r.exc_info is not None for r in lines) == 1
    clock.now += HOUR
    told.failed("gpu", "bad value", kind="ValueError", exc=ValueError("bad value"))
    assert lines[-1].exc_info is not None and "again, 99 times" in lines[-1].getMessage()


def test_events_one_line_per_kind_per_interval(clock: Clock,
                                               lines: Lines) -> None:
    events = Events(logging.getLogger("test.limits"), clock=clock)
    for index in range(500):
        events("BadStatusLine" if index % 2 else "LineTooLong", f"bad request {index}")
    assert len(lines) == 2
    clock.now += HOUR
    events("LineTooLong", "bad request")
    assert "this kind again, 249 times in the last 60 min" in lines[-1].getMessage()


def test_shorten_cuts_with_a_marker_and_keeps_one_line() -> None:
    text = shorten("x\n" * 1000)
    assert len(text) <= MAX_MESSAGE_CHARS and "\n" not in text
    assert text.endswith("more characters cut]")
    assert shorten("short") == "short"


def test_the_kind_of_a_message_leaves_out_what_changes() -> None:
    rng = random.Random(1)
    assert len({kind_of(garbage(rng)) for _ in range(100)}) == 1
    assert kind_of("no answer within 8 s") == kind_of("no answer within 2.5 s")
    assert kind_of("HTTP 500 'a'") != kind_of("body cut short ('a')")


def test_the_formatter_caps_every_line_a_traceback_included() -> None:
    formatter = CappedFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        raise RuntimeError("y" * 5000)
    except RuntimeError as exc:
        record = logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1,
                                   "%s\nsecond line", ("z" * 5000,),
                                   (type(exc), exc, exc.__traceback__))
    first, *traceback = formatter.format(record).split("\n")
    assert first.endswith("more characters cut]")  # the message is one line, cut
    assert traceback[0] == "Traceback (most recent call last):"
    assert max(len(line) for line in [first, *traceback]) <= MAX_LINE_CHARS


def test_aiohttp_bad_requests_become_one_short_line_per_kind(
        caplog: pytest.LogCaptureFixture) -> None:
    from aiohttp.http_exceptions import BadStatusLine, LineTooLong

    gate = RequestErrors()
    caplog.set_level(logging.DEBUG)
    passed = []
    for index in range(300):
        exc: Exception = (BadStatusLine(f"GET{index}") if index % 2
                          else LineTooLong("Status line is too long", "8190", "9000"))
        record = logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1,
                                   "Error handling request from %s", ("127.0.0.1",),
                                   (type(exc), exc, None))
        passed.append(gate.filter(record))
    assert not any(passed)  # aiohttp's own lines, tracebacks and all, are dropped
    summaries = [r for r in caplog.records if r.name == "exporter.http"]
    assert len(summaries) == 2
    assert all(r.exc_info is None for r in summaries)
    assert all("bad request from 127.0.0.1: HTTP 400" in r.getMessage() for r in summaries)


class Broken:
    """A source with a bug: a different ValueError each scrape."""

    name = "host"

    def __init__(self) -> None:
        self.calls = 0

    async def read(self) -> object:
        self.calls += 1
        raise ValueError(f"invalid literal for int() with base 10: '{self.calls}x'")


def test_a_source_that_raises_each_scrape_logs_one_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    runner = SourceRunner([Broken()], deadline_seconds=1.0)

    async def scrapes() -> None:
        for _ in range(200):
            await runner.snapshot()

    with caplog.at_level(logging.INFO):
        asyncio.run(scrapes())
    # The exporter's own lines: a worker's earlier test may leave an HTTP client task
    # that asyncio reports when the garbage collector meets it here (seen once).
    records = [r for r in caplog.records if r.name.startswith("exporter")]
    assert len(records) == 1
    assert records[0].exc_info is not None
    assert records[0].getMessage().startswith("source host down: ValueError: ")


def test_an_unreadable_source_says_so_again_after_recovery(
        caplog: pytest.LogCaptureFixture) -> None:
    class Flaky:
        name = "engine/main"
        failing = True

        async def read(self) -> object:
            if self.failing:
                raise SourceError("HTTP 500")
            return "ok"

    source = Flaky()
    runner = SourceRunner([source], deadline_seconds=1.0)

    async def scrapes() -> None:
        for failing in (True, False, True, True):
            source.failing = failing
            await runner.snapshot()

    with caplog.at_level(logging.INFO):
        asyncio.run(scrapes())
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == messages[2] == "source engine/main down: HTTP 500"
    assert messages[1].startswith("source engine/main recovered")
    assert len(messages) == 3


def test_a_bad_request_line_never_echoes_the_requests_bytes(
        caplog: pytest.LogCaptureFixture) -> None:
    from aiohttp.http_exceptions import LineTooLong

    secret = "Authorization: Basic " + "c2VjcmV0" * 2000
    exc = LineTooLong(repr(bytearray(secret.encode()[:100])) + "...", "8190")
    record = logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1,
                               "Error handling request from %s", ("127.0.0.1",),
                               (type(exc), exc, None))
    caplog.set_level(logging.DEBUG)
    RequestErrors().filter(record)
    assert "c2VjcmV0" not in caplog.text and "Got more than 8190 bytes" in caplog.text
