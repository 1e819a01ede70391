"""Log lines that help: each change of state told once, repeats counted, no line too long.

A source that fails every scrape (Prometheus every 15 s, fifty scrapers hundreds of
times a second) must not write a line each time, and a failure that comes back hours
later must not be silent. `Conditions` keeps the state of each subject (a source, one
card file, one PSI line) and writes:

- each change of state at once: down, recovered, down for another reason, at most
  `MAX_CHANGES_PER_INTERVAL` per subject per interval (a flapping subject's further
  changes are counted and told in one line when the interval is over);
- a failure that goes on, once per interval, with its count
  ("... (again, 340 times in the last 60 min)");
- a traceback at most once per subject and exception type per interval.

The kind of a failure is what stays the same when it repeats: its exception's class,
or its message with the changing parts (quoted text, numbers) blanked, so an engine
whose error body differs each time is one failure, not a new one per scrape.
`Events` counts things that have no "fine" state (a bad HTTP request), one line per
kind per interval. `install` caps every line the process writes and summarises
aiohttp's per-request errors (docs/design.md#logs).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: How long a line about a repeating failure (or event kind) stands for its repeats:
#: `[log] repeat_interval_seconds` (exporter/config.py), set by `install`.
REPEAT_INTERVAL_SECONDS = 3600.0
#: Changes of state told per subject per interval before a flapping one is only counted.
MAX_CHANGES_PER_INTERVAL = 10
#: A message longer than this is cut, with a marker saying how much went.
MAX_MESSAGE_CHARS = 300
#: No line the process writes is longer: the timestamp, level and logger name, then
#: the message; and each line of a traceback.
MAX_LINE_CHARS = 400
#: Kinds an `Events` remembers; further kinds count under "other".
MAX_EVENT_KINDS = 64

_interval_seconds = REPEAT_INTERVAL_SECONDS
_QUOTED = re.compile(r"""b?'(?:[^'\\]|\\.)*(?:'|$)|b?"(?:[^"\\]|\\.)*(?:"|$)""")
_NUMBER = re.compile(r"0x[0-9a-fA-F]+|\d+(?:\.\d+)?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ECHOED_BYTES = re.compile(r"(?:bytearray\()?b['\"]")


def set_repeat_interval(seconds: float) -> None:
    global _interval_seconds
    _interval_seconds = seconds


def repeat_interval() -> float:
    return _interval_seconds


def shorten(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` on one line (control characters escaped) and at most `limit` characters."""
    text = _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)
    if len(text) <= limit:
        return text
    marker = f"... [{len(text) - limit} more characters cut]"
    return text[: max(0, limit - len(marker))] + marker


def kind_of(message: str) -> str:
    """The message with its quoted text and numbers blanked: the same failure, whatever
    bytes or counts it carries this time."""
    return _NUMBER.sub("N", _QUOTED.sub("'…'", message))[:120]


def span(seconds: float) -> str:
    """A duration as a person reads it: 45 s, 12 min, 3 h."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


@dataclass
class _Subject:
    kind: str | None = None  # None: fine
    message: str = ""
    since: float = 0.0
    told_at: float = float("-inf")  # the last line about its current state
    repeats: int = 0  # failures of the current kind not told
    window_at: float = float("-inf")
    changes: int = 0  # changes told in the window
    untold_changes: int = 0
    traced: dict[str, float] = field(default_factory=dict)  # exception type -> when


class Conditions:
    """The state of the subjects of one logger, told as changes and counted repeats.

    `down` and `up` are the lines' templates, with {subject} and {message}.
    """

    def __init__(self, logger: logging.Logger, down: str = "{subject}: {message}",
                 up: str = "{subject}: fine again", level: int = logging.WARNING,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.down = down
        self.up = up
        self.level = level
        self.clock = clock
        self._subjects: dict[str, _Subject] = {}

    def failed(self, subject: str, message: str, kind: str | None = None,
               exc: BaseException | None = None) -> None:
        """`subject` failed; `kind` defaults to the message's (see kind_of)."""
        now = self.clock()
        state = self._subjects.setdefault(subject, _Subject())
        self._flush_untold(state, now, subject)
        kind = kind or kind_of(message)
        line = self.down.format(subject=subject, message=message)
        if kind == state.kind:
            state.message = message
            if now - state.told_at < _interval_seconds:
                state.repeats += 1
                return
            if state.repeats:
                line += (f" (again, {_times(state.repeats)} in the last "
                         f"{span(now - state.told_at)})")
            state.repeats = 0
            self._write(state, now, self.level, line, exc)
            return
        state.kind, state.message, state.since, state.repeats = kind, message, now, 0
        self._change(state, now, self.level, line, exc)

    def ok(self, subject: str) -> None:
        """`subject` works (again); a no-op for one that never failed."""
        state = self._subjects.get(subject)
        if state is None:
            return
        now = self.clock()
        self._flush_untold(state, now, subject)
        if state.kind is None:
            return
        line = self.up.format(subject=subject) + f" after {span(now - state.since)}"
        if state.repeats:
            line += f" ({state.repeats} more failures not logged)"
        state.kind, state.repeats = None, 0
        self._change(state, now, logging.INFO, line, None)

    def _change(self, state: _Subject, now: float, level: int, line: str,
                exc: BaseException | None) -> None:
        if now - state.window_at >= _interval_seconds:
            state.window_at, state.changes = now, 0
        if state.changes < MAX_CHANGES_PER_INTERVAL:
            state.changes += 1
            self._write(state, now, level, line, exc)
        else:
            state.untold_changes += 1

    def _flush_untold(self, state: _Subject, now: float, subject: str) -> None:
        """After an interval of flapping, one line: how many changes went untold and
        the state now, so that the last line about a subject is never out of date."""
        if not state.untold_changes or now - state.window_at < _interval_seconds:
            return
        if state.kind is None:
            line = self.up.format(subject=subject)
        else:
            line = self.down.format(subject=subject, message=state.message)
        self._write(state, now, self.level,
                    f"{line} ({state.untold_changes} more changes of state in the last "
                    f"{span(now - state.window_at)} not logged: flapping)", None)
        state.untold_changes, state.window_at, state.changes = 0, now, 1

    def _write(self, state: _Subject, now: float, level: int, line: str,
               exc: BaseException | None) -> None:
        state.told_at = now
        exc_info = None
        if exc is not None:
            name = type(exc).__name__
            if now - state.traced.get(name, float("-inf")) >= _interval_seconds:
                state.traced[name] = now
                exc_info = exc
        self.logger.log(level, "%s", shorten(line), exc_info=exc_info)


@dataclass
class _Kind:
    told_at: float
    repeats: int = 0


class Events:
    """Events with no "fine" state (a bad request): one line per kind per interval,
    the next one saying how many came in between."""

    def __init__(self, logger: logging.Logger, level: int = logging.WARNING,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.level = level
        self.clock = clock
        self._kinds: dict[str, _Kind] = {}

    def __call__(self, kind: str, message: str, exc: BaseException | None = None,
                 level: int | None = None) -> None:
        now = self.clock()
        if kind not in self._kinds and len(self._kinds) >= MAX_EVENT_KINDS:
            kind = "other"
        seen = self._kinds.get(kind)
        if seen is not None and now - seen.told_at < _interval_seconds:
            seen.repeats += 1
            return
        if seen is not None and seen.repeats:
            message += (f" (this kind again, {_times(seen.repeats)} in the last "
                        f"{span(now - seen.told_at)})")
        self._kinds[kind] = _Kind(now)
        self.logger.log(self.level if level is None else level, "%s", shorten(message),
                        exc_info=exc)


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


class RequestErrors(logging.Filter):
    """aiohttp's "Error handling request" lines, one per bad request with a traceback,
    become one short line per kind of error and interval.

    A malformed request (aiohttp's HttpProcessingError: bad request line, header,
    length) is the client's doing: no traceback. Anything else is a handler's bug and
    keeps its traceback, once per kind and interval.
    """

    def __init__(self) -> None:
        super().__init__()
        self._events = Events(logging.getLogger("exporter.http"))

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not str(record.msg).startswith("Error handling request"):
            return True
        from aiohttp.http_exceptions import HttpProcessingError

        remote = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        name = type(exc).__name__
        if isinstance(exc, HttpProcessingError):
            # Never the request's bytes, which aiohttp echoes after the first line or
            # as b'...': they may hold a password (an Authorization header).
            reason = _ECHOED_BYTES.split(str(exc.message).partition("\n")[0])[0].strip()
            self._events(name, f"bad request from {remote}: HTTP {exc.code}, {name}: {reason}",
                         level=min(record.levelno, logging.INFO))
        else:
            self._events(name, f"request from {remote} failed in its handler: {name}: {exc}",
                         exc, level=logging.ERROR)
        return False


class CappedFormatter(logging.Formatter):
    """The one formatter of the process: no line longer than MAX_LINE_CHARS, whoever
    logged it (aiohttp, pyrsmi, a traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        saved = record.msg, record.args
        record.msg, record.args = shorten(record.getMessage()), None
        try:
            text = super().format(record)
        finally:
            record.msg, record.args = saved
        return "\n".join(shorten(line, MAX_LINE_CHARS) for line in text.split("\n"))


def install(level: str, repeat_interval_seconds: float) -> None:
    """Configure the process's logging: one capped handler on stderr, aiohttp's
    per-request errors summarised, repeats told once per interval."""
    set_repeat_interval(repeat_interval_seconds)
    handler = logging.StreamHandler()
    handler.setFormatter(CappedFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.server").addFilter(RequestErrors())
