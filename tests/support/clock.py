"""A clock the test turns by hand: `clock.now += 1.5`."""

from __future__ import annotations


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
