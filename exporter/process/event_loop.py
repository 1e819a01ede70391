"""The event loop the exporter serves on: uvloop where it is installed, else asyncio's.

uvloop (libuv, in C) costs less per socket wake-up than asyncio's selector loop. The
stream tap wakes once per frame it relays, and there uvloop took about a fifth off
the tap's CPU per frame at 16 streams (docs/performance.md#the-stream-tap).
The exporter behaves the same on both; uvloop is the optional `fast` extra.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop if it can be imported; None means asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main) on the loop above."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
