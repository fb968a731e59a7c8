"""Request and response bodies of the REST API (pydantic): every field typed and bounded, unknown
fields rejected, so a bad payload is answered 422 with the field's path and the reason."""

from __future__ import annotations

import json
import operator
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationInfo, field_validator, model_validator

from kant.inference.autoscaler import HpaConfig
from kant.model.deps import format_dependency, parse_dependency
from kant.model.elastic import check_bounds
from kant.service.arrays import parse_array
from kant.service.db.events import EventRow
from kant.service.db.jobs import SUBMITTED_FIELDS, JobRow, NewJob
from kant.service.db.nodes import NodeRow
from kant.service.db.services import ServiceRow
from kant.service.db.tenants import TenantRow
from kant.service.db.tokens import TokenRow

__all__ = [
    "JobSubmit", "JobBatch", "JobOut", "JobPage", "SubmitOut", "BatchOut", "WhyOut", "EventOut", "JobDetail",
    "NodeIn", "NodeOut", "NodeAction", "TenantIn", "TenantPatch", "TenantOut", "TokenIn", "TokenOut",
    "TokenCreated", "ServiceIn", "ServicePatch", "ServiceOut", "ScaleIn", "ClusterOut", "TenantUse",
    "ClockIn", "ClockOut", "QueueOut", "Payload",
    "Message", "PredictionOut", "LogsOut", "WhatIfIn", "WhatIfScenario", "WhatIfNode", "WhatIfQuota",
]

