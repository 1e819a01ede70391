"""Verdicts that order themselves: the doctor's and the health checks' statuses, an
alert's state. Each is declared from the mildest member to the gravest, and its
`rank` is its place in that order, so the order is written once, in the class."""

from __future__ import annotations

from enum import StrEnum


class Ranked(StrEnum):
    """A StrEnum whose members are declared mildest first."""

    @property
    def rank(self) -> int:
        """0 for the mildest member, rising with gravity."""
        return list(type(self)).index(self)
