"""Ctrl-C in an event-loop command lands between callbacks, never inside one
(exporter/process/ctrl_c.py, docs/rigctl.md#ctrl-c)."""

from __future__ import annotations

import asyncio
import logging
import signal

import pytest

from exporter.process.ctrl_c import run_interruptible


def connect_interrupted_midway(cleaned: list[str]):
    """A socket callback's shape (`_sock_connect_cb`): it checks that the future is
    pending, Ctrl-C arrives, then it sets the result."""

    async def work() -> None:
        loop = asyncio.get_running_loop()
        connected = loop.create_future()

        def on_writable() -> None:
            if connected.done():
                return
            signal.raise_signal(signal.SIGINT)  # Python runs its handler here
            connected.set_result("connected")

        loop.call_soon(on_writable)
        try:
            await connected
            await asyncio.sleep(30)
        finally:
            cleaned.append("streams closed")

    return work()


def test_ctrl_c_inside_a_callback_cancels_after_it(caplog: pytest.LogCaptureFixture) -> None:
    cleaned: list[str] = []
    with caplog.at_level(logging.ERROR, logger="asyncio"), pytest.raises(KeyboardInterrupt):
        run_interruptible(connect_interrupted_midway(cleaned))
    assert cleaned == ["streams closed"]
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text


def test_asyncio_run_alone_breaks_the_callback(caplog: pytest.LogCaptureFixture) -> None:
    """The failure the module exists for, shown with asyncio.run itself."""
    cleaned: list[str] = []
    with caplog.at_level(logging.ERROR, logger="asyncio"), pytest.raises(KeyboardInterrupt):
        asyncio.run(connect_interrupted_midway(cleaned))
    assert "InvalidStateError" in caplog.text


def test_a_second_ctrl_c_stops_a_cleanup_that_hangs() -> None:
    async def hangs_on_cleanup() -> None:
        try:
            await asyncio.sleep(30)
        finally:
            asyncio.get_running_loop().call_later(0.05, signal.raise_signal, signal.SIGINT)
            await asyncio.sleep(30)

    async def first_ctrl_c_soon() -> None:
        asyncio.get_running_loop().call_later(0.05, signal.raise_signal, signal.SIGINT)
        await hangs_on_cleanup()

    with pytest.raises(KeyboardInterrupt):
        run_interruptible(first_ctrl_c_soon())


def test_work_that_ends_without_ctrl_c_returns_its_result() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert run_interruptible(answer()) == 42
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
