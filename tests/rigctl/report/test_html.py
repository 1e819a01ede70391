"""`rigctl report --html`: the page is self-contained (nothing to fetch), and Debian's
Chromium, headless and offline, renders it: a screenshot of the expected size, not
blank, with the timeline's colours (critical and warning bars, blind grey) in it."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from exporter.rigctl import main
from exporter.rigctl.report.html import BLIND, CRITICAL, WARNING
from tests.rigctl.report import night as n

WIDTH, HEIGHT = 1200, 1600


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("html")
    with n.night(tmp) as history:
        out = io.StringIO()
        code = main(["report", "--prometheus", history.url, "--rig", "night",
                     "--start", str(history.start), "--end", str(history.end),
                     "--html", str(tmp / "night.html")], out)
        assert code == 0, out.getvalue()
    yield tmp / "night.html"


def test_the_page_fetches_nothing(page: Path) -> None:
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<svg" in text
    # Only the SVG's namespace names, which no browser fetches.
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", text))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, urls
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", text)
    for alert in ("RigDecodeStarvation", "RigGpuThermalDownclock", "RigCpuHot"):
        assert alert in text


def _rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


def _near(pixel: tuple[int, int, int], colour: tuple[int, int, int], tolerance: int = 12) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, colour, strict=True))


def test_chromium_renders_it(page: Path, tmp_path: Path) -> None:
    chromium = shutil.which("chromium")
    assert chromium, "chromium: ./setup.sh installs Debian's"
    shot = tmp_path / "shot.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--hide-scrollbars",
                    f"--user-data-dir={tmp_path / 'profile'}",
                    f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={shot}",
                    page.as_uri()], check=True, timeout=120, capture_output=True)
    image = Image.open(shot).convert("RGB")
    assert image.size == (WIDTH, HEIGHT)
    colours = image.getcolors(maxcolors=WIDTH * HEIGHT)  # (count, colour) pairs
    assert len(colours) > 50  # not blank: text, lines, bars

    def pixels(colour: tuple[int, int, int], tolerance: int = 12) -> int:
        return sum(count for count, c in colours if _near(c, colour, tolerance))

    for name, colour in (("critical", CRITICAL), ("warning", WARNING)):
        # A bar is a solid block: hundreds of pixels of its colour.
        assert pixels(_rgb(colour)) > 200, name
    # The blind span, half-transparent grey on white.
    assert pixels(tuple(round(255 - (255 - c) * 0.5) for c in _rgb(BLIND)), 6) > 1000


def test_without_matplotlib_html_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    import sys
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    monkeypatch.delitem(sys.modules, "exporter.rigctl.report.html", raising=False)
    code = main(["report", "--prometheus", "http://127.0.0.1:9", "--since", "1h",
                 "--html", str(tmp_path / "x.html")], io.StringIO())
    assert code == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rig-telemetry[html]" in err, err


def test_a_range_with_no_data_still_makes_a_page(tmp_path: Path) -> None:
    with n.night(tmp_path, hours=0.25, rigs=("quiet",)) as history:
        code = main(["report", "--prometheus", history.url, "--rig", "elsewhere",
                     "--start", str(history.start), "--end", str(history.end),
                     "--html", str(tmp_path / "empty.html"), "--check"], io.StringIO())
    assert code == 3
    text = (tmp_path / "empty.html").read_text()
    assert "UNKNOWN" in text and "<svg" in text
