"""One call in flight, shared by its waiters (exporter/process/in_flight.py)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from exporter.process.in_flight import InFlight, InFlightByKey


class Gate:
    """A call that counts its starts and ends when `open` is set."""

    def __init__(self) -> None:
        self.starts = 0
        self.open = asyncio.Event()

    async def __call__(self) -> int:
        self.starts += 1
        await self.open.wait()
        return self.starts


def test_waiters_share_one_call_and_the_next_starts_anew() -> None:
    async def run() -> tuple[list[int], int, int]:
        gate = Gate()
        shared = InFlight(gate)
        waiters = [asyncio.ensure_future(shared()) for _ in range(50)]
        await asyncio.sleep(0)
        assert shared.busy
        gate.open.set()
        got = await asyncio.gather(*waiters)
        assert not shared.busy
        return got, await shared(), gate.starts

    got, again, starts = asyncio.run(run())
    assert got == [1] * 50
    assert (again, starts) == (2, 2)


def test_a_waiter_that_gives_up_leaves_the_call_for_the_others() -> None:
    async def run() -> tuple[int, int]:
        gate = Gate()
        shared = InFlight(gate)
        impatient = asyncio.ensure_future(shared())
        await asyncio.sleep(0)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await impatient
        assert shared.busy  # still running, for the next waiter
        patient = asyncio.ensure_future(shared())
        gate.open.set()
        return await patient, gate.starts

    assert asyncio.run(run()) == (1, 1)


def test_cancel_ends_the_call_for_every_waiter() -> None:
    async def run() -> list[object]:
        shared = InFlight(Gate())
        waiters = [asyncio.ensure_future(shared()) for _ in range(3)]
        await asyncio.sleep(0)
        shared.cancel()
        return await asyncio.gather(*waiters, return_exceptions=True)

    assert all(isinstance(r, asyncio.CancelledError) for r in asyncio.run(run()))


def test_a_failure_reaches_its_waiters_and_unwaited_is_not_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    async def fails() -> None:
        await asyncio.sleep(0.01)
        raise ValueError("engine said no")

    async def run() -> None:
        shared = InFlight(fails)
        with pytest.raises(ValueError, match="engine said no"):
            await shared()
        gave_up = asyncio.ensure_future(shared())
        await asyncio.sleep(0)
        gave_up.cancel()
        await asyncio.sleep(0.05)  # the call fails with no waiter left

    asyncio.run(run())
    gc.collect()
    assert "never retrieved" not in caplog.text


def test_by_key_shares_per_key_and_forgets_a_key_once_ended() -> None:
    async def run() -> None:
        gates = {"a": Gate(), "b": Gate()}
        shared: InFlightByKey[str, int] = InFlightByKey()
        waiters = [asyncio.ensure_future(shared(k, gates[k])) for k in "aab"]
        await asyncio.sleep(0)
        assert len(shared) == 2 and "a" in shared
        for gate in gates.values():
            gate.open.set()
        assert await asyncio.gather(*waiters) == [1, 1, 1]
        assert len(shared) == 0
        assert [g.starts for g in gates.values()] == [1, 1]

    asyncio.run(run())


def test_by_key_forgets_a_run_cancelled_before_it_started() -> None:
    async def run() -> int:
        shared: InFlightByKey[str, int] = InFlightByKey()
        waiter = asyncio.ensure_future(shared("a", Gate()))
        await asyncio.sleep(0)  # the waiter has started the run: cancel it unstarted
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task() and task is not waiter:
                task.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        await asyncio.sleep(0)
        return len(shared)

    assert asyncio.run(run()) == 0
