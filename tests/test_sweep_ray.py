"""`kant sweep --ray` on a real local Ray cluster of three nodes (ray.cluster_utils.Cluster, one per module):
the issue's grid (4 policies x 3 cluster sizes x 3 seeds, on 100 Philly jobs) gives the same table as local
processes, a killed worker's run is retried, a rerun runs nothing."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kant.sweep import SweepSummary, load_study, run_study
from kant.sweep.runners import run_ray
from kant.sweep.runs import RunOutcome, RunTask, plan_runs
from sweep_helpers import GRID_STUDY, write_study

ray = pytest.importorskip("ray")

_TASK_TITLE = b"ray::kant-sweep-run"  # the process title of a Ray worker while it runs a sweep task


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        c.add_node(num_cpus=1)
    ray.init(address=c.address, log_to_driver=False)
    c.wait_for_nodes()
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def local_table(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    root = tmp_path_factory.mktemp("local")
    summary = run_study(load_study(write_study(root, GRID_STUDY)), root / "out", workers=2)
    assert summary.done == 36
    return summary.table.read_bytes()


@pytest.fixture(scope="module")
def ray_study(cluster: object, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SweepSummary]:
    root = tmp_path_factory.mktemp("ray")
    summary = run_study(load_study(write_study(root, GRID_STUDY)), root / "out", use_ray=True)
    return root, summary


def test_ray_gives_the_same_table_as_local_processes(ray_study: tuple[Path, SweepSummary], local_table: bytes) -> None:
    _, summary = ray_study
    assert (summary.runs, summary.done, summary.failed) == (36, 36, {})
    assert summary.table.read_bytes() == local_table  # same rows, same values, bit for bit


def test_a_rerun_on_ray_runs_nothing(ray_study: tuple[Path, SweepSummary], local_table: bytes) -> None:
    root, _ = ray_study
    summary = run_study(load_study(root / "study.yaml"), root / "out", use_ray=True)
    assert (summary.skipped, summary.done, summary.failed) == (36, 0, {})
    assert summary.table.read_bytes() == local_table


def _sweep_workers(cluster: object) -> list[int]:
    """Pids of this cluster's Ray workers running a sweep task (children of its raylets)."""
    raylets = {str(p.process.pid) for node in cluster.list_all_nodes()  # type: ignore[attr-defined]
               for p in node.all_processes.get("raylet", [])}
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read()
            with open(f"/proc/{pid}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
        except OSError:
            continue
        if title.startswith(_TASK_TITLE) and ppid in raylets:
            found.append(int(pid))
    return found


def test_a_killed_worker_is_retried_and_the_table_is_complete(
    cluster: object, ray_study: tuple[Path, SweepSummary], local_table: bytes
) -> None:
    root, _ = ray_study
    result: list[SweepSummary] = []
    sweep = threading.Thread(target=lambda: result.append(
        run_study(load_study(root / "study.yaml"), root / "out", use_ray=True, force=True, max_retries=3)))
    sweep.start()
    killed: list[int] = []
    deadline = time.monotonic() + 60
    while not killed and sweep.is_alive() and time.monotonic() < deadline:
        workers = _sweep_workers(cluster)
        if workers:
            os.kill(workers[0], signal.SIGKILL)  # a worker of this test's cluster, mid-run
            killed.append(workers[0])
        time.sleep(0.02)
    sweep.join(timeout=120)
    assert killed, "no sweep worker was seen running"
    summary = result[0]
    assert (summary.done, summary.failed) == (36, {})  # the killed run was retried
    assert summary.table.read_bytes() == local_table


def test_a_failing_run_on_ray_is_reported_and_the_others_go_on(cluster: object, tmp_path: Path) -> None:
    tasks = plan_runs(load_study(write_study(tmp_path)), tmp_path / "inputs")[:2]
    bad_doc = {**tasks[0].policy_doc, "actions": [{"name": "no-such-action"}]}
    bad = RunTask("bad", tasks[0].params, tasks[0].trace, tasks[0].cluster, None, bad_doc)
    outcomes: list[RunOutcome] = []
    run_ray([bad, *tasks], outcomes.append)
    errors = {o.key: o.error for o in outcomes}
    assert errors[tasks[0].key] is None and errors[tasks[1].key] is None
    assert "unknown action 'no-such-action'" in str(errors["bad"])