Name = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
#: a node's name: an RFC 1123 subdomain, as Kubernetes names nodes (lower-case letters, digits, '-' and '.';
#: each dot-separated label starts and ends with a letter or digit), so that it fits in a URL's path
NodeName = Annotated[str, StringConstraints(min_length=1, max_length=253,
                                            pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")]
#: a name of an existing node, leaf or spine (clusters read from files may use more characters)
NodeRef = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")]
GpuType = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._|-]+$")]
Label = Annotated[str, StringConstraints(max_length=256)]
_STRICT = ConfigDict(extra="forbid", strict=True)  # unknown fields refused; no "2" or true for an int


def _clean(value: Any) -> Any:
    """``value`` if no string in it (keys included) holds a NUL byte or an unpaired surrogate, which no
    database stores (PostgreSQL refuses both; ``ValueError`` here makes them a 422 naming the field)."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("a NUL byte (\\u0000) is not allowed in text")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("text must be valid Unicode (an unpaired surrogate is not)") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _clean(k)
            _clean(v)
    elif isinstance(value, list | tuple):
        for v in value:
            _clean(v)
    return value


class Payload(BaseModel):
    """A request body: strict types (``"workers": "2"`` or ``true`` is a 422), unknown fields refused,
    and no text any database would refuse (:func:`_clean`)."""

    model_config = _STRICT

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, v: Any) -> Any:
        return _clean(v)


class Message(BaseModel):
    detail: str


# --- jobs --------------------------------------------------------------------------------------------
def live_dependency(text: str) -> str | None:
    """A submitted dependency in canonical form (ids are job ids); ValueError says what is wrong."""
    clauses = parse_dependency(text)
    for c in clauses:
        for ident in c.jobs:
            if not ident.isdigit() or not 0 < int(ident) < 2**63:
                raise ValueError(f"{ident!r} is not a job id")
    return format_dependency(clauses) or None


class JobSubmit(Payload):
    """A training gang: ``workers`` workers, each with ``gpus_per_worker`` GPUs (and CPU, memory) on one
    node; all of them start together or none."""

    model_config = _STRICT
    name: str = Field(default="", max_length=256)
    tenant: Name | None = Field(default=None, description="admins only: whose job (a tenant token submits its own)")
    user: str | None = Field(default=None, min_length=1, max_length=128,
                             description="admins only: the user within the tenant (default: the tenant)")
    workers: int = Field(default=1, ge=1, le=65536)
    gpus_per_worker: int = Field(default=1, ge=0, le=1024)
    gpu_milli: int = Field(default=1000, ge=1, le=1000, description="share of one GPU, for 1-GPU workers")
    gpu_type: GpuType | None = None
    cpu_milli: int = Field(default=0, ge=0, le=10**9)
    memory_mib: int = Field(default=0, ge=0, le=10**9)
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)
    estimate_s: float | None = Field(default=None, gt=0, le=10**9, allow_inf_nan=False,
                                     description="the user's run-time estimate (backfill plans with it)")
    duration_s: float | None = Field(default=None, ge=0, le=10**9, allow_inf_nan=False,
                                     description="how long the simulated executor runs the job")
    command: str | None = Field(default=None, max_length=65536)
    labels: dict[Annotated[str, StringConstraints(min_length=1, max_length=63)], Label] = Field(default_factory=dict)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=128,
                                        description="a retried submit with the same key makes no second job")
    chdir: str | None = Field(default=None, min_length=1, max_length=4096, pattern=r"^/",
                              description="the job's working directory, an absolute path (null: the executor's)")
    environment: dict[Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^=\x00]+$")],
                      Annotated[str, StringConstraints(max_length=131072)]] | None = Field(
        default=None, description="the job's environment (kant submit --export; null: the node's own)")
    time_limit_s: float | None = Field(default=None, gt=0, le=10**9, allow_inf_nan=False,
                                       description="past it the job is stopped and ends 'timeout' (null: the "
                                                   "tenant's default time limit, if any)")
    dependency: str | None = Field(
        default=None, max_length=4096,
        description="wait for other jobs, Slurm's form: 'afterok:41:42,afterany:7' (after: started; afterok: "
                    "finished; afternotok: failed, cancelled or timed out; afterany: ended)")
    kill_on_invalid_dep: bool = Field(default=False, description="cancel the job when its dependency can never "
                                                                 "be met (else it waits, DependencyNeverSatisfied)")

    array: str | None = Field(default=None, max_length=4096,
                              description="a job array, Slurm's form: '0-99%10' (100 tasks, at most 10 running at "
                                          "once), '1,3,5-7', '0-15:4'; one job per task")
    min_workers: int | None = Field(default=None, ge=1, le=65536,
                                    description="an elastic gang (docs/elastic.md): it may shrink to this many workers "
                                                "(give max_workers too; min_workers <= workers <= max_workers)")
    max_workers: int | None = Field(default=None, ge=1, le=65536,
                                    description="an elastic gang: it may grow to this many workers")

    @model_validator(mode="after")
    def _elastic(self) -> JobSubmit:
        why = check_bounds(self.workers, self.min_workers, self.max_workers, self.gpu_milli)
        if why is not None:
            raise ValueError(why)
        return self

    @field_validator("dependency")
    @classmethod
    def _dependency(cls, v: str | None) -> str | None:
        return None if v is None else live_dependency(v)

    @field_validator("array")
    @classmethod
    def _array(cls, v: str | None) -> str | None:
        if v is not None:
            parse_array(v)
        return v

    @field_validator("gpu_milli")
    @classmethod
    def _share_of_one_gpu(cls, v: int, info: ValidationInfo) -> int:
        gpus = info.data.get("gpus_per_worker", 1)
        if v != 1000 and gpus != 1:
            raise ValueError(f"a share of a GPU ({v} thousandths) is for workers of exactly 1 GPU, and "
                             f"gpus_per_worker is {gpus}: leave gpu_milli at 1000 (whole GPUs)")
        return v

    @field_validator("labels")
    @classmethod
    def _few_labels(cls, v: dict[str, str]) -> dict[str, str]:
        if len(v) > 64:
            raise ValueError("at most 64 labels")
        return v

    @field_validator("environment")
    @classmethod
    def _bounded_environment(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is not None and (len(v) > 4096 or sum(len(k) + len(x) for k, x in v.items()) > 1 << 20):
            raise ValueError("at most 4096 variables and 1 MiB in all")
        return v

    def to_new_job(self, tenant: str, idempotency_key: str | None = None) -> NewJob:
        """The job to insert for ``tenant`` (whose it is, decided by the caller from the token): the user
        defaults to the tenant, an idempotency key given apart (a header) wins over the body's."""
        return NewJob(**{n: getattr(self, n) for n in _SUBMIT_COPIED}, tenant=tenant, user=self.user or tenant,
                      labels=dict(self.labels), idempotency_key=idempotency_key or self.idempotency_key,
                      environment=None if self.environment is None else dict(self.environment))


#: the fields of JobSubmit copied into NewJob as they are
_SUBMIT_COPIED: Final = tuple(n for n in JobSubmit.model_fields if n in SUBMITTED_FIELDS
                               and n not in ("tenant", "user", "labels", "idempotency_key", "environment"))


class JobBatch(Payload):
    model_config = _STRICT
    jobs: list[JobSubmit] = Field(min_length=1, max_length=1000)


class SubmitOut(BaseModel):
    id: int
    created: bool
    tasks: int | None = Field(default=None, description="a job array: its tasks, jobs id .. id + tasks - 1")


class BatchOut(BaseModel):
    jobs: list[SubmitOut]


class JobOut(BaseModel):
    # A stored job as answered: JobRow's fields but idempotency_key and created_wall (checked by
    # tests/service/test_db.py), built by `of`.
    id: int
    name: str
    tenant: str
    user: str
    kind: Literal["training", "inference"]
    service_id: int | None
    workers: int
    gpus_per_worker: int
    gpu_milli: int
    gpu_type: str | None
    cpu_milli: int
    memory_mib: int
    priority: int
    estimate_s: float | None
    duration_s: float | None
    command: str | None
    labels: dict[str, Any]
    chdir: str | None
    environment: dict[str, str] | None
    time_limit_s: float | None
    state: str
    reason: str | None
    submit_time: float
    first_start_time: float | None
    start_time: float | None
    end_time: float | None
    placement: list[str] | None
    runs: int
    exit_code: int | None
    dependency: str | None = None
    kill_on_invalid_dep: bool = False
    held: str | None = None
    array_task_id: int | None = None
    array_position: int | None = None
    array_throttle: int | None = None
    min_workers: int | None = None
    max_workers: int | None = None
    array_job_id: int | None = Field(default=None, description="a job array's id: its first task's job id")

    @classmethod
    def of(cls, row: JobRow, reason: str | None = None) -> JobOut:
        """The answer for the stored job ``row`` (``reason``: the live reason, if the loop has one).
        Not validated again: a stored job is valid (a page of 1,000 would take 30 ms more)."""
        return cls.model_construct(**{n: getattr(row, n) for n in _OUT_FROM_ROW},
                                   kind="inference" if row.kind == 1 else "training",
                                   reason=reason if reason is not None else row.reason,
                                   array_job_id=None if row.array_position is None else row.id - row.array_position)


#: the fields of JobOut copied from the row as they are
_OUT_FROM_ROW: Final = tuple(n for n in JobOut.model_fields if n not in ("kind", "reason", "array_job_id"))
_out_values: Final = operator.attrgetter(*_OUT_FROM_ROW)


def job_page_json(rows: list[JobRow], reasons: dict[int, str], next_id: int | None) -> str:
    """A :class:`JobPage` of ``rows`` as JSON, made straight from the rows: the same fields as
    ``JobOut.of`` each, without a model per job (a page of 1,000 jobs in a third of the time)."""
    items = []
    for row in rows:
        d = dict(zip(_OUT_FROM_ROW, _out_values(row), strict=True))
        d["kind"] = "inference" if row.kind == 1 else "training"
        reason = reasons.get(row.id)
        d["reason"] = reason if reason is not None else row.reason
        d["array_job_id"] = None if row.array_position is None else row.id - row.array_position
        items.append(d)
    return json.dumps({"items": items, "next": next_id}, separators=(",", ":"), ensure_ascii=False)


class JobPage(BaseModel):
    items: list[JobOut]
    next: int | None = Field(description="pass as `after` for the next page (null: no more)")


class PredictionOut(BaseModel):
    """When a pending job is predicted to start (docs/whatif.md): absolute times on the service
    clock, from the digital twin's last run on the snapshot taken at ``as_of``."""

    p50: float | None = Field(description="predicted start (median over the sampled runs); None: not in the run")
    p10: float | None
    p90: float | None
    as_of: float = Field(description="the service clock time of the snapshot the prediction ran on")
    runs: int = Field(description="sampled runs behind the band (1: the estimates taken as exact)")
    covers: str | None = Field(default=None, description="what the band covers: run-time error, future arrivals "
                                                         "(the twin's arrival model), both or neither")
    reason: str | None = Field(default=None, description="why p50 is None (e.g. the job never starts in the "
                                                         "twin: unschedulable as the cluster is)")


class WhyOut(BaseModel):
    id: int
    state: str
    reason: str
    plugin: str | None = None
    position: int | None = Field(default=None, description="pending jobs ahead of this one in queue order")
    queue_len: int | None = None
    prediction: PredictionOut | None = None
    prediction_text: str | None = Field(default=None, description="the prediction in words, from now")
    summary: str | None = Field(default=None, description="the reason and the predicted start in one line")
    behind: int | None = Field(default=None, description="the job first in the queue, where the last cycle "
                                                         "stopped without reaching this one")
    behind_prediction_text: str | None = Field(default=None, description="that job's predicted start in words")


class LogsOut(BaseModel):
    id: int
    run: int = Field(description="the run these bytes are of (0: the job never ran)")
    worker: int
    workers: int = Field(description="workers of this run with output")
    offset: int = Field(description="byte offset of text in the worker's output")
    next_offset: int = Field(description="where the next read continues (offset for the next request)")
    size: int = Field(description="bytes of output kept so far")
    text: str = Field(description="stdout and stderr of the worker, as it wrote them")
    complete: bool = Field(description="the job ended and every byte was read: a follower stops")
    kept: bool = Field(description="false: this service's executor keeps no output (simulated)")


class EventOut(BaseModel):
    id: int
    time: float
    wall: float
    kind: str
    job_id: int | None
    node: str | None
    tenant: str | None
    message: str

    @classmethod
    def of(cls, ev: EventRow) -> EventOut:
        return cls(id=ev.id, time=ev.time, wall=ev.wall, kind=ev.kind, job_id=ev.job_id, node=ev.node,
                   tenant=ev.tenant, message=ev.message)


class JobDetail(JobOut):
    events: list[EventOut]
    why: WhyOut | None = None


# --- nodes -------------------------------------------------------------------------------------------
class NodeIn(Payload):
    model_config = _STRICT
    name: NodeName
    gpu_type: GpuType
    gpus: int = Field(ge=0, le=1024)
    cpu_milli: int = Field(default=0, ge=0, le=10**9)
    memory_mib: int = Field(default=0, ge=0, le=10**9)
    leaf: NodeRef | None = None
    spine: NodeRef | None = None


class NodeAction(Payload):
    model_config = _STRICT
    reason: str | None = Field(default=None, max_length=1024)


class NodeOut(BaseModel):
    name: str
    gpu_type: str
    gpus: int
    used_gpus: int | None = None
    state: str
    reason: str | None = None
    leaf: str | None
    spine: str | None
    cpu_milli: int
    memory_mib: int

    @classmethod
    def of_row(cls, row: NodeRow) -> NodeOut:
        return cls(name=row.name, gpu_type=row.gpu_type, gpus=row.gpus, state=row.state, reason=row.reason,
                   leaf=row.leaf, spine=row.spine, cpu_milli=row.cpu_milli, memory_mib=row.memory_mib)


# --- tenants and tokens ---------------------------------------------------------------------------------
TimeLimit = Annotated[float, Field(gt=0, le=10**9, allow_inf_nan=False)]


class TenantIn(Payload):
    model_config = _STRICT
    name: Name
    guaranteed_gpus: int | None = Field(default=None, ge=0, le=10**7)
    max_gpus: int | None = Field(default=None, ge=0, le=10**7)
    default_time_limit_s: TimeLimit | None = Field(default=None, description="a job without a time limit gets it")
    max_time_limit_s: TimeLimit | None = Field(default=None, description="no job may ask for more")


class TenantPatch(Payload):
    model_config = _STRICT
    guaranteed_gpus: int | None = Field(default=None, ge=0, le=10**7)
    max_gpus: int | None = Field(default=None, ge=0, le=10**7)
    default_time_limit_s: TimeLimit | None = None
    max_time_limit_s: TimeLimit | None = None


class TenantOut(BaseModel):
    name: str
    guaranteed_gpus: int | None
    max_gpus: int | None
    quota_enforced: bool
    running_gpus: int = 0
    pending_jobs: int = 0
    default_time_limit_s: float | None = None
    max_time_limit_s: float | None = None

    @classmethod
    def of(cls, row: TenantRow, enforced: bool, running: int = 0, pending: int = 0) -> TenantOut:
        return cls(name=row.name, guaranteed_gpus=row.guaranteed_gpus, max_gpus=row.max_gpus,
                   quota_enforced=enforced, running_gpus=running, pending_jobs=pending,
                   default_time_limit_s=row.default_time_limit_s, max_time_limit_s=row.max_time_limit_s)


class TokenIn(Payload):
    model_config = _STRICT
    name: str = Field(default="", max_length=128)
    ttl_s: float | None = Field(default=None, gt=0, le=10 * 365 * 86400, allow_inf_nan=False)


class TokenOut(BaseModel):
    id: int
    name: str
    role: str
    tenant: str | None
    created_wall: float
    expires_wall: float | None
    revoked_wall: float | None

    @classmethod
    def of(cls, row: TokenRow) -> TokenOut:
        return cls(id=row.id, name=row.name, role=row.role, tenant=row.tenant, created_wall=row.created_wall,
                   expires_wall=row.expires_wall, revoked_wall=row.revoked_wall)


class TokenCreated(TokenOut):
    token: str = Field(description="the token itself: shown this once, stored only as a hash")


# --- inference services ------------------------------------------------------------------------------
ReadyPath = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^/[\x21-\x7e]*$")]
Command = Annotated[str, StringConstraints(min_length=1, max_length=10_000)]


class _Serving(Payload):
    """What a service's replicas run and how kant knows they serve (docs/service.md, "Services")."""

    model_config = _STRICT
    command: Command | None = Field(default=None, description="what each replica runs (sh -c); it must listen "
                                    "on $PORT; None: replicas hold GPUs and run nothing")
    port: int = Field(default=0, ge=0, le=65535, description="0: kant picks a free port per replica")
    ready_path: ReadyPath = Field(default="/health", description="a replica serves once this path answers 2xx")
    ready_timeout_s: float = Field(default=30.0, gt=0, le=3600, allow_inf_nan=False)
    slo_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    capacity_rps: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                       description="requests/s one replica serves (the autoscaler's load)")
    concurrency: int | None = Field(default=None, ge=1, le=4096,
                                    description="requests one replica serves at once (the load without capacity_rps)")
    autoscaler: HpaConfig | None = Field(default=None, description="HPA settings; None: replicas set by hand")


