"""One /metrics fetch in flight at a time (exporter/daemon/engines/stall/readers.py
MetricsBody): readers that give up waiting leave it running for the next, so an
engine that answers late is asked once, not once per poll."""

from __future__ import annotations

import asyncio

import pytest

from exporter.daemon.engines.stall import readers
from exporter.daemon.engines.stall.readers import MetricsBody


class LateEngine:
    """A /metrics that answers only when told to, counting the requests it got."""

    def __init__(self) -> None:
        self.requests = 0
        self.answer = asyncio.Event()

    async def fetch(self) -> str:
        self.requests += 1
        await self.answer.wait()
        return f"# request {self.requests}\n"


def test_polls_that_give_up_leave_one_request_for_the_engine():
    async def scenario():
        engine = LateEngine()
        body = MetricsBody(engine.fetch)
        for _ in range(5):  # five polls, each giving up after 20 ms (the poller's 2 s)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.02):
                    await body.fresh()
        scrape = asyncio.ensure_future(body.recent())  # a scrape meanwhile joins it too
        await asyncio.sleep(0)
        engine.answer.set()
        joined, answered = await scrape, await body.fresh()
        return engine.requests, joined, answered

    requests, joined, answered = asyncio.run(scenario())
    # The five polls and the scrape shared the first request; the poll after its
    # answer asked anew, and was answered after the first was.
    assert joined.text == "# request 1\n" and answered.text == "# request 2\n"
    assert requests == 2
    assert answered.asked_at >= joined.answered_at


def test_a_fetch_never_answered_is_given_up_and_the_next_asks_anew(monkeypatch):
    monkeypatch.setattr(readers, "FETCH_GIVE_UP_SECONDS", 0.05)

    async def scenario():
        engine = LateEngine()
        body = MetricsBody(engine.fetch)
        with pytest.raises(TimeoutError):
            await body.fresh()  # waits the fetch out: given up after 50 ms
        engine.answer.set()
        fetched = await body.fresh()
        return engine.requests, fetched

    requests, fetched = asyncio.run(scenario())
    assert requests == 2 and fetched.text == "# request 2\n"


def test_closing_gives_up_the_fetch_in_flight():
    async def scenario():
        engine = LateEngine()
        body = MetricsBody(engine.fetch)
        waiting = asyncio.ensure_future(body.fresh())
        await asyncio.sleep(0.01)
        body.close()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return engine.requests

    assert asyncio.run(scenario()) == 1
