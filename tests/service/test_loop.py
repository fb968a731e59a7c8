"""The scheduling loop in-process (no HTTP): finished jobs leave memory (compaction) without changing
a decision, and a rebuilt loop resumes from the database."""

from __future__ import annotations

import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from kant.config import load_policy
from kant.model.cluster import NodeSpec
from kant.service.clock import ManualClock
from kant.service.db.database import Database
from kant.service.db.jobs import NewJob
from kant.service.errors import Invalid
from kant.service.executors import SimulatedExecutor
from kant.service.live.state import Arrival
from kant.service.loop import AddNode, Advance, Arrivals, Command, NodeOp, Scale, ServiceLoop
from kant.traces import load_cluster


def run(tmp: Path, name: str, compact_min: int) -> tuple[dict[int, tuple[float | None, list[str] | None]], list[int]]:
    """Submit 450 jobs over 300 instants on 4 x 8 GPUs (about 70% load: queues form and drain) and
    advance the manual clock through them;
    returns each job's (first start, placement) and the store's size after each instant."""
    db = Database(f"sqlite:///{tmp / name}")
    db.migrate()
    db.tenants.create("t")
    loop = ServiceLoop(db, load_policy("kant"), ManualClock(0.0), SimulatedExecutor(), compact_min=compact_min)
    loop.load(load_cluster("4x8:V100"))
    rng = np.random.default_rng(7)
    sizes = []
    for t in range(300):
        jobs = [NewJob(tenant="t", user="u", name=f"j{t}-{k}", workers=int(rng.integers(1, 3)),
                       gpus_per_worker=int(rng.choice([1, 2, 4])), estimate_s=float(rng.integers(2, 12)),
                       duration_s=float(rng.integers(1, 12))) for k in range(1 + t % 2)]
        ids = db.jobs.insert(jobs, now_time=float(t), now_wall=time.time())
        loop.turn([Arrivals([Arrival(i, j, float(t)) for (i, _), j in zip(ids, jobs, strict=True)])])
        loop.turn([Advance(float(t) + 1.0)])  # (the loop's thread is not started: turns run here)
        sizes.append(len(loop.sched.jobs))
    loop.turn([Advance(1e6)])
    out = {}
    for job in db.jobs.list(limit=10_000):
        out[job.id] = (job.first_start_time, job.placement)
    db.close()
    return out, sizes


def test_compaction_bounds_memory_and_changes_no_decision(tmp_path: Path) -> None:
    plain, plain_sizes = run(tmp_path, "plain.db", compact_min=1_000_000)
    compact, sizes = run(tmp_path, "compact.db", compact_min=50)
    assert plain_sizes[-1] == 450  # without compaction every job ever submitted stays in the store
    assert max(sizes) < 120  # with it, finished jobs leave: the store follows the active jobs
    assert compact == plain
    assert all(start is not None for start, _ in plain.values())


def test_the_twins_snapshot_decides_the_loops_next_cycle(tmp_path: Path) -> None:
    """Take the live loop's twin snapshot with a cycle owed, load it into a new scheduler: its cycle
    starts the jobs the loop's own cycle then starts, on the same nodes."""
    db = Database(f"sqlite:///{tmp_path / 'twin.db'}")
    db.migrate()
    db.tenants.create("t")
    loop = ServiceLoop(db, load_policy("kant"), ManualClock(0.0), SimulatedExecutor())
    loop.load(load_cluster("4x8:V100,leaf=2"))
    rng = np.random.default_rng(11)
    compared = started = 0
    for t in range(120):
        jobs = [NewJob(tenant="t", user="u", name=f"j{t}-{k}", workers=int(rng.integers(1, 3)),
                       gpus_per_worker=int(rng.choice([1, 2, 4, 8])), estimate_s=float(rng.integers(2, 12)),
                       duration_s=float(rng.integers(1, 16))) for k in range(2)]
        ids = db.jobs.insert(jobs, now_time=float(t), now_wall=time.time())
        loop.turn([Arrivals([Arrival(i, j, float(t)) for (i, _), j in zip(ids, jobs, strict=True)])])
        loop.turn([Advance(float(t) + 1.0, hold=True)])  # t + 1's ends are in; its cycle is owed
        snap = loop.twin_snapshot()
        twin = snap.scheduler()
        names = twin.cluster.names
        want = {snap.ids[row]: tuple(names[n] for n in p.nodes) for row, p in twin.cycle(t + 1.0).started}
        loop.turn([Advance(float(t) + 1.0)])  # the loop's own cycle at t + 1
        live_names = loop.sched.cluster.names
        got = {job_id: tuple(live_names[n] for n in loop.sched.state.allocations[info.row].nodes)
               for job_id, info in loop.active.items() if info.start == t + 1.0 and info.row in loop.sched.running}
        assert got == want, t
        compared += 1
        started += len(got)
    db.close()
    assert compared == 120 and started > 80  # (a queue formed and many owed cycles started work: 92 jobs)


