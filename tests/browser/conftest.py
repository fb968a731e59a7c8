"""Fixtures of the browser tests: Debian's Chromium driven headless by Playwright (its own browser
download is not used), a folder for screenshots (``test-artifacts/``, gitignored), and a real
``kant serve`` replaying a Philly slice on a manual clock.

The tests skip, saying why, only when no Chromium is installed (``tools/install-chromium``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("KANT_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def _chromium() -> str | None:
    if Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    return shutil.which("chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    exe = _chromium()
    if exe is None:
        pytest.skip(f"no Chromium at {CHROMIUM} or on PATH (install Debian's chromium: tools/install-chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the browser extra)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
