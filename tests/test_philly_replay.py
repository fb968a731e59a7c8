"""The real Philly trace, end to end: every one of the 82,247 jobs ends, and the invariants hold."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from kant.config import load_policy
from kant.metrics.recorder import JobStatus
from kant.metrics.summary import summarize
from kant.model import JobTable, Placement
from kant.sim import Simulator
from kant.traces import load_cluster


class _Recording(Simulator):
    def __init__(self, *a, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*a, **kw)
        self.log: list[tuple[int, float, Placement]] = []

    def _started(self, job: int, now: float, placement: Placement) -> None:
        self.log.append((job, now, placement))
        super()._started(job, now, placement)


def test_philly_trace_reads_all_jobs(philly_jobs: JobTable) -> None:
    jobs = philly_jobs
    assert len(jobs) == 82_247
    # the README's gang-size counts: 1: 76,627; 2: 1,818; ...; 128: 3
    sizes, counts = np.unique(jobs.total_gpus, return_counts=True)
    assert dict(zip(sizes.tolist(), counts.tolist(), strict=True)) == {
        1: 76_627, 2: 1_818, 4: 1_870, 8: 1_643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3
    }
    assert len(jobs.tenant_names) == 15
    assert np.all(np.diff(jobs.submit) >= 0) and jobs.submit[0] == 0


@pytest.mark.slow
def test_full_philly_replay_every_job_ends(philly_jobs: JobTable) -> None:
    jobs = philly_jobs
    cluster = load_cluster("philly")
    sim = _Recording(cluster, jobs, load_policy("volcano-binpack"), check_every=5_000)
    res = sim.run()
    assert np.all(res.status == JobStatus.FINISHED)  # the philly cluster fits every gang (max 128 GPUs)
    # gangs atomic
    assert all(len(p.nodes) == jobs.workers[j] for j, _, p in sim.log)
    # GPU-seconds conserved
    np.testing.assert_allclose(res.gpu_seconds, jobs.duration * jobs.total_gpus)
    # no GPU double-booked: independent sweep per node over all run intervals
    deltas: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for j, start, p in sim.log:
        for node, count in p.per_node.items():
            deltas[node].append((start, count * p.gpus))
            deltas[node].append((float(res.end[j]), -count * p.gpus))
    for node, ds in deltas.items():
        ds.sort(key=lambda x: (x[0], x[1]))  # releases (negative) first at equal times
        used = np.cumsum([d for _, d in ds])
        assert used.max() <= cluster.gpus[node]
    sim.scheduler.state.check()
    m = summarize(res)
    assert m.counts.finished == 82_247
    assert m.gar.window is not None and 0 < m.gar.window <= 1
    assert m.sor is not None and 0 < m.sor <= 1
