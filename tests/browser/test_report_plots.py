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


def _runs(n_jobs: int, source: str) -> list[tuple[str, Any, Any]]:
    b = JobTableBuilder(source)
    for i in range(n_jobs):
        b.add(f"j{i}", submit=60.0 * i, duration=3600.0 + 600 * (i % 5), gpus_per_worker=(1, 2, 8)[i % 3])
    jobs = b.build()
    out = []
    for policy in ("kant", "volcano-binpack"):
        res = simulate(Cluster.uniform(2, 8), jobs, load_policy(policy))
        out.append((policy, res, summarize(res)))
    return out


def test_compare_writes_the_same_interactive_page(browser: Any, tmp_path: Path, artifacts: Path) -> None:
    """kant compare's page: uPlot like a run's report, trace and cluster named (no path of this
    machine), the best value of each row marked, the policies in the dashboard's colours."""
    from kant.metrics.report import METRIC_ROWS, POLICY_COLORS, write_comparison_html

    source = str(tmp_path / "traces" / "small.csv")  # an absolute path: the page names the file only
    path = write_comparison_html(tmp_path / "comparison.html", _runs(30, source))
    text = path.read_text()
    assert str(tmp_path) not in text and "small.csv" in text and "2 nodes" in text
    page, errors = _open(browser, path)
    for plot in ("gar", "jwtd"):
        page.wait_for_selector(f"#plot-{plot} canvas", timeout=10_000)
    legend = page.locator("#plot-gar .u-legend").inner_text()
    assert "kant" in legend and "volcano-binpack" in legend and "(kant)" not in text
    assert "n/a" not in legend and "%" in legend  # the latest values, in %
    best = page.eval_on_selector_all("table.best tr[data-key]", "els => els.map(e => [e.dataset.key, "
                                     "[...e.querySelectorAll('td')].slice(1).map(c => c.classList.contains('best'))])")
    assert any(any(marks) for _, marks in best)
    assert all(sum(marks) <= 2 for _, marks in best)
    # the rows of METRIC_ROWS, the dashboard's results page's too (test_dashboard's side by side)
    assert [k for k, _ in best] == [row[1] for row in METRIC_ROWS]
    assert not any(dict(best)["counts.jobs"])  # (neither more nor less is better)
    strokes = page.evaluate("JSON.parse(document.getElementById('kant-plots').textContent)[0].colors")
    assert strokes == list(POLICY_COLORS[:2])
    # the dashboard's palette is the same list
    assert page.evaluate("window.kantFormat.PALETTE") == list(POLICY_COLORS)
    page.set_viewport_size({"width": 700, "height": 900})
    page.wait_for_function("document.querySelector('#plot-gar canvas').getBoundingClientRect().width <= 700",
                           timeout=10_000)
    page.screenshot(path=str(artifacts / "report-compare.png"), full_page=True)
    assert errors == []
    page.close()


def test_a_run_report_names_no_path_and_gfr_undefined_is_a_gap(browser: Any, tmp_path: Path, artifacts: Path) -> None:
    import json

    from kant.metrics.report import write_html

    (_, res, metrics), _ = _runs(60, str(tmp_path / "t" / "small.csv"))
    text = write_html(tmp_path / "r.html", res, metrics).read_text()
    assert str(tmp_path) not in text
    plots = {p["id"]: p for p in json.loads(text.split('id="kant-plots">')[1].split("</script>")[0])}
    gfr = plots["gfr"]["series"][1]["y"]
    assert None in gfr  # a saturated cluster: no GPU free for most of a bin, a gap (not 100 %)
    page, errors = _open(browser, tmp_path / "r.html")
    page.wait_for_selector("#plot-jwtd canvas", timeout=10_000)
    page.screenshot(path=str(artifacts / "report-run.png"), full_page=True)
    assert errors == []
    page.close()