def _needs_signal(body: _Serving, capacity_rps: float | None, concurrency: int | None) -> None:
    if body.autoscaler is not None and capacity_rps is None and concurrency is None:
        raise ValueError("autoscaler: needs capacity_rps or concurrency (the load it scales on)")


class ServiceIn(_Serving):
    name: Name
    tenant: Name | None = Field(default=None, description="admins only")
    gpus_per_replica: int = Field(ge=1, le=1024)
    gpu_type: GpuType | None = None
    priority: int = Field(default=100, ge=-1_000_000, le=1_000_000)
    replicas: int = Field(default=1, ge=0, le=10_000)
    min_replicas: int = Field(default=0, ge=0, le=10_000)
    max_replicas: int = Field(default=10_000, ge=0, le=10_000)

    @model_validator(mode="after")
    def _check(self) -> ServiceIn:
        _needs_signal(self, self.capacity_rps, self.concurrency)
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas: {self.min_replicas} is above max_replicas ({self.max_replicas})")
        return self

    def serving(self) -> dict[str, Any]:
        """The serving columns of the service (kant.service.db.services.SERVING_FIELDS)."""
        out = self.model_dump(include=set(_Serving.model_fields) - {"autoscaler"})
        out["autoscaler"] = None if self.autoscaler is None else self.autoscaler.model_dump_json()
        return out


