"""What the owner writes, read and checked once: the TOML file and its numbers.

The exporter's config (exporter/config.py) and the thresholds table
(exporter/thresholds.py, also read alone by the rule and dashboard generators)
both read a TOML file and check numbers in it. The checks live here; each caller
words the error its own way around `BadValue`'s reason (the key, the value).
Stdlib only, as exporter/thresholds.py.
"""

from __future__ import annotations

import math
import tomllib
from os import PathLike
from typing import Any


class BadValue(ValueError):
    """Why a value cannot be used, in words that follow its key and value: "must be
    a number"."""


def read_toml(path: str | PathLike[str]) -> dict[str, Any]:
    """The TOML file at `path`. Raises BadValue saying why it cannot be read."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise BadValue(exc.strerror or str(exc)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise BadValue(f"not valid TOML: {exc}") from exc


def checked_number(value: object, *, whole: bool = False, positive: bool = False,
                   at_most: float | None = None) -> int | float:
    """`value` if it is a finite number of 0 or more (more than 0 where `positive`),
    a whole one where `whole`, and at most `at_most`; else raises BadValue."""
    # bool is an int subclass; `enabled = true` given for a number is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadValue("must be a number")
    if not math.isfinite(value):
        raise BadValue("must be a finite number")
    if whole and not float(value).is_integer():
        raise BadValue("must be a whole number")
    if positive and value <= 0:
        raise BadValue("must be greater than 0")
    if value < 0:
        raise BadValue("must be 0 or more")
    if at_most is not None and value > at_most:
        raise BadValue(f"must be at most {at_most:g}")
    return value
