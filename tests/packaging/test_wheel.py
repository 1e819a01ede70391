"""The package as a user installs it: a wheel built from the checkout's files, installed
into a fresh virtual environment outside the checkout, and run from a directory outside
it, so that nothing can be imported from the checkout.

The fresh environment gets the wheel alone (`--no-deps`); its dependencies come from
this test's own environment through a .pth file written after the install, so nothing
is downloaded. That environment holds no copy of this package's modules (the editable
install's finder is activated by a .pth file of its own, which a path added this way
does not run), and the tests below check where each package was imported from.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.sim.scenarios import SCENARIOS
from rigdev.imports import closure, module_graph, modules
from tests.demo_process import demo_running, read_until
from tests.support.priority import NICED

pytestmark = pytest.mark.long_running(45)

REPO = Path(__file__).resolve().parents[2]
# The tour's first scenario that pages someone.
SCENARIO = "prefill-starves-decode"


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    site_packages: Path
    work: Path  # an empty directory outside the checkout, the commands' cwd
    env: dict[str, str]

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def run(self, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=cwd or self.work, env=self.env, capture_output=True,
                              text=True, timeout=120, check=False)


def _checkout_copy(destination: Path) -> Path:
    """The files a clone would have: tracked, or new and not ignored."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():  # not deleted from the work tree
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    assert not root.is_relative_to(REPO)
    source = _checkout_copy(root / "source")
    subprocess.run([*NICED, sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "--wheel-dir", str(root / "dist"),
                    str(source)], cwd=root, check=True, capture_output=True)
    (wheel,) = (root / "dist").glob("rig_telemetry-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([*NICED, sys.executable, "-m", "pip", "--python", python, "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)], cwd=root, check=True,
                   capture_output=True)
    site_packages = Path(subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    # After the install: pip must not take this environment's editable copy for one.
    ours = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    (site_packages / "dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    work = root / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return Installed(wheel, venv, site_packages, work, env)


def test_every_package_is_imported_from_the_wheel(installed: Installed) -> None:
    done = installed.run(installed.bin("python"), "-c",
                         "import alerts, dashboards, exporter\n"
                         "for m in (alerts, dashboards, exporter): print(m.__file__)")
    assert done.returncode == 0, done.stderr
    for path in map(Path, done.stdout.split()):
        assert path.is_relative_to(installed.site_packages), path
        assert not path.is_relative_to(REPO), path


def _run_by_users(found: dict[str, Path]) -> list[str]:
    """The modules a user runs: the console scripts, `python -m` of each package that has
    a `__main__`, every rigctl subcommand, both generators and the dashboards (loaded by
    file name)."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    return [*(target.partition(":")[0] for target in scripts.values()),
            *(name for name in found if name.endswith(".__main__")
              or name.startswith("exporter.rigctl.") or name.endswith(".dashboard")),
            "alerts.generate", "dashboards.generate"]


def test_the_wheel_holds_only_what_users_run(installed: Installed) -> None:
    """Every module in the wheel is imported by something a user runs: a module that
    only tests, benches or docs use belongs in tests/, bench/ or rigdev/."""
    with zipfile.ZipFile(installed.wheel) as wheel:
        shipped = {name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
                   for name in wheel.namelist() if name.endswith(".py")}
    found = modules()
    used = closure(_run_by_users(found), module_graph(found))
    assert "exporter.daemon.cli" in used and "exporter.sim.engine.scheduler" in used
    assert {name.split(".")[0] for name in shipped} == {"alerts", "dashboards", "exporter"}
    assert sorted(shipped - used) == []


def test_rig_exporter_help(installed: Installed) -> None:
    done = installed.run(installed.bin("rig-exporter"), "--help")
    assert done.returncode == 0, done.stderr
    assert "--web.listen-address" in done.stdout


def test_alerts_generate_writes_the_committed_rules_into_the_current_directory(
        installed: Installed, tmp_path: Path) -> None:
    done = installed.run(installed.bin("python"), "-m", "alerts.generate", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "rig-rules.yaml").read_text() == (
        REPO / "alerts" / "rig-rules.yaml").read_text()
    assert not (installed.site_packages / "alerts" / "rig-rules.yaml").exists()


def test_dashboards_generate_writes_the_committed_json_into_the_current_directory(
        installed: Installed, tmp_path: Path) -> None:
    done = installed.run(installed.bin("python"), "-m", "dashboards.generate", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    committed = sorted((REPO / "dashboards").glob("*.json"))
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in committed]
    for path in committed:
        assert (tmp_path / path.name).read_text() == path.read_text(), path.name
    assert not list((installed.site_packages / "dashboards").glob("*.json"))


def test_the_demo_plays_its_first_paging_scenario_to_the_page(installed: Installed) -> None:
    (expected,) = SCENARIOS[SCENARIO].expects
    with demo_running("--scenario", SCENARIO, rigctl=[installed.bin("rigctl")],
                      cwd=installed.work, env=installed.env) as demo:
        lines = read_until(demo, r"running \(pids [\d ]+\)", timeout=120)
        exporter_pid = re.search(r"pids (\d+)", lines[-1]).group(1)
        argv = Path(f"/proc/{exporter_pid}/cmdline").read_bytes().split(b"\0")
        assert argv[0].decode() == installed.bin("python"), argv
        lines += read_until(demo, rf"-> page FIRING {expected.alert} ", timeout=240)
        os.killpg(demo.pid, signal.SIGINT)
        output, _ = demo.communicate(timeout=30)
    assert demo.returncode == 130, "".join(lines) + output
    assert "Traceback" not in "".join(lines) + output