class ServicePatch(_Serving):
    """A change of a service: only the fields given change (a new command rolls the replicas)."""

    min_replicas: int | None = Field(default=None, ge=0, le=10_000)
    max_replicas: int | None = Field(default=None, ge=0, le=10_000)

    @model_validator(mode="after")
    def _check(self) -> ServicePatch:
        for key in ("min_replicas", "max_replicas", "port", "ready_path", "ready_timeout_s"):
            if key in self.model_fields_set and getattr(self, key) is None:
                raise ValueError(f"{key}: may not be null")
        if not self.model_fields_set:
            raise ValueError("nothing to change: give command, autoscaler, min_replicas, ...")
        return self

    def changes(self) -> dict[str, Any]:
        """The fields given, as columns."""
        out = {k: getattr(self, k) for k in self.model_fields_set}
        if "autoscaler" in out:
            out["autoscaler"] = None if self.autoscaler is None else self.autoscaler.model_dump_json()
        return out


class ScaleIn(Payload):
    model_config = _STRICT
    replicas: int = Field(ge=0, le=10_000)


class ServiceOut(BaseModel):
    id: int
    tenant: str
    name: str
    gpus_per_replica: int
    gpu_type: str | None
    priority: int
    replicas: int
    min_replicas: int
    max_replicas: int
    state: str = Field(description="active, degraded (see degraded_reason) or deleted")
    command: str | None = None
    port: int = 0
    ready_path: str = "/health"
    ready_timeout_s: float = 30.0
    slo_ms: float | None = None
    capacity_rps: float | None = None
    concurrency: int | None = None
    autoscaler: dict[str, Any] | None = None
    degraded_reason: str | None = None
    target_replicas: int = Field(0, description="the replica count kant keeps (the autoscaler's or the user's)")
    ready_replicas: int = Field(0, description="replicas whose readiness path answers 2xx now")
    serving: dict[str, Any] | None = Field(None, description="the leader's live figures of its replicas: starting, "
                                           "failures, reclaims, reclaim and scale-up latency P50/P99 (s), load")

    @classmethod
    def of(cls, row: ServiceRow, stats: dict[str, Any] | None = None) -> ServiceOut:
        return cls(id=row.id, tenant=row.tenant, name=row.name, gpus_per_replica=row.gpus_per_replica,
                   gpu_type=row.gpu_type, priority=row.priority, replicas=row.replicas,
                   min_replicas=row.min_replicas, max_replicas=row.max_replicas, state=row.shown_state,
                   command=row.command, port=row.port, ready_path=row.ready_path,
                   ready_timeout_s=row.ready_timeout_s, slo_ms=row.slo_ms, capacity_rps=row.capacity_rps,
                   concurrency=row.concurrency,
                   autoscaler=None if row.autoscaler is None else json.loads(row.autoscaler),
                   degraded_reason=row.degraded, target_replicas=row.replicas,
                   ready_replicas=0 if stats is None else int(stats["ready_replicas"]), serving=stats)


