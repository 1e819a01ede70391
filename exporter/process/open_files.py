"""The process's open-file limit: raised at start, then shared between the HTTP
connections and everything else.

systemd starts a service with a soft RLIMIT_NOFILE of 1024 under a far higher hard
limit and leaves raising it to the program, as Go programs do when they start
(docs/deploy.md#open-files). The exporter uses epoll, never select(), so descriptors
above 1024 are safe here, and it starts no programs that could mind.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

# Descriptors the HTTP connections never take: the sources' reads (one sysfs or /proc
# file at a time per source), the engines' and probes' HTTP connections, the stream
# taps' listeners and streams, the event loop, the log. An idle exporter with two
# cards and the host holds 16.
RESERVED_FOR_SOURCES = 128


def raise_soft_limit() -> int:
    """Raise the soft limit to the hard one; returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:  # a hard limit above the kernel's nr_open
        log.debug("open files: the soft limit stays at %d (hard %d): %s", soft, hard, exc)
        return soft
    log.debug("open files: soft limit raised from %d to the hard limit, %d", soft, hard)
    return hard


def connection_budget(max_connections: int) -> int:
    """Connections that fit under the soft limit with RESERVED_FOR_SOURCES kept back,
    and no more than `max_connections`."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    budget = max(1, min(max_connections, soft - RESERVED_FOR_SOURCES))
    if budget < max_connections:
        log.warning("web: at most %d connections, lowered to fit the open-file limit of %d "
                    "with %d kept for the sources (--web.max-connections %d)",
                    budget, soft, RESERVED_FOR_SOURCES, max_connections)
    else:
        log.debug("web: at most %d connections (open-file limit %d)", budget, soft)
    return budget
