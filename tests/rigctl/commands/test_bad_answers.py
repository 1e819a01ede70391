"""`rigctl health` against answers it cannot read, as a real process over real
sockets: each ends in one line naming the URL and what was wrong, exit 3
(unknown), never a traceback; and --timeout bounds the whole request, a body
dribbled a byte at a time included."""

from __future__ import annotations

import json
import socket
import socketserver
import time
from collections.abc import Iterator

import pytest

from tests.rigctl.commands.canned import hot_report
from tests.rigctl.commands.conftest import RIGCTL, bash
from tests.support.loopback_server import serving

pytestmark = pytest.mark.long_running(11)

UNKNOWN = 3


def http(body: bytes, status: str = "200 OK", length: int | None = None) -> bytes:
    size = len(body) if length is None else length
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\nConnection: close\r\n\r\n").encode() + body


def report_with(**changes: object) -> bytes:
    return json.dumps({**hot_report(), **changes}).encode()


def first_check_with(**changes: object) -> bytes:
    report = hot_report()
    report["checks"] = [{**report["checks"][0], **changes}]
    return json.dumps(report).encode()


#: Case name -> the bytes the server sends, and words the error line must hold.
ANSWERS: dict[str, tuple[bytes, str]] = {
    "empty-object": (http(b"{}"), "no 'status'"),
    "list": (http(b"[]"), "not an object"),
    "null": (http(b"null"), "null"),
    "number": (http(b"42"), "not an object"),
    "status-only": (http(b'{"status":"ok"}'), "no 'time'"),
    "check-without-keys": (http(report_with(checks=[{}])), "checks[0] has no 'name'"),
    "string-time": (http(report_with(time="yesterday")), "time"),
    "nan-value": (http(first_check_with(value=float("nan"))), "NaN"),
    "infinite-time": (http(b'{"status":"ok","time":Infinity,"checks":[]}'), "Infinity"),
    "huge-time": (http(report_with(time=1e300)), "time"),
    "checks-not-a-list": (http(report_with(checks={"a": 1})), "checks"),
    "labels-not-strings": (http(first_check_with(labels={"engine": 1})), "labels"),
    "deep-nesting": (http(b"[" * 100_000 + b"]" * 100_000), "nested too deep"),
    "truncated-body": (http(b'{"status":"ok","ti', length=400), "HTTP"),
    "not-http": (b"SSH-2.0-OpenSSH_9.2\r\n", "not a valid HTTP answer"),
    "not-json": (http(b"<html>hello</html>"), "not JSON"),
    "server-error": (http(b"oops", status="500 Internal Server Error"), "HTTP 500"),
}


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            request += chunk
        case = request.split(b" ", 2)[1].decode().strip("/").split("/")[0]
        if case == "dribble":
            self.request.sendall(http(b"", length=200))  # the headers, then a byte a second
            for byte in report_with()[:200]:
                time.sleep(1.0)
                try:
                    self.request.sendall(bytes([byte]))
                except OSError:
                    return
            return
        with_socket_closed_after(self.request, ANSWERS[case][0])


def with_socket_closed_after(sock: socket.socket, answer: bytes) -> None:
    try:
        sock.sendall(answer)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture(scope="module")
def bad_server() -> Iterator[str]:
    with serving(_Server(("127.0.0.1", 0), _Handler)) as url:
        yield url


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_a_bad_answer_is_one_line_and_unknown(bad_server: str, case: str) -> None:
    url = f"{bad_server}/{case}"
    ended = bash(f"{RIGCTL} health --exporter {url} --timeout 5", timeout=60)
    assert ended.status == UNKNOWN, ended
    assert "Traceback" not in ended.err, ended.err
    assert len(ended.err_lines) == 1, ended.err
    line = ended.err_lines[0]
    assert f"{url}/api/health" in line
    assert ANSWERS[case][1] in line, line
    assert ended.out == ""


def test_watch_goes_on_after_a_bad_answer(bad_server: str) -> None:
    ended = bash(f"{RIGCTL} health --exporter {bad_server}/null --watch 0.1 --count 3",
                 timeout=60)
    assert ended.status == UNKNOWN, ended
    assert "Traceback" not in ended.err
    assert len(ended.err_lines) == 3, ended.err


def test_timeout_bounds_the_whole_request(bad_server: str) -> None:
    """A body dribbled at a byte a second never trips a per-read timeout of 3 s;
    before, it held rigctl for the whole body (200 s here)."""
    started = time.monotonic()
    ended = bash(f"{RIGCTL} health --exporter {bad_server}/dribble --timeout 3", timeout=120)
    took = time.monotonic() - started
    assert ended.status == UNKNOWN, ended
    assert "no whole answer within 3 s" in ended.err, ended.err
    assert len(ended.err_lines) == 1, ended.err
    # The bound is the deadline plus the interpreter's start-up, far below the 200 s
    # the dribble lasts: a correctness bound, not a speed target.
    assert took < 60, took


@pytest.mark.parametrize("case", ["null", "not-http", "truncated-body"])
def test_probe_and_bench_read_a_bad_engine_as_one_line(bad_server: str, case: str) -> None:
    """The probe's verdict is its documented exit 2 (the probe failed) with the reason on
    its verdict line; bench cannot start its experiment: exit 3, one line."""
    url = f"{bad_server}/{case}"
    probe = bash(f"{RIGCTL} probe --engine {url} --timeout 3", timeout=60)
    assert probe.status == 2, probe
    assert "Traceback" not in probe.err + probe.out
    assert f"probe {url}: FAILED" in probe.out.splitlines()[0]
    bench = bash(f"{RIGCTL} bench starvation --engine {url} --label x", timeout=60)
    assert bench.status == UNKNOWN, bench
    assert "Traceback" not in bench.err + bench.out
    assert len(bench.err_lines) == 1 and url in bench.err, bench.err
