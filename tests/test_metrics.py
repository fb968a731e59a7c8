"""Metrics against hand-computed numbers, on tiny SimResults built by hand.

Main scenario: 2 nodes x 4 GPUs = 8 GPUs, one leaf. Training jobs (submit, start, end, GPUs):

    A: submit  0, start  0, end 10, 1x4 = 4 GPUs, estimate 10.5
    B: submit  2, start 10, end 20, 2x4 = 8 GPUs, estimate 5
    C: submit  4, start  4, end 10, 1x1 = 1 GPU,  no estimate
    D: submit 20, never starts (unschedulable "too big"), 4x4 = 16 GPUs
    E: submit 10, start 20, end 30, 1x2 = 2 GPUs, estimate 30

Samples (the last holds until end_time = 40):

    time            0  2  4 10 20 30
    allocated       4  4  5  8  2  0
    queue_len       0  1  1  1  0  0
    pending_gpus    0  8  8  2  0  0
    partial_nodes   0  0  1  0  1  0
    free_on_partial 0  0  3  0  2  0
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kant.config import parse_policy
from kant.metrics.recorder import SERIES, JobStatus, SimResult
from kant.metrics.report import write_comparison_csv, write_comparison_html, write_html, write_json
from kant.metrics.summary import BUCKETS, DAY, Metrics, gang_bucket, summarize, summary_rows
from kant.metrics.view import RunView
from kant.model.cluster import Cluster
from kant.model.job import JobKind, JobTable, JobTableBuilder
from kant.sim import ExecutionModel, Simulator

NAN = math.nan
F, U, P, R = JobStatus.FINISHED, JobStatus.UNSCHEDULABLE, JobStatus.PENDING, JobStatus.RUNNING


def make_result(
    cluster: Cluster,
    jobs: JobTable,
    *,
    times: list[float],
    series: dict[str, list[int]],
    end_time: float,
    first_start: list[float] | None = None,
    end: list[float] | None = None,
    status: list[int] | None = None,
    preemptions: list[int] | None = None,
    gpu_seconds: list[float] | None = None,
    span: tuple[list[int], list[int], list[int]] | None = None,
    reasons: dict[int, str] | None = None,
    **extra: Any,
) -> SimResult:
    """A SimResult from plain lists; missing series are zeros (empty_nodes: all GPU nodes)."""
    n = len(jobs)
    k = len(times)

    def f(x: list[float] | None) -> np.ndarray:
        return np.full(n, NAN) if x is None else np.array(x, dtype=np.float64)

    def i(x: list[int] | None) -> np.ndarray:
        return np.zeros(n, dtype=np.int64) if x is None else np.array(x, dtype=np.int64)

    full = {name: np.zeros(k, dtype=np.int64) for name in SERIES}
    full["empty_nodes"] = np.full(k, cluster.n_gpu_nodes, dtype=np.int64)
    for name, vals in series.items():
        assert len(vals) == k, name
        full[name] = np.array(vals, dtype=np.int64)
    nodes, leaves, spines = span if span is not None else (None, None, None)
    return SimResult(
        policy=extra.pop("policy", "test"),
        cluster=cluster,
        jobs=jobs,
        first_start=f(first_start),
        end=f(end),
        status=i(status),
        runs=(np.isfinite(f(first_start))).astype(np.int64),
        preemptions=i(preemptions),
        gpu_seconds=np.zeros(n) if gpu_seconds is None else np.array(gpu_seconds, dtype=np.float64),
        span_nodes=i(nodes),
        span_leaves=i(leaves),
        span_spines=i(spines),
        reasons=dict(reasons or {}),
        times=np.array(times, dtype=np.float64),
        series=full,
        end_time=end_time,
        **extra,
    )


def main_result(**extra: Any) -> SimResult:
    b = JobTableBuilder(source="hand")
    b.add("A", submit=0, duration=10, workers=1, gpus_per_worker=4, estimate=10.5)
    b.add("B", submit=2, duration=10, workers=2, gpus_per_worker=4, estimate=5)
    b.add("C", submit=4, duration=6, workers=1, gpus_per_worker=1)
    b.add("D", submit=20, duration=10, workers=4, gpus_per_worker=4, estimate=10)
    b.add("E", submit=10, duration=10, workers=1, gpus_per_worker=2, estimate=30)
    return make_result(
        Cluster.uniform(2, 4),
        b.build(),
        times=[0, 2, 4, 10, 20, 30],
        series={
            "allocated_gpus": [4, 4, 5, 8, 2, 0],
            "queue_len": [0, 1, 1, 1, 0, 0],
            "pending_gpus": [0, 8, 8, 2, 0, 0],
            "partial_nodes": [0, 0, 1, 0, 1, 0],
            "free_on_partial": [0, 0, 3, 0, 2, 0],
            "empty_nodes": [1, 1, 0, 0, 1, 2],
            "running_jobs": [1, 1, 2, 1, 1, 0],
        },
        end_time=40,
        first_start=[0, 10, 4, NAN, 20],
        end=[10, 20, 10, NAN, 30],
        status=[F, F, F, U, F],
        gpu_seconds=[40, 80, 6, 0, 20],
        span=([1, 2, 1, 0, 1], [1, 1, 1, 0, 1], [1, 1, 1, 0, 1]),
        reasons={3: "too big"},
        wall_seconds=2.0,
        events=12,
        cycles=6,
        seed=7,
        **extra,
    )


@pytest.fixture(scope="module")
def main() -> Metrics:
    return summarize(main_result())


def get(m: Metrics, dotted: str) -> Any:
    cur: Any = m
    for part in dotted.split("."):
        cur = cur[part] if isinstance(cur, dict) else getattr(cur, part)
    return cur


# --- the main scenario, table-driven -----------------------------------------------------------
MAIN_CASES: list[tuple[str, Any]] = [
    # default window = [first submit 0, last submit 20]
    ("window.start", 0.0),
    ("window.end", 20.0),
    ("window.kind", "arrivals"),
    ("window.covered", 20.0),
    # GAR = (4*2 + 4*2 + 5*6 + 8*10) / (8 * 20) = 126 / 160
    ("gar.window", 126 / 160),
    # whole run [0, 40]: (126 + 2*10 + 0*10) / (8 * 40) = 146 / 320
    ("gar.run", 146 / 320),
    ("gar.run_window", (0.0, 40.0)),
    # SOR: den = min(8, alloc + pending): [0,2) 4/4=1, [2,4) 4/8, [4,10) 5/8, [10,20) 8/8
    # = (2*1 + 2*0.5 + 6*0.625 + 10*1) / 20 = 16.75 / 20
    ("sor", 16.75 / 20),
    # GFR nodes: partial/2 up nodes: only [4,10) has 1 partial -> 6 * 0.5 / 20 = 0.15
    ("gfr.nodes", 3 / 20),
    # GFR GPUs: free = 8 - alloc; [10,20) has free 0 -> excluded; [4,10) 3/3 = 1, others 0
    # = (0*2 + 0*2 + 1*6) / 10
    ("gfr.gpus", 6 / 10),
    # queue: (0*2 + 1*2 + 1*6 + 1*10) / 20 = 0.9; pending: (0*2 + 8*2 + 8*6 + 2*10) / 20 = 4.2
    ("queue.mean_len", 18 / 20),
    ("queue.max_len", 1),
    ("queue.mean_pending_gpus", 84 / 20),
    ("queue.max_pending_gpus", 8),
    # JWTD: waits A 0, B 10-2=8, C 0, E 20-10=10 -> sorted [0, 0, 8, 10]
    ("jwtd.overall.count", 4),
    ("jwtd.overall.mean", 4.5),  # 18 / 4
    ("jwtd.overall.p50", 4.0),  # position 1.5: 0 + 0.5 * 8
    ("jwtd.overall.p90", 9.4),  # position 2.7: 8 + 0.7 * 2
    ("jwtd.overall.p99", 9.94),  # position 2.97: 8 + 0.97 * 2
    ("jwtd.overall.max", 10.0),
    ("jwtd.never_started", 1),  # D
    ("jwtd.buckets.1.count", 1),  # C
    ("jwtd.buckets.1.p50", 0.0),
    ("jwtd.buckets.2-4.count", 2),  # A (4 GPUs), E (2 GPUs): waits [0, 10]
    ("jwtd.buckets.2-4.mean", 5.0),
    ("jwtd.buckets.2-4.p90", 9.0),  # position 0.9: 0 + 0.9 * 10
    ("jwtd.buckets.2-4.p99", 9.9),
    ("jwtd.buckets.5-8.count", 1),  # B
    ("jwtd.buckets.5-8.p99", 8.0),
    ("jwtd.buckets.9-16.count", 0),  # D never started
    ("jwtd.buckets.9-16.p50", None),
    # JCT: A 10, B 18, C 6, E 20 -> sorted [6, 10, 18, 20]
    ("jct.overall.count", 4),
    ("jct.overall.mean", 13.5),  # 54 / 4
    ("jct.overall.p50", 14.0),  # position 1.5: 10 + 0.5 * 8
    ("jct.overall.p90", 19.4),  # position 2.7: 18 + 0.7 * 2
    ("jct.overall.p99", 19.94),  # position 2.97: 18 + 0.97 * 2
    ("jct.buckets.2-4.mean", 15.0),  # (10 + 20) / 2
    ("jct.buckets.2-4.p99", 19.9),  # 10 + 0.99 * 10
    ("jct.buckets.5-8.mean", 18.0),
    # JTTED: A (10.5-10)/10 = 0.05, B (5-10)/10 = -0.5, E (30-10)/10 = 2.0; C has none; D unfinished
    ("jtted.with_estimate", 3),
    ("jtted.without_estimate", 1),
    ("jtted.p10", -0.39),  # sorted [-0.5, 0.05, 2.0], position 0.2: -0.5 + 0.2 * 0.55
    ("jtted.p50", 0.05),
    ("jtted.p90", 1.61),  # position 1.8: 0.05 + 0.8 * 1.95
    ("jtted.mean_abs", 0.85),  # (0.05 + 0.5 + 2.0) / 3
    ("jtted.within_10", 1 / 3),  # A
    ("jtted.within_50", 2 / 3),  # A, B (|-0.5| <= 0.5)
    ("jtted.underestimated", 1 / 3),  # B
    # counts
    ("counts.jobs", 5),
    ("counts.training", 5),
    ("counts.inference", 0),
    ("counts.finished", 4),
    ("counts.unschedulable", 1),
    ("counts.unschedulable_reasons", {"too big": 1}),
    ("counts.pending", 0),
    ("counts.running_at_end", 0),
    ("counts.preemptions", 0),
    ("counts.makespan", 30.0),  # last end 30 - first submit 0
    ("counts.gpu_seconds_executed", 146.0),  # 40 + 80 + 6 + 20
    ("counts.gpu_seconds_demanded", 146.0),  # 10*4 + 10*8 + 6*1 + 10*2
    # topology: B is the only multi-node gang, on one leaf
    ("topology.multi_node", 1),
    ("topology.cross_leaf", 0),
    ("topology.cross_leaf_share", 0.0),
    # run info: 5 jobs / 2 s
    ("run.policy", "test"),
    ("run.seed", 7),
    ("run.samples", 6),
    ("run.jobs_per_second", 2.5),
]


@pytest.mark.parametrize(("key", "expected"), MAIN_CASES, ids=[c[0] for c in MAIN_CASES])
def test_main_scenario(main: Metrics, key: str, expected: Any) -> None:
    got = get(main, key)
    if isinstance(expected, float):
        assert got == pytest.approx(expected, abs=1e-12)
    else:
        assert got == expected


# --- windows ------------------------------------------------------------------------------------
WINDOW_CASES: list[tuple[tuple[float, float], str, float | None]] = [
    # before the first sample the cluster is empty: (0*10 + 126) / (8 * 30)
    ((-10, 20), "gar.window", 126 / 240),
    # [30, 40) has no demand (alloc 0, pending 0) -> excluded from SOR:
    # (16.75 + [20,30) 2/min(8, 2) = 1 * 10) / 30
    ((0, 40), "sor", 26.75 / 30),
    # GFR GPUs over [0, 40]: [20,30) free 6, 2/6; [30,40) free 8, 0 -> (6 + 10/3) / (10 + 20)
    ((0, 40), "gfr.gpus", (6 + 10 / 3) / 30),
    # a window past the end of the run is clipped at end_time: same as [0, 40]
    ((0, 100), "gar.window", 146 / 320),
    ((0, 100), "window.covered", 40.0),
    # zero-length window: nothing to weigh
    ((5, 5), "gar.window", None),
    ((5, 5), "sor", None),
    ((5, 5), "queue.max_len", None),
]


@pytest.mark.parametrize(("window", "key", "expected"), WINDOW_CASES)
def test_windows(window: tuple[float, float], key: str, expected: float | None) -> None:
    m = summarize(main_result(), window=window)
    assert m.window is not None and m.window.kind == "given"
    got = get(m, key)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-12)


def test_bad_window_rejected() -> None:
    with pytest.raises(ValueError):
        summarize(main_result(), window=(10, 5))


# --- daily GAR ----------------------------------------------------------------------------------
def test_daily_gar() -> None:
    b = JobTableBuilder()
    b.add("a", submit=0, duration=1)
    b.add("b", submit=2.5 * DAY, duration=1)
    res = make_result(
        Cluster.uniform(2, 4),
        b.build(),
        times=[0, 0.5 * DAY, DAY, 2 * DAY],
        series={"allocated_gpus": [8, 0, 2, 8]},
        end_time=3 * DAY,
    )
    m = summarize(res)  # window [0, 2.5 days]
    d = m.gar.daily
    # day 0: (8 * 0.5 + 0 * 0.5) / 8 = 0.5; day 1: 2/8 = 0.25; day 2 (half a day): 8/8 = 1.0
    assert d.values == pytest.approx((0.5, 0.25, 1.0))
    assert d.p10 == pytest.approx(0.3)  # sorted [0.25, 0.5, 1.0], position 0.2: 0.25 + 0.2 * 0.25
    assert d.p50 == pytest.approx(0.5)
    assert d.p90 == pytest.approx(0.9)  # position 1.8: 0.5 + 0.8 * 0.5
    assert (d.min, d.max) == (0.25, 1.0)
    # window GAR: (8*0.5 + 0*0.5 + 2*1 + 8*0.5) / (8 * 2.5) = 10 / 20
    assert m.gar.window == pytest.approx(0.5)
    # run [0, 3 days]: (4 + 2 + 8) / (8 * 3) = 14 / 24
    assert m.gar.run == pytest.approx(14 / 24)


# --- down GPUs: SOR capacity and GFR up nodes ---------------------------------------------------
def test_down_gpus() -> None:
    b = JobTableBuilder()
    b.add("a", submit=0, duration=20)
    b.add("b", submit=20, duration=20)
    res = make_result(
        Cluster.uniform(2, 4),
        b.build(),
        times=[0, 10],
        series={
            "allocated_gpus": [2, 4],
            "down_gpus": [4, 0],
            "pending_gpus": [8, 0],
            "partial_nodes": [1, 0],
            "free_on_partial": [2, 0],
        },
        end_time=20,
        down_node_times=np.array([0.0, 10.0]),  # one node down on [0, 10), none after
        down_nodes=np.array([1, 0]),
    )
    m = summarize(res)  # window [0, 20]
    # SOR: [0,10) den = min(8-4, 2+8) = 4 -> 2/4; [10,20) den = min(8, 4+0) = 4 -> 4/4
    assert m.sor == pytest.approx((10 * 0.5 + 10 * 1.0) / 20)
    # GFR nodes: [0,10) up nodes = 2 - 1 = 1 -> 1/1; [10,20) 0/2 -> (10 + 0) / 20
    assert m.gfr.nodes == pytest.approx(0.5)
    # GFR GPUs: [0,10) free = 8-2-4 = 2 -> 2/2; [10,20) free 4 -> 0/4 -> (10 + 0) / 20
    assert m.gfr.gpus == pytest.approx(0.5)
    # GAR counts down GPUs in the total: (2*10 + 4*10) / (8*20)
    assert m.gar.window == pytest.approx(60 / 160)


# --- JTTED variants -----------------------------------------------------------------------------
def test_jtted_estimates_override() -> None:
    # predictions equal to the true durations of the finished jobs: every error is 0
    m = summarize(main_result(), estimates=np.array([10, 10, 6, NAN, 10.0]))
    j = m.jtted
    assert (j.with_estimate, j.without_estimate) == (4, 0)
    assert (j.p10, j.p50, j.p90, j.mean_abs) == (0.0, 0.0, 0.0, 0.0)
    assert (j.within_10, j.within_50, j.underestimated) == (1.0, 1.0, 0.0)


def test_jtted_no_estimates() -> None:
    m = summarize(main_result(), estimates=np.full(5, NAN))
    j = m.jtted
    assert (j.with_estimate, j.without_estimate) == (0, 4)
    assert j.p50 is None and j.mean_abs is None and j.within_10 is None
    with pytest.raises(ValueError):
        summarize(main_result(), estimates=np.zeros(3))


# --- buckets and topology -----------------------------------------------------------------------
BUCKET_CASES = [(0, "1"), (1, "1"), (2, "2-4"), (4, "2-4"), (5, "5-8"), (8, "5-8"), (9, "9-16"),
                (16, "9-16"), (17, "17-32"), (32, "17-32"), (33, "33-64"), (64, "33-64"), (65, ">64"),
                (1024, ">64")]  # fmt: skip


@pytest.mark.parametrize(("gpus", "label"), BUCKET_CASES)
def test_gang_bucket(gpus: int, label: str) -> None:
    assert BUCKETS[int(gang_bucket([gpus])[0])] == label


def test_topology_and_preemptions() -> None:
    b = JobTableBuilder()
    for k in range(5):
        b.add(f"j{k}", submit=k, duration=1, workers=2, gpus_per_worker=8)
    res = make_result(
        Cluster.uniform(8, 8, nodes_per_leaf=2, leaves_per_spine=2),
        b.build(),
        times=[0],
        series={},
        end_time=10,
        first_start=[0, 1, 2, 3, 4],
        end=[1, 2, 3, 4, 5],
        status=[F] * 5,
        preemptions=[0, 2, 0, 1, 0],
        # 4 multi-node gangs (the last ran on 1 node), spanning leaves [1, 2, 2, 3], spines [1, 1, 2, 1]
        span=([2, 2, 2, 3, 1], [1, 2, 2, 3, 1], [1, 1, 2, 1, 1]),
    )
    t = summarize(res).topology
    assert t.multi_node == 4
    assert t.cross_leaf_share == pytest.approx(3 / 4)  # leaves > 1: jobs 1, 2, 3
    assert t.cross_spine_share == pytest.approx(1 / 4)  # spines > 1: job 2
    assert summarize(res).counts.preemptions == 3  # 0 + 2 + 0 + 1 + 0


def test_inference_and_pending_counts() -> None:
    b = JobTableBuilder()
    b.add("train", submit=0, duration=5)
    b.add("wait", submit=1, duration=5, workers=1, gpus_per_worker=8)
    b.add("svc", submit=0, duration=math.inf, kind=JobKind.INFERENCE)
    res = make_result(
        Cluster.uniform(1, 8),
        b.build(),
        times=[0, 5],
        series={"allocated_gpus": [2, 1]},
        end_time=10,
        first_start=[0, NAN, 0],
        end=[5, NAN, NAN],
        status=[F, P, R],
        gpu_seconds=[5, 0, 10],
    )
    m = summarize(res)
    c = m.counts
    assert (c.training, c.inference, c.finished, c.pending, c.running_at_end) == (2, 1, 1, 1, 1)
    assert c.gpu_seconds_executed == 15.0  # 5 + 10 (the service counts; demanded does not)
    assert c.gpu_seconds_demanded == 5.0  # 5 s * 1 GPU
    assert m.jwtd.overall.count == 1 and m.jwtd.never_started == 1  # the service is not training
    assert c.makespan == 5.0


# --- empty edge cases ---------------------------------------------------------------------------
def test_empty_run() -> None:
    res = make_result(Cluster.uniform(1, 8), JobTableBuilder().build(), times=[], series={}, end_time=0)
    m = summarize(res)
    assert m.window is None
    assert m.gar.window is None and m.gar.run is None and m.gar.daily.values == ()
    assert m.sor is None and m.gfr.nodes is None and m.queue.max_len is None
    assert m.jwtd.overall.count == 0 and m.jwtd.overall.p50 is None
    assert m.jct.overall.mean is None and m.jtted.with_estimate == 0
    assert m.counts.makespan is None and m.topology.cross_leaf_share is None
    assert m.run.jobs_per_second is None
    json.dumps(m.to_dict(), allow_nan=False)
    assert len(summary_rows(m)) >= 15


def test_single_arrival_uses_run_window() -> None:
    b = JobTableBuilder()
    b.add("a", submit=0, duration=10)
    res = make_result(
        Cluster.uniform(1, 4), b.build(), times=[0, 10], series={"allocated_gpus": [1, 0]}, end_time=20,
        first_start=[0], end=[10], status=[F],
    )  # fmt: skip
    m = summarize(res)
    assert m.window is not None and m.window.kind == "run"
    assert m.gar.window == pytest.approx(10 / 80)  # (1*10 + 0*10) / (4 * 20)
    # no demand on [10, 20): SOR over [0, 10) only, 1 / min(4, 1) = 1
    assert m.sor == pytest.approx(1.0)


def test_to_dict_is_json_safe(main: Metrics) -> None:
    d = main.to_dict()
    text = json.dumps(d, allow_nan=False)
    assert '"GAR"' not in text  # plain keys, not labels
    assert d["jwtd"]["buckets"]["9-16"]["p50"] is None
    assert list(d["jwtd"]["buckets"]) == list(BUCKETS)
    labels = [label for label, _ in summary_rows(main)]
    assert labels[0].startswith("GAR") and any("SOR" in label for label in labels)


# --- reports ------------------------------------------------------------------------------------
def test_reports(tmp_path: Path, main: Metrics) -> None:
    res = main_result()
    jpath = write_json(tmp_path / "run.json", res, main)
    data = json.loads(jpath.read_text())
    assert data["policy"] == "test"
    assert data["metrics"]["gar"]["window"] == pytest.approx(126 / 160)
    hpath = write_html(tmp_path / "run.html", res, main)
    text = hpath.read_text()
    assert 'id="plot-gar"' in text and "GAR" in text and '<script type="application/json" id="kant-plots">' in text

    other = summarize(main_result(policy="other"))
    runs = [("test", res, main), ("other", main_result(policy="other"), other)]
    chtml = write_comparison_html(tmp_path / "cmp.html", runs).read_text()
    assert 'id="plot-gar"' in chtml and 'id="plot-jwtd"' in chtml and "other" in chtml and "<img" not in chtml
    lines = write_comparison_csv(tmp_path / "cmp.csv", runs).read_text().splitlines()
    assert len(lines) == 3 and lines[0].startswith("name,") and "gar.window" in lines[0]


# --- busy-period GAR, total queueing time, notes ------------------------------------------------------
def test_gar_while_jobs_wait() -> None:
    # main_result: 8 GPUs, arrival window [0, 20]. Jobs wait on [2, 20): [2,4) 4 GPUs, [4,10) 5, [10,20) 8
    m = summarize(main_result())
    assert m.gar.busy == pytest.approx((2 * 4 + 6 * 5 + 10 * 8) / (8 * 18))
    assert m.gar.busy_share == pytest.approx(18 / 20)
    assert m.gar.window == pytest.approx((2 * 4 + 2 * 4 + 6 * 5 + 10 * 8) / (8 * 20))
    rows = dict(summary_rows(m))
    assert rows["GAR while jobs wait"] == "81.9 % (90.0 % of window)"


def _preempted_run(**execution: Any) -> tuple[Simulator, SimResult]:
    # 1 node x 4 GPUs. L (prio 0, 100 s) at 0; H (prio 1, 50 s) at 10 evicts L, which waits until H
    # ends at 60 and runs again: from scratch (100 s, ends 160) without checkpoints; with a
    # checkpoint every 5 s it keeps its 10 s (ends 150).
    b = JobTableBuilder()
    b.add("L", submit=0, duration=100, workers=1, gpus_per_worker=4, priority=0)
    b.add("H", submit=10, duration=50, workers=1, gpus_per_worker=4, priority=1)
    pol = parse_policy({"name": "p", "actions": ["allocate", {"name": "preempt", "args": {"rank_by": "priority"}}],
                        "plugins": [{"name": "priority"}, {"name": "fifo"}, {"name": "binpack"}]})
    sim = Simulator(Cluster.uniform(1, 4), b.build(), pol, execution=ExecutionModel(**execution))
    return sim, sim.run()


def test_total_queueing_time_counts_the_waits_after_a_preemption() -> None:
    _, result = _preempted_run()
    m = summarize(result)
    assert result.end.tolist() == [160.0, 60.0]
    assert m.jwtd.overall.max == 0.0  # both started at once: the first-start wait hides L's 50 s
    assert m.queued is not None
    assert m.queued.overall.max == 50.0  # L: 160 - 0 - (10 + 100) run
    assert m.queued.buckets["2-4"].count == 2
    assert m.queued.requeued == 1
    assert dict(summary_rows(m))["Queued in total P50 / P99"] == "25 s / 50 s"


def test_restarts_from_scratch_are_noted_in_the_output() -> None:
    _, result = _preempted_run()
    m = summarize(result)
    assert len(m.notes) == 1 and "restarted from scratch" in m.notes[0] and "preempted" in m.notes[0]
    rows = summary_rows(m)
    assert ("Note", m.notes[0]) in rows
    assert dict(rows)["Work executed / demanded"] == f"{(10 + 100 + 50) / 150:.2f}x"
    _, kept = _preempted_run(checkpoint_interval_s=5.0)
    assert kept.end.tolist() == [150.0, 60.0]
    assert summarize(kept).notes == ()


# --- a metric added with one line (kant.metrics.registry.METRICS) -----------------------------
def gpu_hours(run: RunView) -> float:
    """The added metric: GPU-hours executed."""
    return float(run.result.gpu_seconds.sum()) / 3600.0


def gpu_hours_rows(value: float) -> list[tuple[str, str]]:
    return [("GPU-hours executed", f"{value:.2f}")]


def test_a_metric_added_with_one_registry_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from kant.metrics import registry

    monkeypatch.setattr(registry, "METRICS", (*registry.METRICS,
                        registry.Metric("gpu-hours", f"{__name__}:gpu_hours", f"{__name__}:gpu_hours_rows")))
    b = JobTableBuilder()
    b.add("a", submit=0.0, duration=3600.0, gpus_per_worker=2)  # 2 GPUs x 1 h
    b.add("b", submit=0.0, duration=1800.0, gpus_per_worker=1)  # 1 GPU x 0.5 h
    pol = parse_policy({"name": "t", "actions": ["allocate"], "plugins": [{"name": "fifo"}]})
    metrics = summarize(Simulator(Cluster.uniform(1, 4), b.build(), pol).run())
    assert metrics.extra == {"gpu-hours": 2.5}  # 2 + 0.5
    assert ("GPU-hours executed", "2.50") in summary_rows(metrics)
    assert metrics.to_dict()["extra"] == {"gpu-hours": 2.5}
    # an extension's metric (the inference report) is added next to it, not instead of it
    assert metrics.with_extra("inference", {"x": 1}).extra == {"gpu-hours": 2.5, "inference": {"x": 1}}


def test_every_typed_field_of_metrics_is_a_registry_line() -> None:
    """The built-in metrics are lines of METRICS, one per typed field of Metrics, in the order of the
    headline table; summary_rows asks each line's rows function."""
    from dataclasses import fields

    from kant.metrics.registry import METRICS

    typed = {f.name for f in fields(Metrics)} - {"extra", "extra_rows", "notes"}
    assert sorted(m.name for m in METRICS) == sorted(typed)
    assert [m.name for m in METRICS if m.rows][:3] == ["gar", "sor", "gfr"]


def test_series_plots_x_rounded_once_as_each_alone() -> None:
    """The report's time-series plots share their x (one timeline's bins): rounded once (issue 32), each
    plot's x is what rounding its own bins gives, and the plots are those made one by one."""
    from kant.metrics import report

    result = main_result()
    metrics = summarize(result)
    plots = report._plot_data(result, metrics)
    timeline = report._timeline(result)
    alone = {spec[0]: report._series_data(timeline, result, *spec) for spec in report._SERIES_PLOTS}
    series_plots = [p for p in plots if p["id"] in alone]
    assert len(series_plots) == len(report._SERIES_PLOTS)
    for plot in series_plots:
        assert plot == alone[plot["id"]]
        assert plot["x"] == report._rounded(report._series_plot(result, plot["id"], timeline)[0][1], 7)
    xs: dict[bytes, list[float | None]] = {b"other": [1.0]}  # a cache holding other x values: not used for these
    assert report._series_data(timeline, result, *report._SERIES_PLOTS[0], xs) == alone["gar"]
