"""Reader for the Alibaba GPU-disaggregated DLRM serving trace (cluster-trace-gpu-v2025, Prism NSDI'25).

One row per serving instance of 156 recommendation services (``app_name``). An instance is a
long-running replica, so each row becomes one job of kind ``INFERENCE`` with one worker:

Kept:

* ``instance_sn`` -> name; ``app_name`` -> tenant and user (the service it belongs to);
* ``gpu_request`` -> GPUs of the worker (0 for CPU-node instances; a fraction below 1 becomes a
  1-GPU worker with ``gpu_milli`` = fraction x 1000); ``role`` must agree with it (``HN`` = GPU
  node with >= 1 GPU request, ``CN`` = CPU node with none) and is then implied by the GPU count;
* ``cpu_request`` (cores) -> ``cpu_milli``; ``memory_request`` (GiB) -> ``memory_mib``;
* ``creation_time`` -> ``submit``; empty means "already running when the trace starts", so 0;
* ``deletion_time`` -> end; empty means "still running when the trace ends", so the duration is
  ``inf``; otherwise ``duration = deletion - start`` with start = ``scheduled_time`` when given
  (the time it held resources), else the submit time.

Dropped, and why: ``*_limit`` (kant reserves requests; limits only cap bursts), ``rdma_*``
(per-NIC bandwidth shares; kant's node model has no NICs), ``disk_*`` (not modelled),
``max_instance_per_node`` (a per-service spreading cap; kant has no per-service anti-affinity
limit yet, so this constraint is lost), ``scheduled_time`` itself (only used for the duration).
The trace has no GPU type; jobs accept any type. ``priority`` is the same for all rows (default
100, the :class:`~kant.model.job.InferenceService` default).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from kant.errors import InputError
from kant.model.job import FULL_GPU_MILLI, JobKind, JobTable
from kant.traces._csv import Problems
from kant.traces.columns import float_column, text_column
from kant.traces.raw import read_raw
from kant.traces.schema import build_job_table

__all__ = ["DLRM_COLUMNS", "read_dlrm"]

#: columns the reader needs
DLRM_COLUMNS = ("instance_sn", "role", "app_name", "cpu_request", "gpu_request", "memory_request",
                "creation_time", "scheduled_time", "deletion_time")


def read_dlrm(path: str | Path, *, priority: int = 100, problems: Problems | None = None) -> JobTable:
    """Read the DLRM serving trace into a :class:`JobTable` of INFERENCE jobs (see the module docstring)."""
    p = Path(path)
    raw = read_raw(p)
    raw.require(DLRM_COLUMNS)
    check = raw.check(problems)
    names = text_column(raw, "instance_sn")
    check.flag(np.array([not s for s in names], dtype=bool), "instance_sn", "empty instance name",
               raw.columns["instance_sn"])
    roles = text_column(raw, "role")
    role_gpu = np.array([r == "HN" for r in roles], dtype=bool)
    role_cpu = np.array([r == "CN" for r in roles], dtype=bool)
    check.flag(~role_gpu & ~role_cpu, "role", "unknown role (expected HN or CN)", raw.columns["role"])
    apps = text_column(raw, "app_name")
    check.flag(np.array([not s for s in apps], dtype=bool), "app_name", "empty service name",
               raw.columns["app_name"])
    cpu = float_column(raw, check, "cpu_request", scale=1000, minimum=0)
    mem = float_column(raw, check, "memory_request", scale=1024, minimum=0)
    gpu = float_column(raw, check, "gpu_request", minimum=0)
    with np.errstate(invalid="ignore"):
        whole = np.isfinite(gpu) & (gpu == np.floor(gpu))
        check.flag(~whole & (gpu > 1), "gpu_request", "a GPU request above 1 must be whole GPUs",
                   raw.columns["gpu_request"])
        check.flag(role_gpu & (gpu == 0), "gpu_request", "zero GPUs for a GPU instance (role HN)",
                   raw.columns["gpu_request"])
        check.flag(role_cpu & (gpu > 0), "gpu_request", "GPUs requested by a CPU-node instance (role CN)",
                   raw.columns["gpu_request"])
        check.flag(gpu > 1024, "gpu_request", "more than 1024 GPUs for one instance", raw.columns["gpu_request"])
        check.flag(cpu > 2.0**53, "cpu_request", "number too large", raw.columns["cpu_request"])
        check.flag(mem > 2.0**53, "memory_request", "number too large", raw.columns["memory_request"])
    created = float_column(raw, check, "creation_time", default=math.nan, minimum=0)
    scheduled = float_column(raw, check, "scheduled_time", default=math.nan, minimum=0)
    deleted = float_column(raw, check, "deletion_time", default=math.nan, minimum=0)
    submit = np.where(np.isnan(created), 0.0, created)
    start = np.where(np.isnan(scheduled), submit, scheduled)
    with np.errstate(invalid="ignore"):
        check.flag(scheduled < submit, "scheduled_time", "scheduled before it was created",
                   raw.columns["scheduled_time"])
        duration = np.where(np.isnan(deleted), math.inf, deleted - start)
        check.flag(duration < 0, "deletion_time", "negative duration (deleted before it started)",
                   raw.columns["deletion_time"])
    keep = check.finish()
    rows = np.flatnonzero(keep)
    if not rows.size:
        raise InputError(str(p), "no valid instance rows")
    g = np.where(np.isfinite(gpu) & (gpu <= 1024), gpu, 0.0)
    frac = (g > 0) & (g < 1)
    per = np.where(frac, 1, g).astype(np.int64)
    milli = np.where(frac, np.round(g * FULL_GPU_MILLI), np.where(per > 0, FULL_GPU_MILLI, 0)).astype(np.int64)
    milli = np.maximum(milli, np.where(per > 0, 1, 0))
    apps_arr = np.asarray(apps, dtype=object)[rows]
    return build_job_table(
        names=[names[i] for i in rows.tolist()],
        submit=submit[rows],
        duration=duration[rows],
        workers=np.ones(rows.size, dtype=np.int64),
        gpus_per_worker=per[rows],
        gpu_milli=milli[rows],
        cpu_milli=np.round(cpu[rows]).astype(np.int64),
        memory_mib=np.round(mem[rows]).astype(np.int64),
        priority=np.full(rows.size, priority, dtype=np.int64),
        tenant=apps_arr,
        kind=np.full(rows.size, int(JobKind.INFERENCE), dtype=np.int64),
        source=str(p),
        origin_epoch=None,
    )
