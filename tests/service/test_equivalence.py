"""Same arrivals, same results: a Philly slice driven through the live service (simulated executor,
manual clock) starts the same jobs at the same times on the same nodes as ``kant simulate`` on it.

The service gets each job when the trace says it arrives (the clock is moved to that instant with
``hold``, the jobs of the instant are submitted, and the next move runs the instant's cycle, as the
simulator does), with the estimate the simulator plans with (Philly has none: the true duration) and the
duration the simulated executor runs it for. ``KANT_EQUIV_JOBS`` sets the slice (default 1,500).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from kant.config import load_policy
from kant.model.job import JobTable
from kant.model.state import Placement
from kant.sim import Simulator
from kant.traces import load_cluster
from service.serve_proc import running_server

CLUSTER = "12x8:V100,leaf=2,spine=2"


def fast_folder(tmp_path: Path) -> Path:
    """A folder in memory when there is one (this test is about results, not durability: commits
    need not wait for the disk)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        folder = shm / f"kant-{tmp_path.name}-{os.getpid()}"
        folder.mkdir(exist_ok=True)
        return folder
    return tmp_path


class Binds:
    def __init__(self) -> None:
        self.first: dict[int, tuple[str, ...]] = {}
        self.names: tuple[str, ...] = ()

    def bind(self, job: int, placement: Placement) -> None:
        self.first.setdefault(job, tuple(self.names[n] for n in placement.nodes))

    def evict(self, job: int, placement: Placement) -> None:
        pass


def simulate(jobs: JobTable, policy: str) -> tuple[np.ndarray, dict[int, tuple[str, ...]]]:
    cluster = load_cluster(CLUSTER)
    sim = Simulator(cluster, jobs, load_policy(policy))
    binds = Binds()
    binds.names = cluster.names
    sim.scheduler.binder = binds
    res = sim.run()
    return res.first_start, binds.first


@pytest.mark.parametrize("policy", ["kant", "volcano-binpack"])
def test_live_service_gives_the_simulators_starts_and_placements(philly_jobs: JobTable, tmp_path: Path,
                                                                   policy: str) -> None:
    n = int(os.environ.get("KANT_EQUIV_JOBS", "1500"))
    jobs = philly_jobs.take(np.arange(n)).sorted_by_submit()
    sim_start, sim_nodes = simulate(jobs, policy)

    t0 = time.perf_counter()
    with running_server(tmp_path, f"sqlite:///{fast_folder(tmp_path) / 'eq.db'}", cluster=CLUSTER, policy=policy,
                        extra=["--clock-start", str(float(jobs.submit[0]))]) as srv:
        adm = srv.admin
        for tenant in jobs.tenant_names:
            assert adm.post("/v1/tenants", json={"name": tenant}).status_code == 201
        submit = jobs.submit.tolist()
        i = 0
        while i < n:
            t = submit[i]
            srv.advance(t, hold=True)  # the instant's events; its cycle after its arrivals, as simulated
            batch = []
            while i < n and submit[i] == t:
                d = float(jobs.duration[i])
                batch.append({"name": str(i), "tenant": jobs.tenant_names[int(jobs.tenant[i])],
                              "workers": int(jobs.workers[i]), "gpus_per_worker": int(jobs.gpus_per_worker[i]),
                              "estimate_s": d if d > 0 else None, "duration_s": d})
                i += 1
            r = adm.post("/v1/jobs/batch", json={"jobs": batch})
            assert r.status_code == 201, r.text
        srv.advance(submit[-1] + 1e9)  # every job ends
        live: dict[int, dict[str, object]] = {}
        after = None
        while True:
            page = adm.get("/v1/jobs", params={"limit": 1000, **({"after": after} if after else {})}).json()
            for job in page["items"]:
                live[int(job["name"])] = job
            after = page["next"]
            if after is None:
                break
    wall = time.perf_counter() - t0
    print(f"{n} Philly jobs through the live service ({policy}): {wall:.1f} s")
    assert len(live) == n
    differ = []
    for i in range(n):
        job = live[i]
        start = job["first_start_time"]
        want = sim_start[i]
        if np.isnan(want):
            if start is not None:
                differ.append((i, "started live only", start))
            continue
        if start != want or tuple(job["placement"] or ()) != sim_nodes[i]:  # type: ignore[arg-type]
            differ.append((i, (start, job["placement"]), (want, sim_nodes[i])))
    assert not differ, f"{len(differ)} jobs differ, first: {differ[:5]}"
    assert sum(1 for j in live.values() if j["state"] == "finished") == int(np.isfinite(sim_start).sum())
