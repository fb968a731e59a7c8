"""A user's controls of a job, as Slurm's ``scontrol``: hold and release a pending job, change a
pending job's name, priority, estimate or time limit, requeue a running job (stopped as a preemption
stops it, its checkpoint kept, and queued again). Each is carried out by the scheduling loop
(:class:`~kant.service.live.controls.JobControls`) and written with an event (``held``, ``released``,
``updated``, ``requeued``) in the job's history and the event stream. A tenant controls its own jobs
only (another's is 404)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from kant.service.api.deps import Id, Svc, Who
from kant.service.api.jobs import visible_job
from kant.service.errors import Rejected
from kant.service.loop import ServiceLoop
from kant.service.schemas import JobOut, Payload
from kant.text import format_duration

__all__ = ["JobChange", "router"]

router = APIRouter(tags=["jobs"])


class JobChange(Payload):
    """New values for a pending job (fields left out are not changed; null clears an estimate or a
    time limit)."""

    name: str | None = Field(default=None, max_length=256)
    priority: int | None = Field(default=None, ge=-1_000_000, le=1_000_000)
    estimate_s: float | None = Field(default=None, gt=0, le=10**9, allow_inf_nan=False)
    time_limit_s: float | None = Field(default=None, gt=0, le=10**9, allow_inf_nan=False)


def _answer(svc: Any, job_id: int) -> JobOut:
    return JobOut.of(svc.db.jobs.get(job_id))


@router.post("/v1/jobs/{job_id}/hold", response_model=JobOut)
def hold_job(job_id: Id, p: Who, svc: Svc) -> JobOut:
    """Hold a pending job: it leaves the queue (reason `JobHeld`) until released."""
    visible_job(svc, job_id, p)
    svc.leading().call(lambda lp: lp.controls.hold(job_id, p.scope(), p.who, lp.clock.now()))
    return _answer(svc, job_id)


@router.post("/v1/jobs/{job_id}/release", response_model=JobOut)
def release_job(job_id: Id, p: Who, svc: Svc) -> JobOut:
    """Release a held job: it joins the queue again, with its submit time."""
    visible_job(svc, job_id, p)
    svc.leading().call(lambda lp: lp.controls.release(job_id, p.scope(), p.who, lp.clock.now()))
    return _answer(svc, job_id)


@router.post("/v1/jobs/{job_id}/requeue", response_model=JobOut)
def requeue_job(job_id: Id, p: Who, svc: Svc) -> JobOut:
    """Requeue a running job: its run is stopped as a preemption stops it (a checkpointing job resumes
    from its checkpoint) and it waits in the queue again."""
    visible_job(svc, job_id, p)
    svc.leading().call(lambda lp: lp.controls.requeue_job(job_id, p.scope(), p.who, lp.clock.now()))
    return _answer(svc, job_id)


class ArrayCancelled(BaseModel):
    array_id: int
    cancelled: int = Field(description="tasks cancelled (those pending or running)")


@router.post("/v1/arrays/{array_id}/cancel", response_model=ArrayCancelled)
def cancel_array(array_id: Id, p: Who, svc: Svc) -> ArrayCancelled:
    """Cancel every pending or running task of a job array (404 if the caller sees none)."""
    n = svc.leading().call(lambda lp: lp.live.cancel_array(array_id, p.scope(), p.who, lp.clock.now()))
    return ArrayCancelled(array_id=array_id, cancelled=int(n))


@router.patch("/v1/jobs/{job_id}", response_model=JobOut)
def update_job(job_id: Id, body: JobChange, p: Who, svc: Svc) -> JobOut:
    """Change a pending job's name, priority, estimate or time limit (the tenant's maximum holds)."""
    row = visible_job(svc, job_id, p)
    fields = {k: getattr(body, k) for k in body.model_fields_set}
    for k in ("name", "priority"):
        if k in fields and fields[k] is None:
            raise Rejected(k, "cannot be null")
    if not fields:
        raise Rejected("", "nothing to change: give name, priority, estimate_s or time_limit_s")
    limit = fields.get("time_limit_s")
    _, maximum = svc.tenants.time_limits(row.tenant)
    if "time_limit_s" in fields and maximum is not None and (limit is None or limit > maximum):
        raise Rejected(
            "time_limit_s",
            f"a time limit of {format_duration(limit) if limit else 'none'} is above "
            f"tenant {row.tenant}'s maximum of {format_duration(maximum)}",
        )

    def change(lp: ServiceLoop) -> str:
        return lp.controls.update(job_id, p.scope(), p.who, lp.clock.now(), fields)

    svc.leading().call(change)
    return _answer(svc, job_id)
