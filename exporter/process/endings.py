"""How the command-line programs (`rig-exporter`, `rigctl`) end: in at most one
line on stderr and a documented exit status, never a traceback.

- A bad flag: argparse's error as one line, without the usage (`OneLineErrors`).
- Ctrl-C: one line, `PROG: interrupted` or what the command says it undid
  (`Interrupted`), and exit status 130.
- A closed pipe (`rigctl health | head -1`): no message. A command that ends by
  itself keeps its own exit status: what it could not print is dropped
  (`ReaderOut`). One that runs until stopped (`--watch`, the demo, the simulated
  rig) stops at its next flush and exits 141, which is 128 + SIGPIPE, what the
  shell reports for any program a closed pipe ends; `Say` lets it notice from
  any task. stdout then points at /dev/null, so that Python's own flush at exit
  does not fail again, as
  https://docs.python.org/3/library/signal.html#note-on-sigpipe recommends.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn, TextIO, cast

EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE

# Rows of the exit status table in each program's --help (indented by two).
INTERRUPTED_HELP = f"{EXIT_INTERRUPTED}  interrupted (Ctrl-C), after one line on stderr"
CLOSED_PIPE_HELP = (f"{EXIT_CLOSED_PIPE}  its reader closed the pipe (| head -1) while it ran"
                    " until stopped\n       (--watch, demo, sim): it stops quietly; a command"
                    " that ends by\n       itself keeps its own status")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, after the command undid what it had started; str() is the line to print."""


class OneLineErrors(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line and exit `usage_status`."""

    usage_status = 2

    def error(self, message: str) -> NoReturn:
        self.exit(self.usage_status, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def run_guarded(prog: str, work: Callable[[TextIO], int], out: TextIO | None = None) -> int:
    """Run `work` (a command's body: given where to write, it returns its exit
    status) and end as the module docstring says. `out` defaults to stdout."""
    reader = ReaderOut(out or sys.stdout)
    try:
        status = work(cast(TextIO, reader))
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_CLOSED_PIPE
    except KeyboardInterrupt as interrupt:
        line = str(interrupt) if isinstance(interrupt, Interrupted) else f"{prog}: interrupted"
        print(line, file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    with contextlib.suppress(BrokenPipeError):
        reader.flush()  # here, not at exit: a closed pipe surfaces inside the guard
    return status


class ReaderOut:
    """What a command writes to: `stream`, until its reader closes the pipe. From
    then on writes are dropped and every flush raises BrokenPipeError, so that a
    command that ends by itself finishes, and one that flushes as it goes (a
    long-running one) stops."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self.stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self.stream.flush()
                return
            except BrokenPipeError:
                self._gone()
        raise BrokenPipeError("the reader closed the pipe")

    def isatty(self) -> bool:
        return self.stream.isatty()

    def _gone(self) -> None:
        self.reader_gone = True
        if self.stream is sys.stdout:
            _discard_stdout()


def _discard_stdout() -> None:
    # Not a real file descriptor (a test's capture): nothing to redirect.
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class Say:
    """Prints whole lines for a long-running command. Once its reader has closed
    the pipe it prints nothing more and calls `on_closed` (once), so the command
    can stop what it started; the command then raises BrokenPipeError for
    `run_guarded`, from the place where it stopped (`raise_if_closed`)."""

    def __init__(self, out: TextIO, on_closed: Callable[[], None] = lambda: None) -> None:
        self.out = out
        self.on_closed = on_closed
        self.closed = False

    def __call__(self, line: str) -> None:
        if self.closed:
            return
        try:
            print(line, file=self.out, flush=True)
        except BrokenPipeError:
            self.closed = True
            self.on_closed()

    def raise_if_closed(self) -> None:
        if self.closed:
            raise BrokenPipeError("the reader closed the pipe")