def test_a_job_the_cycle_did_not_reach_says_what_it_is_behind(tmp_path: Path) -> None:
    """A blocking policy stops at the first job that cannot start: a job of another shape behind it
    was not looked at, and its reason names the job it waits behind and why that one waits."""
    db = Database(f"sqlite:///{tmp_path / 'behind.db'}")
    db.migrate()
    db.tenants.create("t")
    loop = ServiceLoop(db, load_policy("fifo-strict"), ManualClock(0.0), SimulatedExecutor())
    loop.load(load_cluster("1x8:V100"))
    jobs = [NewJob(tenant="t", user="u", name=n, workers=1, gpus_per_worker=g, estimate_s=100.0, duration_s=100.0)
            for n, g in (("a", 8), ("b", 8), ("c", 1))]
    ids = [i for i, _ in db.jobs.insert(jobs, now_time=0.0, now_wall=time.time())]
    loop.turn([Arrivals([Arrival(i, j, 0.0) for i, j in zip(ids, jobs, strict=True)])])
    loop.turn([Advance(0.0)])
    assert loop.why(ids[1])["reason"] == "[allocate] no free GPU in the cluster"
    why = loop.why(ids[2])
    assert why["reason"] == (f"waits behind job {ids[1]}, first in the queue, where the last cycle stopped: "
                             "[allocate] no free GPU in the cluster")
    assert why["behind"] == ids[1] and loop.why(ids[1])["behind"] is None
    # through the API's read: the summary says when the job ahead is predicted to start (a stand-in twin)
    from kant.service import queries
    from kant.service.twin import Predicted

    class Twin:
        predict_on = True
        as_of = 0.0  # (its last snapshot: the job was in it, with no prediction of its own)

        def predicted(self, job_id: int) -> Predicted | None:
            return Predicted(7200.0, 3600.0, 9000.0, 0.0, 8) if job_id == ids[1] else None

    loop.start()
    try:
        out = queries.why(loop, Twin(), loop.clock, ids[2])  # type: ignore[arg-type]
    finally:
        loop.stop()
    assert out is not None and out.behind == ids[1]
    assert out.behind_prediction_text == "predicted start in ~2h00m (1h00m - 2h30m)"
    assert out.summary is not None and out.summary.endswith(f"; job {ids[1]} (ahead of it): predicted start in ~2h00m "
                                                             "(1h00m - 2h30m)")
    db.close()


def test_scaling_down_removes_the_most_recently_started_replica(tmp_path: Path) -> None:
    """The live loop scales down in the simulated driver's order (kant.inference.replicas): queued
    replicas first, then the most recently started, whatever their ids."""
    db = Database(f"sqlite:///{tmp_path / 'scale.db'}")
    db.migrate()
    db.tenants.create("t")
    svc = db.services.create(tenant="t", name="s", gpus_per_replica=8, replicas=0, min_replicas=0, max_replicas=3)
    loop = ServiceLoop(db, load_policy("kant"), ManualClock(0.0), SimulatedExecutor())
    loop.load(load_cluster("2x8:V100"))
    loop.turn([Scale(svc.id, 2)])
    loop.turn([Advance(1.0)])
    first, second = sorted(loop.active)  # both run since 0
    node = loop.sched.cluster.names[loop.sched.state.allocations[loop.active[first].row].nodes[0]]
    loop.turn([NodeOp(node, "fail")])  # the first replica goes back to the queue ...
    loop.turn([Advance(2.0)])
    loop.turn([NodeOp(node, "repair")])  # (at 2: the next advance runs instant 2's cycle first)
    loop.turn([Advance(3.0)])  # ... and starts again at 2: it is now the newest run
    assert loop.active[first].start == 2.0 and loop.active[second].start == 0.0
    loop.turn([Scale(svc.id, 3)])  # a third replica: queued (no room)
    loop.turn([Advance(4.0)])
    third = max(loop.active)
    assert loop.active[third].row in loop.sched.queue
    loop.turn([Scale(svc.id, 1)])  # the queued one first, then the most recently started
    assert set(loop.active) == {second}
    assert {j.id: j.reason for j in db.jobs.list(limit=10) if j.state == "cancelled"} == {
        first: "cancelled by scale of service s to 1", third: "cancelled by scale of service s to 1"}
    db.close()