class ServiceStatsOut(BaseModel):
    """A service's traffic through kant's request route: now, over ``window_s``, and since the start."""

    service: int
    window_s: float
    arrival_rate: float = Field(description="requests per second over the window")
    inflight: int = Field(description="requests queued or at a replica now")
    queued: int = Field(description="requests waiting for a replica now")
    outstanding: dict[str, int] = Field(description="requests at each replica now, by the replica's job id")
    answered: int = Field(description="requests answered within the window")
    queue_p50_ms: float | None
    queue_p99_ms: float | None
    response_p50_ms: float | None
    response_p99_ms: float | None
    slo_ms: float | None = Field(description="the service's SLO (None: none)")
    slo_attainment: float | None = Field(description="2xx answers within the SLO, share of the window's answers")
    total_requests: int
    codes: dict[str, int] = Field(description="answers since the start, by status code")
    prompt_tokens: int
    completion_tokens: int
    slo_attainment_total: float | None


# --- the cluster now ---------------------------------------------------------------------------------
class TenantUse(BaseModel):
    running_gpus: int
    pending_jobs: int
    guaranteed_gpus: int | None = None
    max_gpus: int | None = None


class QueueTypeOut(BaseModel):
    """One queue's guarantee, limits and use of one GPU type (a tree with per-type limits)."""

    guaranteed: float
    borrowing_limit: float | None
    lending_limit: float | None
    in_use: float
    borrowed: float
    capacity: float


