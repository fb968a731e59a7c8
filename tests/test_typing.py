"""Static checks as tests: ``mypy --strict`` on src/kant (pyproject ``[tool.mypy]``) and ruff on the
source, tests, benchmarks and tools. Each runs the tool as a subprocess and fails with its output;
the test is skipped only when the tool is not installed (``pip install -e '.[test]'`` installs both)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(module: str, *args: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    if done.returncode != 0:
        pytest.fail(f"{module} {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}",
                    pytrace=False)


@pytest.mark.slow  # (a minute on a clean checkout: under xdist it starts first)
def test_mypy_strict_is_clean() -> None:
    _run("mypy", "--config-file", "pyproject.toml", "src/kant")


def test_ruff_is_clean() -> None:
    _run("ruff", "check", "src", "tests", "bench", "tools")
