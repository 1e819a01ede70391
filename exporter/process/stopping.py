"""A stop is a stop: SIGTERM or SIGINT ends the process within STOP_DEADLINE_SECONDS,
whatever a read is doing (docs/deploy.md#stopping).

The orderly stop gives HTTP handlers and the tap's streams STOP_GRACE_SECONDS, closes
the sources, and leaves blocked sysfs reads behind (their threads are daemons,
exporter/daemon/sources/blocking.py). Anything else that could still hold the exit (a thread
of asyncio's default executor, which Python 3.11 joins without a timeout at the loop's
close and again at exit) meets the deadline: a watchdog thread, armed at the first
signal, logs what is still running and ends the process. So does a second signal.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

#: How long a stop waits for HTTP handlers, a scrape of a hung engine included, and
#: for streams through the tap, before it cancels them.
STOP_GRACE_SECONDS = 0.5
#: From the first SIGTERM or SIGINT to the end of the process, at the latest.
STOP_DEADLINE_SECONDS = 1.5
#: The exit status of a stop, the forced one too: a stop was asked for and done.
STOP_STATUS = 0


class StopWatch:
    """Armed at the first stop signal; `again` is the second signal."""

    def __init__(self, deadline_seconds: float = STOP_DEADLINE_SECONDS,
                 abandoned: Callable[[], list[str]] = list) -> None:
        self.deadline_seconds = deadline_seconds
        #: What a forced exit leaves behind, to name in its last line (blocked reads).
        self.abandoned = abandoned
        self._timer: threading.Timer | None = None

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def arm(self) -> None:
        why = f"the stop took over {self.deadline_seconds:g} s"
        self._timer = threading.Timer(self.deadline_seconds,
                                      lambda: exit_now(why, self.abandoned()))
        self._timer.daemon = True
        self._timer.start()

    def again(self, signal_name: str) -> None:
        exit_now(f"{signal_name} while stopping", self.abandoned())


def exit_now(why: str, abandoned: list[str]) -> None:
    """End the process at once, from any thread, naming what it leaves running."""
    left = abandoned + [f"thread {t.name}" for t in threading.enumerate()
                            if t is not threading.current_thread() and not t.daemon
                            and t is not threading.main_thread()]
    log.warning("%s: exiting now, abandoning %s", why, "; ".join(left) or "nothing")
    logging.shutdown()  # flush: os._exit skips it
    os._exit(STOP_STATUS)


def log_abandoned(left: list[str]) -> None:
    """At the end of an orderly stop: the reads it leaves blocked, or that all is closed."""
    for read in left:
        log.warning("stopped: abandoned %s", read)
    if not left:
        log.info("stopped: every source closed")
