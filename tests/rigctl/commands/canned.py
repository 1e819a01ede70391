"""A canned exporter: an HTTP server on loopback that answers every GET with one
/api/health report, for rigctl health without a rig."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.loopback_server import serving
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

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as url:
        yield url
