"""`rigctl health` output against a canned /api/health: table, colour, --json, --watch."""

from __future__ import annotations

import io
import json

import pytest

from exporter.rigctl import main
from tests.rigctl.commands.canned import exporter_answering, hot_report
from tests.support.rig_readings import validate


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_table_worst_first_when_not_a_terminal() -> None:
    out = io.StringIO()
    with exporter_answering(hot_report()) as url:
        assert main(["health", "--exporter", url], out) == 2
    text = out.getvalue()
    assert "\033[" not in text
    lines = text.splitlines()
    assert lines[0].startswith("rig CRIT:") and url in lines[0]
    assert lines[1].split() == ["STATUS", "CHECK", "ON", "VALUE", "THRESHOLD", "REASON"]
    assert lines[2].startswith("CRIT") and "gpu_thermal_downclock" in lines[2]
    assert "card2" in lines[2] and "junction 107 °C" in lines[2]


def test_coloured_on_a_terminal() -> None:
    out = Terminal()
    with exporter_answering(hot_report()) as url:
        main(["health", "--exporter", url], out)
    assert "\033[1;31mCRIT" in out.getvalue() and "\033[32mOK" in out.getvalue()


def test_json_is_the_report_and_validates() -> None:
    out = io.StringIO()
    with exporter_answering(hot_report()) as url:
        assert main(["health", "--exporter", url, "--json"], out) == 2
    report = json.loads(out.getvalue())
    validate(report)
    assert report["exporter"] == url


def test_watch_redraws_count_times() -> None:
    out = io.StringIO()
    with exporter_answering(hot_report()) as url:
        assert main(["health", "--exporter", url, "--watch", "0.05", "--count", "3"], out) == 2
    assert out.getvalue().count("rig CRIT:") == 3


def test_an_exporter_error_exits_3_naming_url_and_reason(
        capsys: pytest.CaptureFixture[str]) -> None:
    with exporter_answering({}, status=500) as url:
        assert main(["health", "--exporter", url]) == 3
    err = capsys.readouterr().err
    assert f"{url}/api/health" in err and "HTTP 500" in err


@pytest.mark.parametrize("argv", [["--exporter", "localhost:9842"], ["--watch", "0"],
                                  ["--count", "x"]])
def test_mistakes_name_the_flag(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["health", *argv])
    assert caught.value.code == 3
    assert f"argument {argv[0]}" in capsys.readouterr().err


@pytest.mark.parametrize("command", [[], ["health"], ["probe"]])
def test_help_says_what_an_example_and_the_exit_codes(
        capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([*command, "--help"])
    assert caught.value.code == 0
    text = capsys.readouterr().out
    assert "examples:" in text and "exit status" in text
    assert "rigctl " + (command[0] if command else "health") in text
