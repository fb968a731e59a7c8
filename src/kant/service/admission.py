"""What a submit must pass before it is written: whose it is (an admin names the tenant, else it is
the tenant ``default``, made on first use; a tenant token submits for its own tenant only), that the
tenant exists, and that some node of this cluster could ever hold it. The policy's own rules (quotas,
topology) are the scheduler's: such a job is written and marked unschedulable there. Refusals are
domain errors (:class:`Rejected`, :class:`Forbidden`), which the API answers 422 and 403."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from kant.model.deps import parse_dependency
from kant.service.arrays import parse_array
from kant.service.auth import Principal
from kant.service.db.jobs import JobRow, NewJob
from kant.service.errors import Forbidden, Rejected
from kant.service.live.view import LiveView
from kant.service.schemas import JobSubmit, ServiceIn
from kant.service.tenants import DEFAULT_TENANT, Tenants
from kant.text import format_duration

__all__ = ["array_tasks", "check_dependency", "check_request", "new_job", "service_tenant"]


def check_request(view: LiveView | None, body: JobSubmit) -> None:
    """Refuse a request no node of this cluster could ever hold (``view``: the loop's; None on a
    standby, which checks nothing)."""
    if view is None:
        return
    if body.gpu_type is not None:
        allowed = [t.strip() for t in body.gpu_type.split("|")]
        if not any(t in view.gpu_types for t in allowed):
            raise Rejected("gpu_type", f"no node has GPU type {body.gpu_type}; the cluster has "
                                       f"{', '.join(view.gpu_types)}")
    if body.gpus_per_worker > view.max_gpus_per_node:
        raise Rejected("gpus_per_worker", f"{body.gpus_per_worker} GPUs, but the largest node has "
                                          f"{view.max_gpus_per_node}")
    if body.workers * body.gpus_per_worker > view.total_gpus:
        raise Rejected("workers", f"{body.workers} x {body.gpus_per_worker} GPUs is more than the "
                                  f"cluster's {view.total_gpus} GPUs")


def new_job(body: JobSubmit, p: Principal, key: str | None, tenants: Tenants, view: LiveView | None) -> NewJob:
    """The job to write for ``p``'s submit of ``body`` (``key``: the request's Idempotency-Key header;
    the body's ``idempotency_key``, if given too, must be the same)."""
    if key is not None and body.idempotency_key is not None and key != body.idempotency_key:
        raise Rejected("idempotency_key", f"the Idempotency-Key header {key!r} and the body's idempotency_key "
                                          f"{body.idempotency_key!r} differ: give one, or the same in both")
    if p.admin:
        if body.tenant is None:  # the default tenant, made on first use (as a Slurm user's default account)
            tenants.ensure(DEFAULT_TENANT)
        tenant = body.tenant or DEFAULT_TENANT
        if not tenants.exists(tenant):
            raise Rejected("", f"no tenant {tenant!r}")
    else:
        if body.tenant is not None and body.tenant != p.tenant:
            raise Forbidden("a tenant token submits jobs for its own tenant only")
        if body.user is not None:
            raise Forbidden("user: only an admin's submit names the user (a tenant token's jobs are its "
                            "tenant's; leave user out)")
        assert p.tenant is not None
        tenant = p.tenant
    check_request(view, body)
    job = body.to_new_job(tenant, key)
    default, maximum = tenants.time_limits(tenant)
    if job.time_limit_s is None and (default if default is not None else maximum) is not None:
        job = dataclasses.replace(job, time_limit_s=default if default is not None else maximum)
    if maximum is not None and job.time_limit_s is not None and job.time_limit_s > maximum:
        raise Rejected("time_limit_s", f"a time limit of {format_duration(job.time_limit_s)} is above tenant "
                                       f"{tenant}'s maximum of {format_duration(maximum)}")
    return job


def check_dependency(job: NewJob, p: Principal, get: Callable[[int], JobRow | None]) -> None:
    """Refuse a dependency on a job that does not exist or that ``p`` may not see (as if it did not
    exist). A cycle cannot be made: a job depends only on jobs that exist before it."""
    if not job.dependency:
        return
    for clause in parse_dependency(job.dependency):
        for ident in clause.jobs:
            row = get(int(ident))
            if row is None or not p.sees(row.tenant):
                raise Rejected("dependency", f"no job {ident}")


def array_tasks(job: NewJob, text: str) -> list[NewJob]:
    """The jobs of an array submit (``0-99%10``): one per task, with its index and place."""
    if job.idempotency_key is not None:
        raise Rejected("array", "a job array takes no idempotency key")
    indices, throttle = parse_array(text)
    return [dataclasses.replace(job, array_task_id=index, array_position=pos, array_throttle=throttle)
            for pos, index in enumerate(indices)]


def service_tenant(body: ServiceIn, p: Principal, tenants: Tenants, view: LiveView | None) -> str:
    """The tenant of ``p``'s new inference service ``body``, once the service passed the same checks
    as a submit of one replica, and its replica counts agree."""
    tenant = body.tenant if p.admin else p.tenant
    if tenant is None:
        raise Rejected("", "an admin's service names the tenant (field 'tenant')")
    if not p.admin and body.tenant not in (None, p.tenant):
        raise Forbidden("a tenant token creates services for its own tenant only")
    if not tenants.exists(tenant):
        raise Rejected("", f"no tenant {tenant!r}")
    if not body.min_replicas <= body.replicas <= body.max_replicas:
        raise Rejected("", "need min_replicas <= replicas <= max_replicas")
    check_request(view, JobSubmit(gpus_per_worker=body.gpus_per_replica, gpu_type=body.gpu_type))
    return tenant
