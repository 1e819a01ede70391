"""A socketserver (http.server's included) bound to loopback, served on a daemon thread
for the length of a `with`: the canned exporters and Prometheus of the rigctl tests."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def serving(server: socketserver.TCPServer) -> Iterator[str]:
    """Yields the server's base URL; shuts it down and closes its socket after."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