class QueueOut(BaseModel):
    """One queue of the tree (``kant serve --queues``; docs/policy-quotas.md), now."""

    name: str
    parent: str | None = Field(description="its parent queue (None: a top queue)")
    leaf: bool
    tenants: list[str] = Field(default_factory=list, description="the tenants that map to it (a leaf)")
    guaranteed: float
    borrowing_limit: float | None = Field(description="GPUs above its guarantee it may hold (None: no limit)")
    lending_limit: float | None = Field(description="GPUs of its unused guarantee others may use (None: all)")
    weight: float
    in_use: float = Field(description="GPUs its subtree's running jobs hold")
    takes: float = Field(description="GPUs it takes from its parent: in use, or kept reserved (lending limit)")
    borrowed: float = Field(description="GPUs it takes above its guarantee")
    capacity: float = Field(description="GPUs it may take now (its limits and what its siblings take)")
    reclaim_evictions: int
    reclaims_for: int
    share: float | None = Field(default=None, description="fair share: its normalised share of the cluster")
    usage: float | None = Field(default=None, description="fair share: its decayed usage over the cluster's")
    factor: float | None = Field(default=None, description="fair share: 2^(-usage/share), higher goes first")
    per_type: dict[str, QueueTypeOut] | None = Field(
        default=None, description="per GPU type named in the tree (per-type guarantees and limits), the same columns")


