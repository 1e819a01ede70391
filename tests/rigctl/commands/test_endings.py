"""How every rigctl subcommand and rig-exporter ends, as real processes: into a
closed pipe (`| head -1`), on Ctrl-C, at an unreachable URL and on a bad flag.
Each ends in at most one line on stderr, never a traceback, with the exit
status its --help gives (exporter/process/endings.py)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from exporter.process.endings import EXIT_CLOSED_PIPE, EXIT_INTERRUPTED
from exporter.process.launch import free_port
from tests.rigctl.commands.conftest import ENV, REPO, RIG_EXPORTER, RIGCTL, Ended, bash

pytestmark = pytest.mark.long_running(40)

OK, CRITICAL, UNKNOWN = 0, 2, 3


def assert_one_line_at_most(ended: Ended) -> None:
    assert "Traceback" not in ended.err, ended.err
    assert len(ended.err_lines) <= 1, ended.err


def into_head(command: str, timeout: float = 120) -> Ended:
    ended = bash(f"{command} | head -1", timeout)
    assert_one_line_at_most(ended)
    assert len(ended.out.splitlines()) <= 1
    return ended


# --- a closed pipe -----------------------------------------------------------
# A command whose output was all written before head left keeps its own status;
# one still writing when head left ends with 141, quietly.

def test_health_into_head_keeps_its_verdict(critical_exporter: str) -> None:
    ended = into_head(f"{RIGCTL} health --exporter {critical_exporter}")
    assert ended.status == CRITICAL
    assert ended.out.startswith("rig CRIT:") and ended.err == ""


def test_health_watch_into_head_ends_quietly(critical_exporter: str) -> None:
    ended = into_head(f"{RIGCTL} health --exporter {critical_exporter} --watch 0.2")
    assert ended.status == EXIT_CLOSED_PIPE
    assert ended.out.startswith("rig CRIT:") and ended.err == ""


def test_health_of_an_unreachable_exporter_into_head() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    ended = into_head(f"{RIGCTL} health --exporter {url}")
    assert ended.status == UNKNOWN and ended.out == ""
    assert f"{url}/api/health" in ended.err and "refused" in ended.err.lower()


def test_probe_into_head(sim_engine: str) -> None:
    ended = into_head(f"{RIGCTL} probe --engine {sim_engine} --timeout 20")
    assert ended.status == OK, ended
    assert ended.out == f"probe {sim_engine}: ok\n" and ended.err == ""


@pytest.mark.parametrize("command", [
    "--help", "health --help", "probe --help", "demo --help", "demo --list", "bench --help",
    "bench starvation --help", "bench sweep --help", "bench report --help", "sim --help",
    "sim --list",
])
def test_short_output_into_head_exits_0(command: str) -> None:
    ended = into_head(f"{RIGCTL} {command}")
    assert ended.status == OK and ended.err == ""
    assert ended.out.strip()


def test_rig_exporter_help_into_head_exits_0() -> None:
    ended = into_head(f"{RIG_EXPORTER} --help")
    assert ended.status == OK and ended.out.startswith("usage: rig-exporter")


def test_sim_into_head_stops_the_rig_and_removes_its_files(tmp_path: Path) -> None:
    # gpu-missing at x60: a step every second or more, long after head has left.
    ended = into_head(f"{RIGCTL} sim --dir {tmp_path} --scenario gpu-missing --time-scale 60 "
                      "--exit-at-end")
    assert ended.status == EXIT_CLOSED_PIPE
    assert ended.out.startswith("simulated rig ready") and ended.err == ""
    assert list(tmp_path.iterdir()) == []


def test_demo_into_head_stops_what_it_started() -> None:
    ended = into_head(f"{RIGCTL} demo --no-monitoring --scenario healthy", timeout=180)
    assert ended.status == EXIT_CLOSED_PIPE
    assert "exporter" in ended.out and ended.err == ""


# --- Ctrl-C --------------------------------------------------------------------

@contextmanager
def started(command: str) -> Iterator[subprocess.Popen[str]]:
    """`command` in a session of its own, killed if the test leaves it running."""
    process = subprocess.Popen(command.split(), cwd=REPO, env=ENV, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()


def ctrl_c(process: subprocess.Popen[str], after_line: str, timeout: float = 120) -> Ended:
    """Once stdout has printed a line matching `after_line`, SIGINT to the process
    group, as a terminal sends it; then how the process ended."""
    assert process.stdout is not None
    seen = []
    deadline = time.monotonic() + timeout
    while not any(re.search(after_line, line) for line in seen):
        assert time.monotonic() < deadline and process.poll() is None, seen
        seen.append(process.stdout.readline())
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    ended = Ended(process.returncode, "".join(seen) + out, err)
    assert_one_line_at_most(ended)
    return ended


def test_ctrl_c_ends_health_watch_with_130(critical_exporter: str) -> None:
    with started(f"{RIGCTL} health --exporter {critical_exporter} --watch 0.2") as process:
        ended = ctrl_c(process, "^rig CRIT")
    assert ended.status == EXIT_INTERRUPTED
    assert ended.err == "rigctl health: interrupted\n"


def test_ctrl_c_ends_probe_with_130() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        silent.settimeout(60)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with started(f"{RIGCTL} probe --engine {url} --timeout 60") as process:
            connection, _ = silent.accept()  # the probe is under way
            with connection:
                os.killpg(process.pid, signal.SIGINT)
                out, err = process.communicate(timeout=60)
    ended = Ended(process.returncode, out, err)
    assert_one_line_at_most(ended)
    assert ended.status == EXIT_INTERRUPTED and ended.err == "rigctl probe: interrupted\n"


def test_ctrl_c_ends_the_demo_with_130_and_removes_its_files() -> None:
    with started(f"{RIGCTL} demo --no-monitoring --scenario healthy") as process:
        ended = ctrl_c(process, r"running \(pids")
    assert ended.status == EXIT_INTERRUPTED
    assert ended.err == "rigctl demo: stopped by Ctrl-C; everything it started is gone\n"
    directory = Path(re.search(r"files in (\S+)", ended.out).group(1))
    assert not directory.exists()


def test_ctrl_c_stops_rig_exporter_with_0() -> None:
    port = free_port()
    with started(f"{RIG_EXPORTER} --web.listen-address 127.0.0.1:{port} "
                 "--no-collector.gpu --no-collector.host") as process:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.1)
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=60)
    assert process.returncode == OK, err
    assert "Traceback" not in err and "stopping" in err
    assert err.splitlines()[-1].endswith("stopped: every source closed")


# --- unreachable URLs and bad flags --------------------------------------------

def test_an_unreachable_engine_is_named_in_one_line() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    probe = bash(f"{RIGCTL} probe --engine {url}")
    assert_one_line_at_most(probe)
    assert probe.status == CRITICAL  # the probe ran, and failed
    assert probe.out.splitlines()[0].startswith(f"probe {url}: FAILED") and probe.err == ""
    bench = bash(f"{RIGCTL} bench starvation --engine {url}")
    assert_one_line_at_most(bench)
    assert bench.status == UNKNOWN and url in bench.err and bench.out == ""


@pytest.mark.parametrize(("command", "status"), [
    (RIGCTL, UNKNOWN), (f"{RIGCTL} health", UNKNOWN), (f"{RIGCTL} probe", UNKNOWN),
    (f"{RIGCTL} demo", UNKNOWN), (f"{RIGCTL} bench", UNKNOWN),
    (f"{RIGCTL} bench starvation", UNKNOWN), (f"{RIGCTL} bench report", UNKNOWN),
    (f"{RIGCTL} sim", UNKNOWN),
    (RIG_EXPORTER, 2),  # as Prometheus' exporters do
])
def test_a_bad_flag_is_one_line(command: str, status: int) -> None:
    ended = bash(f"{command} --no-such-flag")
    assert_one_line_at_most(ended)
    assert ended.status == status and ended.out == ""
    assert re.fullmatch(r"\S+( \S+)*: error: .+ \(see .+ --help\)\n", ended.err), ended.err


@pytest.mark.parametrize("command", [
    "health", "probe", "demo", "bench", "bench starvation", "bench sweep", "bench report",
])
def test_help_gives_the_exit_status_of_ctrl_c_and_a_closed_pipe(command: str) -> None:
    ended = bash(f"{RIGCTL} {command} --help")
    table = ended.out[ended.out.rindex("exit status"):]
    assert f"{EXIT_INTERRUPTED}  interrupted (Ctrl-C)" in table
    assert f"{EXIT_CLOSED_PIPE}  its reader closed the pipe" in table


def test_sim_help_says_ctrl_c_stops_it_with_0() -> None:
    table = bash(f"{RIGCTL} sim --help").out.split("exit status:")[1]
    assert "0  stopped (Ctrl-C or SIGTERM)" in table and f"{EXIT_CLOSED_PIPE}  " in table
