"""What the owner writes, read and checked once: the TOML file, and a table of it
checked by msgspec against its declared type (exporter/config.py's structs, the
thresholds' table), msgspec's first refusal told in the owner's words: the key
(by its path), the value and a reason such as "must be greater than 0". Each
caller words the line its own way around `BadValue`.
"""

from __future__ import annotations

import math
import re
import tomllib
from os import PathLike
from typing import Any

import msgspec
from msgspec import inspect

#: The largest float: a bound that refuses inf, as msgspec takes no infinite bound.
FINITE = 1.7976931348623157e308
#: The value of a required key that is missing.
ABSENT = None


class BadValue(ValueError):
    """Why a value cannot be used, in words that follow its key and value: "must be
    a number". `path` is where the key is (names and list indexes), `value` what it
    holds; `unknown` names a key the table has no field for, `known` those it has."""

    def __init__(self, reason: str, path: tuple[str | int, ...] = (), value: object = ABSENT,
                 unknown: bool = False, known: tuple[str, ...] = ()) -> None:
        super().__init__(reason)
        self.path, self.value, self.unknown, self.known = path, value, unknown, known


def read_toml(path: str | PathLike[str]) -> dict[str, Any]:
    """The TOML file at `path`. Raises BadValue saying why it cannot be read."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise BadValue(exc.strerror or str(exc)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise BadValue(f"not valid TOML: {exc}") from exc


def converted(raw: Any, kind: type) -> Any:
    """`raw` (changed in place: make a copy) as a `kind`, or the BadValue of its first
    bad key. An int key given a whole float (`expected_cards = 2.0`) takes it."""
    while True:  # once more per whole float met
        try:
            return msgspec.convert(raw, kind, strict=True)
        except msgspec.ValidationError as exc:
            refusal = _refusal(str(exc), raw, kind)
            if refusal is not None:
                raise refusal from None


_AT = re.compile(r"(?P<what>.*?)(?: - at `\$(?P<path>.*)`)?", re.DOTALL)
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_FIELD = re.compile(r"Object (contains unknown|missing required) field `(.*)`", re.DOTALL)


def _refusal(message: str, raw: Any, kind: type) -> BadValue | None:
    """The BadValue of msgspec's `message`; None when a whole float was made an int."""
    match = _AT.fullmatch(message)
    assert match is not None  # every string matches
    path = [n or int(i) for n, i in _STEP.findall(match["path"] or "")]
    if field := _FIELD.fullmatch(match["what"]):
        parent = _type_at(inspect.type_info(kind), path)[0]
        known = tuple(sorted(f.encode_name for f in getattr(parent, "fields", ())))
        unknown = field[1] == "contains unknown"
        value = _at(raw, [*path, field[2]]) if unknown else ABSENT
        reason = f"unknown key (known: {', '.join(known)})" if unknown else "is required"
        return BadValue(reason, (*path, field[2]), value, unknown, known)
    value = _at(raw, path)
    info, extra = _type_at(inspect.type_info(kind), path)
    if isinstance(info, inspect.IntType) and isinstance(value, float) and value.is_integer():
        _at(raw, path[:-1])[path[-1]] = int(value)
        return None
    return BadValue(extra.get("refused") or _reason(info, value), tuple(path), value)


def _reason(info: object, value: object) -> str:
    if isinstance(info, inspect.IntType | inspect.FloatType):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "must be a number"
        if not math.isfinite(value):
            return "must be a finite number"
        if isinstance(info, inspect.IntType) and isinstance(value, float):
            return "must be a whole number"
        if info.le is not None and info.le < FINITE and value > info.le:
            return f"must be at most {info.le:g}"
        return "must be greater than 0" if info.gt is not None else "must be 0 or more"
    if isinstance(info, inspect.BoolType):
        return "must be true or false"
    if isinstance(info, inspect.LiteralType):
        return f"must be one of {', '.join(map(str, choices(info)))}"
    if isinstance(info, inspect.VarTupleType | inspect.ListType):
        return "must be an array of tables"
    if isinstance(info, inspect.StructType | inspect.DataclassType):
        return "must be a table"
    return "must be a string"


#: A Literal's values in their declared order (msgspec's LiteralType sorts them).
DECLARED_ORDER: dict[frozenset, tuple] = {}


def choices(info: inspect.LiteralType) -> tuple:
    return DECLARED_ORDER.get(frozenset(info.values), tuple(info.values))


def _type_at(info: Any, path: list[str | int]) -> tuple[Any, dict[str, Any]]:
    """The type at `path` below `info`, and the Meta extras of the field it ends on."""
    extra: dict[str, Any] = {}
    for step in path:
        info, extra = _bare(info)[0], {}
        if isinstance(step, int):
            info = getattr(info, "item_type", None)
            continue
        found = [f.type for f in getattr(info, "fields", ()) if f.encode_name == step]
        if not found:
            return None, {}
        info, extra = _bare(found[0])
    return _bare(info)[0], extra


def _bare(info: Any) -> tuple[Any, dict[str, Any]]:
    extra: dict[str, Any] = {}
    while isinstance(info, inspect.Metadata):
        extra = {**(info.extra or {}), **extra}
        info = info.type
    return info, extra


def _at(raw: Any, path: list[str | int]) -> Any:
    """The value at `path`; ABSENT where msgspec's path cannot be followed (a key
    that is no plain name)."""
    try:
        for step in path:
            raw = raw[step]
    except (LookupError, TypeError):
        return ABSENT
    return raw
