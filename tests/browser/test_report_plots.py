"""A run's HTML report draws its plots in a real headless Chromium (the data and uPlot are inlined: the
page opens from a file, with nothing else to fetch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kant.config import load_policy
from kant.metrics.report import write_html
from kant.metrics.summary import summarize
from kant.model.cluster import Cluster
from kant.model.job import JobTableBuilder
from kant.sim import simulate


def _report(path: Path, n_jobs: int) -> Path:
    b = JobTableBuilder("small")
    for i in range(n_jobs):  # 1-, 2- and 8-GPU jobs on 2 nodes: some wait, some run at once
        b.add(f"j{i}", submit=60.0 * i, duration=3600.0 + 600 * (i % 5), gpus_per_worker=(1, 2, 8)[i % 3])
    res = simulate(Cluster.uniform(2, 8), b.build(), load_policy("kant"))
    return write_html(path, res, summarize(res))


def _open(browser: Any, path: Path) -> tuple[Any, list[str]]:
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.as_uri())
    return page, errors


def test_every_plot_is_drawn(browser: Any, tmp_path: Path) -> None:
    page, errors = _open(browser, _report(tmp_path / "r.html", 30))
    for plot in ("gar", "daily", "gfr", "queue", "pending", "jwtd"):
        page.wait_for_selector(f"#plot-{plot} canvas", timeout=10_000)
    assert page.locator("canvas").count() == 6 and errors == []
    legend = page.locator("#plot-jwtd").inner_text()
    assert "all (n=30)" in legend and "1 GPUs (n=10)" in legend and "5-8 GPUs (n=10)" in legend
    page.close()


def test_an_empty_run_says_no_data(browser: Any, tmp_path: Path) -> None:
    page, errors = _open(browser, _report(tmp_path / "r.html", 0))
    page.wait_for_selector("#plot-gar:has-text('no data')", timeout=10_000)
    assert page.locator("canvas").count() == 0 and errors == []
    page.close()