class QueuesDoc(BaseModel):
    """The tree of queues in force, as a queues file's JSON (docs/policy-quotas.md), with where it
    came from."""

    source: str | None = Field(description="api (set with PUT /v1/queues/config, kept in the database), "
                                           "file (kant serve --queues FILE) or None (no queues)")
    queues: list[dict[str, Any]] = Field(default_factory=list, description="the tree, as the file's 'queues'")
    fair_share: dict[str, Any] | None = Field(default=None, description="as the file's 'fair_share'")


class ClusterOut(BaseModel):
    now: float
    clock: str = Field(description="wall, accelerated or manual")
    policy: str
    quota_enforced: bool = Field(description="whether tenants' quotas are applied (they are, under every policy)")
    total_gpus: int
    allocated_gpus: int
    down_gpus: int = Field(description="GPUs of failed nodes")
    cordoned_gpus: int = Field(description="idle GPUs of cordoned or draining nodes")
    free_gpus: int
    gar: float | None = Field(description="allocated / all GPUs (docs/metrics.md)")
    sor: float | None = Field(description="allocated / min(schedulable, allocated + pending demand)")
    gfr_nodes: float | None = Field(description="partly used up GPU nodes / up GPU nodes")
    gfr_gpus: float | None = Field(description="free GPUs on partly used nodes / free GPUs")
    metrics: dict[str, float | None] = Field(
        default_factory=dict, description="every live metric by key, GAR, SOR and GFR included (docs/metrics.md; "
                                          "a metric added to kant.metrics.registry with a live value appears here)")
    queue_len: int
    pending_gpus: int
    running_jobs: int
    cycles: int
    tenants: dict[str, TenantUse]
    others: TenantUse | None = Field(default=None, description="for a tenant: every other tenant together")
    queues: list[QueueOut] = Field(default_factory=list, description="the tree of queues (kant serve --queues)")


class ClockIn(Payload):
    model_config = _STRICT
    to: float = Field(ge=0, allow_inf_nan=False)
    hold: bool = Field(default=False, description="leave the cycle of instant `to` for the next move: jobs "
                                                  "arriving at `to` are still to be submitted (a replay)")


class ClockOut(BaseModel):
    now: float
    kind: str


# --- what-if -----------------------------------------------------------------------------------------
class WhatIfNode(Payload):
    model_config = _STRICT
    gpu_type: GpuType
    gpus: int = Field(ge=0, le=1024)
    cpu_milli: int = Field(default=0, ge=0, le=10**9)
    memory_mib: int = Field(default=0, ge=0, le=10**12)


class WhatIfQuota(Payload):
    model_config = _STRICT
    guaranteed: int | None = Field(default=None, ge=0, le=10**9)
    max: int | None = Field(default=None, ge=0, le=10**9)


class WhatIfScenario(Payload):
    """One change to try: another policy (a bundled policy's name, or a policy file's mapping), more
    nodes (copies of ``node``, default the most common node), nodes drained, tenants' quotas."""

    model_config = _STRICT
    name: Name
    policy: Annotated[str, StringConstraints(min_length=1, max_length=64)] | dict[str, Any] | None = None
    add_nodes: int = Field(default=0, ge=0, le=100_000)
    node: WhatIfNode | None = None
    drain: list[NodeRef] = Field(default_factory=list, max_length=100_000)
    quotas: dict[Name, WhatIfQuota] = Field(default_factory=dict, max_length=10_000)


class WhatIfIn(Payload):
    model_config = _STRICT
    horizon_h: float = Field(default=24.0, gt=0, le=24 * 366, allow_inf_nan=False,
                             description="hours to run forward")
    runs: int = Field(default=10, ge=1, le=100, description="sampled runs per scenario")
    scenarios: list[WhatIfScenario] = Field(default_factory=list, max_length=16,
                                            description="changes to compare with the cluster as it is")
    arrivals: Literal["history", "none"] = Field(
        default="history", description="history: every run also gets future arrivals sampled from the service's "
                                       "own (the twin's arrival model, as the predictions do); none: only the jobs "
                                       "there now")

    @field_validator("scenarios")
    @classmethod
    def _unique(cls, v: list[WhatIfScenario]) -> list[WhatIfScenario]:
        names = [s.name for s in v]
        dup = next((n for n in names if names.count(n) > 1 or n == "now"), None)
        if dup is not None:
            raise ValueError(f"scenario name {dup!r} is used twice (or is 'now', the cluster as it is)")
        return v
