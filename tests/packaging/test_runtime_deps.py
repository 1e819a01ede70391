"""The programs need only the declared dependencies: with grafanalib (the
`dashboards` extra) unimportable, every module of `exporter` imports, `rigctl doctor
--help` runs, and `python -m dashboards.generate` says in one line what it lacks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from rigdev.imports import modules

REPO = Path(__file__).resolve().parents[2]
# sys.modules[name] = None makes `import name` raise ImportError, as if uninstalled.
WITHOUT_GRAFANALIB = "import sys\nsys.modules['grafanalib'] = None\n"


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_GRAFANALIB + textwrap.dedent(code)],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def test_grafanalib_is_not_a_runtime_dependency() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("grafanalib")]
    assert [d for d in project["optional-dependencies"]["dashboards"]
            if d.startswith("grafanalib")]


def test_every_exporter_module_imports_without_grafanalib() -> None:
    names = sorted(n for n in modules() if n.split(".")[0] == "exporter"
                   and not n.endswith("__main__"))
    assert "exporter.rigctl.doctor.grafana" in names
    done = _python(f"""
        import importlib
        for name in {names!r}:
            importlib.import_module(name)
        print(len({names!r}))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(len(names))


def test_rigctl_doctor_runs_without_grafanalib() -> None:
    done = _python("""
        from exporter.rigctl import main
        sys.exit(main(["doctor", "--help"]))
    """)
    assert done.returncode == 0, done.stderr
    assert "--grafana" in done.stdout


def test_dashboards_generate_says_what_it_lacks() -> None:
    done = _python("""
        from dashboards.generate import main
        sys.exit(main(["--check"]))
    """)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("dashboards.generate: needs grafanalib: pip install "
                                   "'rig-telemetry[dashboards]'")
