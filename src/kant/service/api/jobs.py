"""Jobs (gangs): submit one or a batch (answered once committed), list and page, one job with its
events and why it waits, its workers' output, cancel. A tenant sees its own jobs only (another's is
404)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response

from kant.service import admission, queries
from kant.service.api.deps import MAX_ID, Id, Svc, Who
from kant.service.auth import Principal
from kant.service.db.jobs import JobRow
from kant.service.db.schema import JOB_STATES
from kant.service.errors import Forbidden, Invalid, NotFound, Rejected
from kant.service.schemas import (
    BatchOut,
    EventOut,
    JobBatch,
    JobDetail,
    JobOut,
    JobPage,
    JobSubmit,
    LogsOut,
    SubmitOut,
    WhyOut,
    job_page_json,
)
from kant.service.server import Service

__all__ = ["router"]

router = APIRouter(tags=["jobs"])


def visible_job(svc: Service, job_id: int, p: Principal) -> JobRow:
    """The job, if ``p`` may see it (:class:`NotFound` otherwise, as if it did not exist)."""
    row = svc.db.jobs.get(job_id)
    if row is None or not p.sees(row.tenant):
        raise NotFound(f"no job {job_id}")
    return row


@router.post("/v1/jobs", status_code=201, response_model=SubmitOut, response_model_exclude_none=True,
             responses={200: {"model": SubmitOut, "description": "the same idempotency key was submitted before"}})
async def submit_job(body: JobSubmit, p: Who, response: Response, svc: Svc,
                     idempotency_key: Annotated[str | None, Header(max_length=128)] = None) -> SubmitOut:
    """Submit one gang. Answered once the job is committed to the database."""
    loop = svc.leading()
    job = admission.new_job(body, p, idempotency_key, svc.tenants, loop.view)
    admission.check_dependency(job, p, svc.db.jobs.get)
    if body.array is not None:  # a job array: one job per task, in one commit (consecutive ids)
        results = await svc.writer.submit(admission.array_tasks(job, body.array))
        return SubmitOut(id=results[0][0], created=True, tasks=len(results))
    ((job_id, created),) = await svc.writer.submit([job])
    if not created:
        response.status_code = 200
    return SubmitOut(id=job_id, created=created)


@router.post("/v1/jobs/batch", status_code=201, response_model=BatchOut, response_model_exclude_none=True)
async def submit_jobs(body: JobBatch, p: Who, svc: Svc) -> BatchOut:
    """Submit up to 1,000 jobs in one request (one commit; each may carry its idempotency key)."""
    loop = svc.leading()
    jobs = [admission.new_job(j, p, None, svc.tenants, loop.view) for j in body.jobs]
    for job, j in zip(jobs, body.jobs, strict=True):
        admission.check_dependency(job, p, svc.db.jobs.get)
        if j.array is not None:
            raise Rejected("array", "a job array is submitted alone (POST /v1/jobs), not in a batch")
    results = await svc.writer.submit(jobs)
    return BatchOut(jobs=[SubmitOut(id=i, created=c) for i, c in results])


@router.get("/v1/jobs", response_model=JobPage)
def list_jobs(p: Who, svc: Svc, state: Annotated[list[str] | None, Query()] = None,
              tenant: Annotated[str | None, Query(max_length=64)] = None,
              after: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
              limit: Annotated[int, Query(ge=1, le=1000)] = 100,
              order: Annotated[str, Query(pattern="^(asc|desc)$")] = "asc") -> JobPage:
    """Jobs, oldest first (or newest with order=desc), filtered by state and (admins) tenant; pages by
    id: pass the answer's `next` as `after`."""
    for s in state or ():
        if s not in JOB_STATES:
            raise Rejected("", f"unknown state {s!r}; states: {', '.join(JOB_STATES)}")
    if not p.admin:
        if tenant is not None and tenant != p.tenant:
            raise Forbidden("a tenant lists its own jobs only")
        tenant = p.tenant
    rows = svc.db.jobs.list(tenant=tenant, states=state, after_id=after, limit=limit + 1,
                            descending=order == "desc")
    more = len(rows) > limit
    rows = rows[:limit]
    reasons = queries.pending_reasons(svc.loop, [r.id for r in rows if r.state == "pending"])
    # (as JSON here: FastAPI would validate the page's 1,000 jobs once more against response_model)
    return Response(job_page_json(rows, reasons, rows[-1].id if more else None),  # type: ignore[return-value]
                    media_type="application/json")


@router.get("/v1/jobs/{job_id}", response_model=JobDetail)
def get_job(job_id: Id, p: Who, svc: Svc) -> JobDetail:
    """One job with its events and, while it waits, why."""
    row = visible_job(svc, job_id, p)
    why = queries.why(svc.loop, svc.twin, svc.clock, job_id) if row.state == "pending" else None
    out = JobOut.of(row, why.reason if why is not None else None)
    events = [EventOut.of(e) for e in svc.db.events.of_job(job_id)]
    return JobDetail(**out.model_dump(), events=events, why=why)


@router.get("/v1/jobs/{job_id}/why", response_model=WhyOut)
def why_job(job_id: Id, p: Who, svc: Svc) -> WhyOut:
    """Why a job waits (the plugin's reason) and how many jobs are ahead of it."""
    row = visible_job(svc, job_id, p)
    if row.state == "pending":
        why = queries.why(svc.loop, svc.twin, svc.clock, job_id)
        if why is not None:
            return why
    return WhyOut(id=job_id, state=row.state, reason=row.reason or row.state)


@router.get("/v1/jobs/{job_id}/logs", response_model=LogsOut)
def job_logs(job_id: Id, p: Who, svc: Svc, worker: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
             run: Annotated[int | None, Query(ge=1, le=1_000_000_000)] = None,
             offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
             limit: Annotated[int, Query(ge=1, le=1 << 20)] = 1 << 20) -> LogsOut:
    """Output (stdout and stderr) of one worker of a job from byte `offset` (the latest run unless
    `run`); a follower passes the answer's `next_offset` until `complete`."""
    row = visible_job(svc, job_id, p)
    workers = max(row.workers, row.max_workers or 0)  # an elastic gang may run on up to max_workers
    if worker >= workers:
        raise NotFound(f"job {job_id} has no worker {worker}: its workers are 0..{workers - 1}")
    if run is not None and run > row.runs:
        raise NotFound(f"job {job_id} has no run {run}: " + (f"its runs are 1..{row.runs}" if row.runs else
                                                             "it has not run"))
    chunk = svc.leading().executor.read_logs(job_id, worker, run=run, offset=offset, limit=limit)
    ended = row.state not in ("pending", "running")
    if chunk is None:
        return LogsOut(id=job_id, run=0, worker=worker, workers=0, offset=0, next_offset=0, size=0, text="",
                       complete=ended, kept=False)
    return LogsOut(id=job_id, run=chunk.run, worker=worker, workers=chunk.workers, offset=chunk.offset,
                   next_offset=chunk.next_offset, size=chunk.size, text=chunk.text,
                   complete=ended and chunk.next_offset >= chunk.size, kept=True)


@router.post("/v1/jobs/{job_id}/cancel", response_model=JobOut)
def cancel_job(job_id: Id, p: Who, svc: Svc) -> JobOut:
    """Cancel a pending or running job (every worker stops)."""
    row = visible_job(svc, job_id, p)
    if row.state not in ("pending", "running"):
        raise Invalid(f"job {job_id} is {row.state}: only pending or running jobs can be cancelled")
    svc.leading().cancel(job_id, p.scope(), p.who)
    return JobOut.of(svc.db.jobs.get(job_id))  # type: ignore[arg-type]
