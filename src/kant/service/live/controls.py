"""A user's controls of a job, as Slurm's ``scontrol``: hold and release a pending job, change a
pending job's name, priority, estimate or time limit, requeue a running job. Carried out on the
loop's thread (:class:`JobControls`, beside :class:`~kant.service.live.nodes.NodeOps`) on the live
state; each is a job update and an event in this turn's changes."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from kant.service.db.jobs import JobUpdate
from kant.service.errors import Invalid, NotFound
from kant.service.live.arrival import Arrival
from kant.service.live.state import Active, LiveState

__all__ = ["JobControls"]


class JobControls:
    """Hold, release, update and requeue of the live state's jobs (see the module docstring)."""

    def __init__(self, live: LiveState) -> None:
        self.live = live

    def _own(self, job_id: int, tenant: str | None, what: str) -> Active:
        """The active job ``job_id`` if ``tenant`` (None: an admin) may change it."""
        info = self.live.active.get(job_id)
        if info is None or (tenant is not None and info.tenant != tenant):
            held = self.live.deps.held.get(job_id)
            if held is not None and (tenant is None or held.arrival.job.tenant == tenant):
                raise Invalid(f"job {job_id} waits for its dependency ({held.reason()}): it cannot be {what}")
            parked = self.live.parked_task(job_id) if self.live.arrays else None
            if parked is not None and (tenant is None or parked[1].parked[job_id].job.tenant == tenant):
                raise Invalid(f"job {job_id} waits for a place in its array ({parked[1].reason(parked[0])}): it "
                              f"cannot be {what}")
            raise NotFound(f"job {job_id} is not pending or running")
        return info

    def hold(self, job_id: int, tenant: str | None, by: str, now: float) -> str:
        """Take a pending job out of the queue until it is released (Slurm's ``scontrol hold``)."""
        info = self._own(job_id, tenant, "held")
        if info.row in self.live.sched.running:
            raise Invalid(f"job {job_id} is running: only a pending job can be held (kant requeue stops it)")
        if info.held is None:
            self.live.sched.cancel(info.row, now)
            info.held = by
            why = f"JobHeld: held by {by} (kant release {job_id})"  # (kant.service.live.reads.held_reason)
            self.live.changes.job(JobUpdate(job_id, held=by, reason=why))
            self.live.changes.event(now, "held", job_id, None, info.tenant, why)
            self.live.instant.changed = True
        return "held"

    def release(self, job_id: int, tenant: str | None, by: str, now: float) -> str:
        """A held job goes back to the queue (with its submit time)."""
        info = self._own(job_id, tenant, "released")
        if info.held is None:
            raise Invalid(f"job {job_id} is not held")
        info.held = None
        self.live.changes.job(JobUpdate(job_id, held=None, reason=info.requeued))
        self.live.changes.event(now, "released", job_id, None, info.tenant, f"released by {by}")
        return self._requeued(info, now)

    def _requeued(self, info: Active, now: float) -> str:
        """``info`` (out of the queue) joins it again."""
        status = self.live.sched.submit(info.row, now)
        info.queued_cycle = self.live.sched.cycles
        self.live.instant.changed = True
        if status.ok:
            return "pending"
        self.live.pending_by_tenant[info.tenant] -= 1
        del self.live.active[info.id]
        self.live.end(info.id, info.tenant, "unschedulable", now, reason=str(status))
        return "unschedulable"

    def update(self, job_id: int, tenant: str | None, by: str, now: float, fields: Mapping[str, Any]) -> str:
        """Change a pending job's ``name``, ``priority``, ``estimate_s`` or ``time_limit_s`` (Slurm's
        ``scontrol update``); it keeps its place in time (its submit time)."""
        live = self.live
        held = live.deps.held.get(job_id)
        parked = live.parked_task(job_id) if live.arrays and job_id not in live.active else None
        if held is not None and job_id not in live.active and (tenant is None or held.arrival.job.tenant == tenant):
            # waiting for its dependency: only the stored job changes (it joins the store when released)
            a = held.arrival
            held.arrival = Arrival(a.id, dataclasses.replace(a.job, **fields), a.submit_time)
            owner = a.job.tenant
        elif parked is not None and (tenant is None or parked[1].parked[job_id].job.tenant == tenant):
            a = parked[1].parked[job_id]  # waiting for a place in its array: likewise
            parked[1].parked[job_id] = Arrival(a.id, dataclasses.replace(a.job, **fields), a.submit_time)
            owner = a.job.tenant
        else:
            info = self._own(job_id, tenant, "updated")
            owner = info.tenant
            if info.row in self.live.sched.running:
                raise Invalid(f"job {job_id} is running: only a pending job can be updated")
            row = info.row
            queued = row in self.live.sched.queue
            if queued:
                self.live.sched.cancel(row, now)
            values: dict[str, float] = {}
            if "priority" in fields:
                values["priority"] = int(fields["priority"])
            if "estimate_s" in fields:
                est = fields["estimate_s"]
                values["estimate"] = self.live.default_estimate if est is None else float(est)
                values["user_estimate"] = math.nan if est is None else float(est)
            if "time_limit_s" in fields:
                limit = fields["time_limit_s"]
                values["time_limit"] = math.inf if limit is None else float(limit)
                info.time_limit_s = limit
            self.live.sched.jobs.update(row, name=fields.get("name"), **values)
            if queued:
                self._requeued(info, now)
        self.live.changes.job(JobUpdate(job_id, **fields))
        said = ", ".join(f"{k} {v}" for k, v in fields.items())
        self.live.changes.event(now, "updated", job_id, None, owner, f"updated by {by}: {said}")
        self.live.instant.changed = True
        return "updated"

    def requeue_job(self, job_id: int, tenant: str | None, by: str, now: float) -> str:
        """Stop a running job as a preemption does (its checkpoint kept) and queue it again (Slurm's
        ``scontrol requeue``)."""
        info = self._own(job_id, tenant, "requeued")
        if info.row not in self.live.sched.running:
            raise Invalid(f"job {job_id} is pending: only a running job can be requeued")
        names = self.live.sched.cluster.names
        placement = self.live.sched.interrupt(info.row, now)
        self.live.ran(info)
        self.live.changes.stop(job_id, "preempt")
        self.live.requeue(info, now, f"requeued by {by}", "requeued", names[placement.nodes[0]])
        self.live.instant.changed = True
        return "pending"
