"""A canned exporter: an HTTP server on loopback that answers every GET with one
/api/health report, for rigctl health without a rig."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.rig_readings import Rig, Watch, card

HOT = card("card2", clocks_hertz={"sclk": 1.4e9}, temperatures_celsius={"junction": 107.0})


def hot_report() -> dict:
    """card2 at 107 °C with its clock held down: the rig is critical."""
    return Watch().at(0, Rig(cards=[card("card1"), HOT])).to_json()


@contextmanager
def exporter_answering(report: dict, status: int = 200) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = json.dumps(report).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
