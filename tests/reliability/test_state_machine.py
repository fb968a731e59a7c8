"""A Hypothesis rule-based state machine over the live scheduler (the service's :class:`ServiceLoop`
on a SQLite database, manual clock, simulated executor, a policy with quotas): random submits (as
the API's writer makes them: committed first, then handed to the loop), cancels, node cordons,
drains, failures and repairs, jobs that end or fail, clock moves, and restarts of the service
(a new loop rebuilt from the database, as after ``kill -9``: every turn of the loop has committed).
After every step the invariants hold, read from the database (the truth after a crash) and checked
against the loop:

* no GPU is double-booked: the running jobs' workers on a node hold at most its GPUs, and nothing
  runs on a failed node;
* gangs are whole: a running job has one node per worker;
* no tenant holds more GPUs than its ``max_gpus`` (the quota plugin lets a tenant borrow beyond its
  ``guaranteed_gpus`` up to that cap, never past it);
* every accepted job is in the database exactly once, in exactly one state; an ended job never
  changes again; the database's pending and running jobs are exactly the loop's active ones, and
  its running ones are the scheduler's running ones, on the same nodes.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kant.config import parse_policy
from kant.errors import KantError
from kant.service.clock import ManualClock
from kant.service.db.database import Database
from kant.service.db.jobs import NewJob
from kant.service.db.schema import JOB_STATES
from kant.service.executors import SimulatedExecutor
from kant.service.live.state import Arrival
from kant.service.loop import CLOCK_KEY, Advance, Arrivals, Cancel, Command, NodeOp, ServiceLoop
from kant.traces import load_cluster

CLUSTER = "4x8:V100,leaf=2"
NODES = [f"v100-{i}" for i in range(4)]
POLICY = {"name": "kant-quota", "actions": [{"name": "allocate", "args": {"blocking": True}}, "backfill"],
          "plugins": [{"name": "priority"}, {"name": "fifo"}, {"name": "quota"}, {"name": "e-binpack"}]}
TENANTS = {"a": (8, 16), "b": (None, 24), "c": (None, None)}  # guaranteed, max GPUs
ENDED = {"finished", "failed", "cancelled", "unschedulable"}
STEPS: Counter[str] = Counter()  # steps taken over every run (printed by each teardown: pytest -s)
SCRATCH = Path("/dev/shm") if Path("/dev/shm").is_dir() else None  # fsync on tmpfs: fast steps


class LiveScheduler(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="kant-sm-", dir=SCRATCH))
        self.url = f"sqlite:///{self.folder / 'kant.db'}"
        self.accepted: set[int] = set()
        self.ended: dict[int, str] = {}  # job id -> its final state, once seen
        self.restarts = 0
        self.loop: ServiceLoop
        self.db: Database

    @initialize()
    def boot(self) -> None:
        db = Database(self.url)
        db.migrate()
        for name, (g, m) in TENANTS.items():
            db.tenants.create(name, guaranteed_gpus=g, max_gpus=m)
        db.close()
        self._start()

    def _start(self) -> None:
        self.db = Database(self.url)
        saved = self.db.meta.get(CLOCK_KEY)
        start = max(float(saved) if saved else 0.0, self.db.events.last_time() or 0.0)  # as kant serve resumes
        self.loop = ServiceLoop(self.db, parse_policy(POLICY, "test"), ManualClock(start), SimulatedExecutor())
        self.loop.load(load_cluster(CLUSTER))

    def teardown(self) -> None:
        STEPS["runs"] += 1
        print(f"state machine so far: {dict(STEPS)}")
        self.db.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _do(self, cmd: Command) -> Any:
        cmd.reply = Future()
        self.loop.turn([cmd])
        return cmd.reply.exception() or cmd.reply.result()

    @property
    def now(self) -> float:
        return self.loop.clock.now()

    # --- rules -------------------------------------------------------------------------------------
    @rule(tenant=st.sampled_from(sorted(TENANTS)), workers=st.integers(1, 3), gpus=st.sampled_from([0, 1, 2, 4, 8]),
          duration=st.integers(0, 50), estimate=st.integers(1, 60), exit_code=st.sampled_from([0, 0, 0, 3]),
          priority=st.integers(0, 2), n=st.integers(1, 3))
    def submit(self, tenant: str, workers: int, gpus: int, duration: int, estimate: int, exit_code: int,
               priority: int, n: int) -> None:
        labels = {"kant.io/sim-exit-code": str(exit_code)} if exit_code else {}
        jobs = [NewJob(tenant=tenant, user="u", name=f"j{len(self.accepted) + k}", workers=workers,
                       gpus_per_worker=gpus, priority=priority, estimate_s=float(estimate),
                       duration_s=float(duration), labels=labels) for k in range(n)]
        STEPS["submit"] += 1
        results = self.db.jobs.insert(jobs, now_time=self.now, now_wall=time.time(), epoch=self.loop.epoch)
        self.accepted.update(i for i, _ in results)
        self.loop.turn([Arrivals([Arrival(i, j, self.now) for (i, _), j in zip(results, jobs, strict=True)])])

    @precondition(lambda self: bool(self.accepted))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(sorted(self.accepted)))
        before = self.db.jobs.get(job)
        assert before is not None
        STEPS["cancel"] += 1
        out = self._do(Cancel(job, None, "admin"))
        if before.state in ENDED:
            assert isinstance(out, KantError)  # an ended job cannot be cancelled
        else:
            assert out == "cancelled"

    @rule(node=st.sampled_from(NODES), op=st.sampled_from(["cordon", "uncordon", "drain", "fail", "repair"]))
    def node_op(self, node: str, op: str) -> None:
        STEPS[f"node {op}"] += 1
        out = self._do(NodeOp(node, op, reason="test"))
        assert not isinstance(out, BaseException) or isinstance(out, KantError), out

    @rule(dt=st.sampled_from([0.0, 1.0, 5.0, 20.0, 100.0]))
    def advance(self, dt: float) -> None:
        STEPS["advance"] += 1
        out = self._do(Advance(self.now + dt))
        assert not isinstance(out, BaseException), out

    @rule(graceful=st.booleans())
    def restart(self, graceful: bool) -> None:
        """The service stops (or dies: every turn has committed, so the database is as after kill -9)
        and starts again, rebuilt from the database."""
        STEPS["restart"] += 1
        before = self._running()
        if graceful:
            self.loop.stop()
        self.db.close()
        self._start()
        self.restarts += 1
        assert self._running() == before  # running jobs are where they were

    # --- invariants ----------------------------------------------------------------------------------
    def _running(self) -> dict[int, tuple[str, ...]]:
        return {j.id: tuple(j.placement or ()) for j in self.db.jobs.list(states=["running"], limit=100_000)}

    @invariant()
    def invariants_hold(self) -> None:
        if not hasattr(self, "loop"):
            return
        STEPS["invariant checks"] += 1
        rows = self.db.jobs.list(limit=100_000)
        ids = [r.id for r in rows]
        assert len(ids) == len(set(ids))  # once each
        assert set(ids) == self.accepted  # every accepted job, and only those
        nodes = {n.name: n for n in self.db.nodes.list()}
        held: Counter[str] = Counter()
        by_tenant: Counter[str] = Counter()
        for r in rows:
            assert r.state in JOB_STATES
            if r.id in self.ended:
                assert r.state == self.ended[r.id], (r.id, self.ended[r.id], r.state)  # an end is final
            elif r.state in ENDED:
                self.ended[r.id] = r.state
            if r.state == "running":
                assert r.placement is not None and len(r.placement) == r.workers, r  # the gang is whole
                for node in r.placement:
                    held[node] += r.gpus_per_worker
                    assert nodes[node].state != "down", (r.id, node)
                by_tenant[r.tenant] += r.workers * r.gpus_per_worker
        for node, gpus in held.items():
            assert gpus <= nodes[node].gpus, (node, gpus)  # no GPU double-booked
        for tenant, (_, cap) in TENANTS.items():
            assert cap is None or by_tenant[tenant] <= cap, (tenant, by_tenant[tenant], cap)
        # the database and the live scheduler agree
        active = {r.id for r in rows if r.state in ("pending", "running")}
        assert set(self.loop.active) == active
        sched = self.loop.sched
        names = sched.cluster.names
        live = {self.loop.ids[row]: tuple(names[n] for n in sched.state.allocations[row].nodes)
                for row in sched.running}
        assert live == {r.id: tuple(r.placement or ()) for r in rows if r.state == "running"}
        assert self.loop.view is not None and self.loop.view.allocated_gpus == sum(held.values())


# no shrinking: a failure prints its steps at once (shrinking them takes minutes on a database)
LiveScheduler.TestCase.settings = settings(max_examples=20, stateful_step_count=30, deadline=None, derandomize=True,
                                           phases=[Phase.explicit, Phase.reuse, Phase.generate],
                                           suppress_health_check=[HealthCheck.too_slow])
TestLiveScheduler = LiveScheduler.TestCase
