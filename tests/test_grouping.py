"""The suite's own distribution: with the options pyproject.toml gives pytest, a file
whose tests share a module fixture runs whole on one worker and starts its fixture once,
and other tests spread over the workers. Run as a real pytest process on files made
here, with tests/conftest.py's grouping hook loaded as a plugin.

This guards a silent regression: pytest 9.2 made pytest-xdist 3.8's loadgroup a no-op
(pyproject.toml), and the end-to-end stack then started once per worker."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SHARED = '''
import os, pytest

@pytest.fixture(scope="module")
def stack():
    with open("starts.log", "a") as log:
        log.write(__name__ + " " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    yield

@pytest.mark.parametrize("n", range(6))
def test_uses_the_stack(stack, n):
    with open("runs.log", "a") as log:
        log.write(__name__ + " " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
'''

ALONE = '''
import os, pytest

@pytest.mark.parametrize("n", range(8))
def test_alone(n, tmp_path):
    with open("runs.log", "a") as log:
        log.write(__name__ + " " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
'''


def _addopts() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return shlex.split(config["tool"]["pytest"]["ini_options"]["addopts"])


def _workers(log: Path) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = defaultdict(list)
    for line in log.read_text().splitlines():
        module, worker = line.split()
        seen[module].append(worker)
    return seen


def test_a_shared_fixture_keeps_its_file_on_one_worker(tmp_path: Path) -> None:
    for name in ("test_stack_a", "test_stack_b"):
        (tmp_path / f"{name}.py").write_text(SHARED)
    (tmp_path / "test_alone.py").write_text(ALONE)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
         # Two workers show the grouping as well as the suite's four, at half the
         # start-up CPU (the last -n given wins).
         *_addopts(), "-n", "2", "-q", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "-n" in _addopts(), "the suite no longer runs on workers"

    starts, runs = _workers(tmp_path / "starts.log"), _workers(tmp_path / "runs.log")
    for module in ("test_stack_a", "test_stack_b"):
        assert len(starts[module]) == 1, f"{module}'s fixture started {starts[module]}"
        assert set(runs[module]) == set(starts[module]), runs[module]
        assert len(runs[module]) == 6
    assert len(runs["test_alone"]) == 8
    assert len(set(runs["test_alone"])) > 1, "tests without a shared fixture did not spread"
