"""The default run's story (issue 17): the default cluster, waits by gang size in the summary, a report
that draws its plots in the browser."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from kant.cli.main import cli
from kant.config import load_policy
from kant.metrics.report import write_html
from kant.metrics.summary import summarize, summary_rows
from kant.model.cluster import Cluster
from kant.model.job import JobTableBuilder
from kant.sim import simulate
from kant.traces import load_cluster


def _two_jobs_result():  # type: ignore[no-untyped-def]
    """One 8-GPU node: an 8-GPU job runs 100 s from 0, a 1-GPU job submitted at 0 waits for it."""
    b = JobTableBuilder("two")
    b.add("big", submit=0, duration=100, gpus_per_worker=8)
    b.add("small", submit=0, duration=10, gpus_per_worker=1)
    return simulate(Cluster.uniform(1, 8), b.build(), load_policy("fifo"))


def test_summary_has_waits_by_gang_size() -> None:
    rows = dict(summary_rows(summarize(_two_jobs_result())))
    assert rows["JWTD P90 by gang size (GPUs)"] == "1: 100 s, 5-8: 0 s"  # buckets without jobs left out


def test_default_cluster_is_philly_80() -> None:
    default = next(p for p in cli.commands["simulate"].params if p.name == "cluster").default
    assert default == "philly-80"
    c = load_cluster("philly-80")
    assert (c.n_nodes, c.total_gpus) == (80, 640)


def test_report_plots_are_drawn_by_the_browser(tmp_path: Path) -> None:
    res = _two_jobs_result()
    text = write_html(tmp_path / "r.html", res, summarize(res)).read_text()
    assert "uPlot" in text and "<img" not in text  # the vendored library, inlined: one self-contained file
    data = json.loads(re.search(r'<script type="application/json" id="kant-plots">(.*?)</script>', text, re.S)[1])
    assert [p["id"] for p in data] == ["gar", "daily", "gfr", "queue", "pending", "jwtd"]
    jwtd = next(p for p in data if p["id"] == "jwtd")
    assert jwtd["x"][0] >= 1 and all(len(s["y"]) == len(jwtd["x"]) for s in jwtd["series"])


def test_no_report_skips_the_html(tmp_path: Path) -> None:
    trace = tmp_path / "philly.csv"
    trace.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,60,1,60,vc\n"
                     "2017-10-09 07:02:55,30,8,240,vc\n")
    r = CliRunner().invoke(cli, ["simulate", "--trace", str(trace), "--cluster", "tiny", "--no-report",
                                 "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "result.json").exists() and not (tmp_path / "out" / "report.html").exists()
