"""kant with the Tiresias simulator's options reproduces the simulator's printed per-job results.

The fixture (tests/data/tiresias_repro/, made by bench/bench_tiresias_repro.py, see its README)
holds 300 Philly jobs in the simulator's CSV, the cluster specs, and the simulator's own ``job.csv``
for ``--schedule=fifo`` (8 x 8 GPUs) and ``--schedule=dlas-gpu-8`` (16 x 8 GPUs). The simulator is
not run here. Also: the ``las-repack`` action's arguments and its every-event cadence.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from kant.config import load_policy, parse_policy
from kant.errors import ConfigError
from kant.model import Cluster, JobTableBuilder
from kant.sim import ExecutionModel, simulate
from kant.traces.tiresias import read_tiresias, read_tiresias_cluster

DATA = Path(__file__).parent / "data" / "tiresias_repro"
POLICIES = Path(__file__).parents[1] / "bench" / "policies"
KEEP = ExecutionModel(checkpoint_interval_s=1.0)  # the simulator keeps all progress at a preemption


def _peer(path: Path) -> tuple[dict[int, float], dict[int, int]]:
    jct: dict[int, float] = {}
    pre: dict[int, int] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            jct[int(row["job_id"])] = float(row["JCT"])
            pre[int(row["job_id"])] = int(row["preempt"])
    return jct, pre


def _kant(folder: Path, spec: str, policy: str | Path) -> tuple[dict[int, float], dict[int, int]]:
    jobs = read_tiresias(folder / "jobs.csv")
    res = simulate(read_tiresias_cluster(folder / spec), jobs, load_policy(policy), execution=KEEP)
    ids = [int(n.removeprefix("tiresias-")) for n in jobs.names]
    jct = dict(zip(ids, (res.end - jobs.submit).tolist(), strict=True))
    return jct, dict(zip(ids, res.preemptions.tolist(), strict=True))


@pytest.mark.parametrize(
    ("case", "spec", "policy", "default"),
    [
        ("fifo", "cluster.csv", "tiresias-peer-fifo.yaml", "fifo-strict"),
        ("dlas", "pool.csv", "tiresias-peer-dlas.yaml", "tiresias"),
    ],
)
def test_options_reproduce_the_simulator_job_by_job(case: str, spec: str, policy: str, default: str) -> None:
    folder = DATA / case
    peer_jct, peer_pre = _peer(next(folder.glob("peer-*.csv")))
    jct, pre = _kant(folder, spec, POLICIES / policy)
    assert len(peer_jct) == 300
    assert jct == peer_jct  # every job's JCT, to the second
    assert pre == peer_pre  # and its preemptions
    # kant's own policy on the same nodes does not (the test can fail)
    d_jct, _ = _kant(folder, "cluster.csv", default)
    assert np.mean(list(d_jct.values())) != pytest.approx(np.mean(list(peer_jct.values())), rel=1e-3)


def test_dlas_fixture_has_contention() -> None:
    _, pre = _peer(DATA / "dlas" / "peer-dlas-gpu-8.csv")
    assert sum(pre.values()) > 1000


def _repack(**args: object) -> object:
    return parse_policy({"name": "t", "actions": [{"name": "las-repack", "args": args}], "plugins": [{"name": "fifo"}]})


def test_las_repack_args_are_checked() -> None:
    with pytest.raises(ConfigError):
        _repack(thresholds_gpu_s=[7200, 3600])
    with pytest.raises(ConfigError):
        _repack(wakeup="sometimes")


def test_las_repack_demotes_preempts_and_promotes() -> None:
    # 2 GPUs. a (2 GPUs) runs alone and is demoted at 100 GPU-s (t=50); b (2 GPUs, t=60) then takes
    # the cluster from it at its arrival (queue 0 before queue 1); a waits until b, demoted at
    # t=110, is behind it again (a entered queue 1 first); no promotion with factor null.
    b = JobTableBuilder()
    b.add("a", submit=0.0, duration=200.0, workers=1, gpus_per_worker=2)
    b.add("b", submit=60.0, duration=100.0, workers=1, gpus_per_worker=2)
    cluster = Cluster.uniform(1, 2)
    res = simulate(
        cluster,
        b.build(),
        _repack(thresholds_gpu_s=[100], starvation_factor=None),  # type: ignore[arg-type]
        execution=KEEP,
    )
    # a: 0-60 (60 s), b: 60-110 (demoted at 110: 50 s x 2 = 100 GPU-s), a: 110-250, b: 250-300
    assert res.preemptions.tolist() == [1, 1]
    assert res.end.tolist() == [250.0, 300.0]
    # with promotion (factor 1): b, waiting from 110, is promoted once it has waited 50 s (t=160)
    # and takes the cluster back from a (queue 0 before queue 1)
    res = simulate(
        cluster,
        b.build(),
        _repack(thresholds_gpu_s=[100], starvation_factor=1),  # type: ignore[arg-type]
        execution=KEEP,
    )
    assert res.end.tolist()[1] < 300.0