def test_a_refused_node_removal_leaves_the_node_where_it_was(tmp_path: Path) -> None:
    """Removing a node that a pending gang needs is refused (the rebuilt scheduler could never run the
    gang), and nothing changes: the node is still in memory, in the scheduler and in the database, and
    the loop keeps answering (it used to forget the node but keep it in the scheduler, and the next
    read of the nodes failed on the loop's thread)."""
    db = Database(f"sqlite:///{tmp_path / 'rm.db'}")
    db.migrate()
    db.tenants.create("t")
    loop = ServiceLoop(db, load_policy("kant"), ManualClock(0.0), SimulatedExecutor())
    loop.load(load_cluster("tiny"))  # 4 nodes x 8 GPUs

    def ask(cmd: Command) -> object:
        reply: Future[object] = Future()
        cmd.reply = reply
        loop.turn([cmd])
        return reply.exception(0) or reply.result(0)

    def submit(name: str, workers: int, t: float) -> None:
        jobs = [NewJob(tenant="t", user="u", name=name, workers=workers, gpus_per_worker=8, estimate_s=100.0,
                       duration_s=100.0)]
        ids = db.jobs.insert(jobs, now_time=t, now_wall=time.time())
        ask(Arrivals([Arrival(i, j, t) for (i, _), j in zip(ids, jobs, strict=True)]))

    assert ask(AddNode(NodeSpec("new1", "GPU", 8, 0, 0, "leaf-1", "spine-0"))) == "up"
    submit("one", 1, 0.0)
    ask(Advance(1.0))
    submit("big", 5, 1.0)  # 5 x 8 GPUs: only the 5-node cluster holds it; one node is busy, so it waits
    ask(Advance(2.0))
    refused = ask(NodeOp("new1", "remove"))
    assert isinstance(refused, Invalid)
    assert str(refused).startswith("node new1 cannot be removed: pending job ")
    assert "new1" in loop.sched.cluster.names and "new1" in loop.nodes
    assert [v.name for v in loop.node_views()][-1] == "new1"
    assert {n.name: n.state for n in db.nodes.list()}["new1"] == "up"


def test_the_twins_snapshot_says_where_its_run_time_history_is_cut(tmp_path: Path) -> None:
    """The twin's ratio history keeps the last N finished jobs: the snapshot carries each one's end and
    the cut (kant.twin.ratios: left truncation), so that every job that finished after the cut is in it."""
    db = Database(f"sqlite:///{tmp_path / 'cut.db'}")
    db.migrate()
    db.tenants.create("t")
    loop = ServiceLoop(db, load_policy("kant"), ManualClock(5.0), SimulatedExecutor(), ratio_history=20)
    loop.load(load_cluster("4x8:V100"))
    assert loop.twin_snapshot().ratios_from == 5.0  # (the load: nothing had finished before it)
    rng = np.random.default_rng(3)
    for t in range(5, 65):
        jobs = [NewJob(tenant="t", user="u", name=f"j{t}", workers=1, gpus_per_worker=int(rng.choice([1, 4])),
                       estimate_s=10.0, duration_s=float(rng.integers(1, 20)))]
        ids = db.jobs.insert(jobs, now_time=float(t), now_wall=time.time())
        loop.turn([Arrivals([Arrival(i, j, float(t)) for (i, _), j in zip(ids, jobs, strict=True)])])
        loop.turn([Advance(float(t) + 1.0)])
    snap = loop.twin_snapshot()
    ends = sorted(float(j.end_time) for j in db.jobs.list(limit=1000) if j.end_time is not None)
    cut = snap.ratios_from
    assert len(snap.ratios) == len(snap.ended) == 20 and len(ends) > 20
    assert cut is not None and cut > 5.0 and min(snap.ended) >= cut
    assert sum(e > cut for e in ends) <= 20 <= sum(e >= cut for e in ends)
    assert sorted(snap.ended) == ends[-20:]
    db.close()
