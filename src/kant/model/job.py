"""Jobs: training gangs and inference services, held column-wise for speed.

A :class:`JobTable` stores one row per job in NumPy arrays, so a million-job trace costs tens of
bytes per job instead of a Python object each. Code refers to a job by its row index. A training
job is a gang of ``workers`` identical workers, each needing ``gpus_per_worker`` GPUs on one node;
it starts only when every worker has a place (all or nothing). An inference service is a set of
long-running replicas (``duration`` is ``inf``): each replica is placed on its own, and a service
is described by :class:`InferenceService` before it is expanded into rows. An elastic training job
(``JobTable.elastic``, :mod:`kant.model.elastic`) may also run on between ``min_workers`` and
``max_workers`` workers of ``gpus_per_worker`` GPUs each; ``workers`` is then the size it starts with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from kant.model.deps import JobDeps
from kant.model.elastic import ElasticSpec, check_bounds

__all__ = ["JOB_COLUMNS", "JobKind", "JobTable", "InferenceService", "JobTableBuilder", "describe_request",
           "split_gang"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

FULL_GPU_MILLI = 1000


class JobKind(IntEnum):
    TRAINING = 0
    INFERENCE = 1


def split_gang(total_gpus: int, max_gpus_per_worker: int = 8) -> tuple[int, int]:
    """Split a gang of ``total_gpus`` into ``(workers, gpus_per_worker)``.

    Traces such as Philly give only a job's GPU total. We use the largest divisor of the total that
    is at most ``max_gpus_per_worker`` (a node's GPU count), so a 16-GPU job is 2 x 8 and a 12-GPU
    job 2 x 6. ``total_gpus`` of 0 is a CPU-only job: one worker with no GPU.
    """
    if total_gpus < 0:
        raise ValueError(f"total_gpus must be >= 0, got {total_gpus}")
    if total_gpus == 0:
        return 1, 0
    if max_gpus_per_worker < 1:
        raise ValueError("max_gpus_per_worker must be >= 1")
    for g in range(min(total_gpus, max_gpus_per_worker), 0, -1):
        if total_gpus % g == 0:
            return total_gpus // g, g
    raise AssertionError("unreachable: 1 divides every total")


def describe_request(workers: int, gpus_per_worker: int, gpu_milli: int, gpu_type: str | None) -> str:
    """A job's request in words: ``2 worker(s) x 8 GPU of H100`` (a GPU share as ``0.5 GPU``)."""
    per = f"{gpu_milli / 1000:g}" if (gpus_per_worker == 1 and gpu_milli < FULL_GPU_MILLI) else f"{gpus_per_worker}"
    return f"{workers} worker(s) x {per} GPU{'' if gpu_type is None else ' of ' + gpu_type}"


@dataclass(frozen=True, eq=False)
class JobTable:
    """Column store of jobs; row ``i`` is job ``i``. Build with :class:`JobTableBuilder`.

    Times are seconds from the trace origin (``origin_epoch``, POSIX seconds, if known).
    ``estimate`` is the user's runtime estimate in seconds, ``nan`` when the trace has none.
    ``gpu_type`` is a code into ``gpu_type_names`` or -1 for "any type". ``gpu_milli`` is the
    share of one GPU a single-GPU worker needs (1000 = whole GPU; fractional requests are used by
    GPU-sharing policies).
    """

    names: tuple[str, ...]
    submit: FloatArray
    duration: FloatArray
    workers: IntArray
    gpus_per_worker: IntArray
    gpu_milli: IntArray
    cpu_milli: IntArray  # per worker
    memory_mib: IntArray  # per worker
    gpu_type: IntArray
    priority: IntArray
    tenant: IntArray
    user: IntArray
    estimate: FloatArray
    kind: IntArray
    gpu_type_names: tuple[str, ...] = ()
    tenant_names: tuple[str, ...] = ("default",)
    user_names: tuple[str, ...] = ("default",)
    source: str = ""
    origin_epoch: float | None = None
    #: job dependencies (:mod:`kant.model.deps`), None when no job has one (the common case)
    deps: JobDeps | None = None
    #: elastic bounds (:mod:`kant.model.elastic`), None when no job is elastic (the common case)
    elastic: ElasticSpec | None = None
    total_gpus: IntArray = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.names)
        for name in JOB_COLUMNS:
            arr = getattr(self, name)
            if arr.shape != (n,):
                raise ValueError(f"JobTable.{name} has shape {arr.shape}, expected ({n},)")
            arr.setflags(write=False)
        if self.deps is not None and len(self.deps.spec) != n:
            raise ValueError(f"JobTable.deps has {len(self.deps.spec)} rows, expected {n}")
        if self.elastic is not None and len(self.elastic) != n:
            raise ValueError(f"JobTable.elastic has {len(self.elastic)} rows, expected {n}")
        total = self.workers * self.gpus_per_worker
        total.setflags(write=False)
        object.__setattr__(self, "total_gpus", total)

    def __len__(self) -> int:
        return len(self.names)

    def gpu_type_name(self, job: int) -> str | None:
        code = int(self.gpu_type[job])
        return None if code < 0 else self.gpu_type_names[code]

    def describe_request(self, job: int) -> str:
        return describe_request(int(self.workers[job]), int(self.gpus_per_worker[job]), int(self.gpu_milli[job]),
                                self.gpu_type_name(job))

    def take(self, rows: npt.ArrayLike) -> JobTable:
        """A new table with the given rows, in the given order (names kept)."""
        idx = np.asarray(rows, dtype=np.int64)
        cols = {name: getattr(self, name)[idx].copy() for name in JOB_COLUMNS}
        return JobTable(
            names=tuple(self.names[i] for i in idx.tolist()),
            gpu_type_names=self.gpu_type_names,
            tenant_names=self.tenant_names,
            user_names=self.user_names,
            source=self.source,
            origin_epoch=self.origin_epoch,
            deps=None if self.deps is None else self.deps.take(idx),
            elastic=None if self.elastic is None else self.elastic.take(idx),
            **cols,
        )

    def sorted_by_submit(self) -> JobTable:
        """Rows ordered by submit time, ties kept in input order (a stable sort)."""
        order = np.argsort(self.submit, kind="stable")
        if np.array_equal(order, np.arange(len(self))):
            return self
        return self.take(order)


#: the per-job array columns of a JobTable (names and vocabularies aside)
JOB_COLUMNS = (
    "submit",
    "duration",
    "workers",
    "gpus_per_worker",
    "gpu_milli",
    "cpu_milli",
    "memory_mib",
    "gpu_type",
    "priority",
    "tenant",
    "user",
    "estimate",
    "kind",
)


@dataclass(frozen=True, slots=True)
class InferenceService:
    """A long-running inference service: replicas of ``gpus_per_replica`` GPUs each.

    Autoscaling and SLO policies use ``capacity_rps``, ``slo_ms`` and the replica bounds; the core
    simulator places ``min_replicas`` replicas from ``start`` on and keeps them until the end.
    """

    name: str
    gpus_per_replica: int
    min_replicas: int
    max_replicas: int
    capacity_rps: float = 1.0
    slo_ms: float = 1000.0
    startup_delay_s: float = 0.0
    priority: int = 100
    gpu_type: str | None = None
    tenant: str = "inference"
    start: float = 0.0

    def __post_init__(self) -> None:
        if self.gpus_per_replica < 1:
            raise ValueError(f"service {self.name!r}: gpus_per_replica must be >= 1")
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"service {self.name!r}: need 0 <= min_replicas <= max_replicas")
        if self.capacity_rps <= 0 or not math.isfinite(self.capacity_rps):
            raise ValueError(f"service {self.name!r}: capacity_rps must be a positive number")
        if self.slo_ms <= 0:
            raise ValueError(f"service {self.name!r}: slo_ms must be positive")
        if self.startup_delay_s < 0:
            raise ValueError(f"service {self.name!r}: startup_delay_s must be >= 0")


class JobTableBuilder:
    """Accumulates rows (from a trace reader or a test) and freezes them into a :class:`JobTable`."""

    def __init__(self, source: str = "", origin_epoch: float | None = None) -> None:
        self.source = source
        self.origin_epoch = origin_epoch
        self._names: list[str] = []
        self._cols: dict[str, list[Any]] = {c: [] for c in JOB_COLUMNS}
        self._vocab: dict[str, dict[str, int]] = {"gpu_type": {}, "tenant": {}, "user": {}}
        self._deps: dict[int, tuple[str, bool]] = {}  # row -> (dependency text, kill_on_invalid_dep)
        # row -> (min_workers, max_workers, speed-up table) of elastic rows
        self._elastic: dict[int, tuple[int, int, tuple[tuple[int, float], ...] | None]] = {}

    def _code(self, vocab: str, name: str) -> int:
        table = self._vocab[vocab]
        code = table.get(name)
        if code is None:
            code = table[name] = len(table)
        return code

    def add(
        self,
        name: str,
        *,
        submit: float,
        duration: float,
        workers: int = 1,
        gpus_per_worker: int = 1,
        gpu_milli: int = FULL_GPU_MILLI,
        cpu_milli: int = 0,
        memory_mib: int = 0,
        gpu_type: str | None = None,
        priority: int = 0,
        tenant: str = "default",
        user: str | None = None,
        estimate: float | None = None,
        kind: JobKind = JobKind.TRAINING,
        depends_on: str = "",
        kill_on_invalid_dep: bool = False,
        min_workers: int | None = None,
        max_workers: int | None = None,
        speedup: tuple[tuple[int, float], ...] | None = None,
    ) -> int:
        """Append one job; returns its row index. Values are trusted: readers validate first.
        ``depends_on`` is a dependency on other rows by name (``afterok:a:b``, :mod:`kant.model.deps`);
        ``min_workers``/``max_workers``/``speedup`` make it elastic (:mod:`kant.model.elastic`)."""
        if depends_on:
            self._deps[len(self._names)] = (depends_on, kill_on_invalid_dep)
        if min_workers is not None or max_workers is not None or speedup is not None:
            lo = int(workers) if min_workers is None else int(min_workers)
            hi = int(workers) if max_workers is None else int(max_workers)
            self._elastic[len(self._names)] = (lo, hi, speedup)
        c = self._cols
        c["submit"].append(float(submit))
        c["duration"].append(float(duration))
        c["workers"].append(int(workers))
        c["gpus_per_worker"].append(int(gpus_per_worker))
        c["gpu_milli"].append(int(gpu_milli))
        c["cpu_milli"].append(int(cpu_milli))
        c["memory_mib"].append(int(memory_mib))
        c["gpu_type"].append(-1 if gpu_type is None else self._code("gpu_type", gpu_type))
        c["priority"].append(int(priority))
        c["tenant"].append(self._code("tenant", tenant))
        c["user"].append(self._code("user", user if user is not None else tenant))
        c["estimate"].append(math.nan if estimate is None else float(estimate))
        c["kind"].append(int(kind))
        self._names.append(name)
        return len(self._names) - 1

    def add_service(self, service: InferenceService) -> list[int]:
        """Expand a service into ``min_replicas`` rows of kind INFERENCE (never-ending)."""
        return [
            self.add(
                f"{service.name}/replica-{r}",
                submit=service.start,
                duration=math.inf,
                workers=1,
                gpus_per_worker=service.gpus_per_replica,
                gpu_type=service.gpu_type,
                priority=service.priority,
                tenant=service.tenant,
                kind=JobKind.INFERENCE,
            )
            for r in range(service.min_replicas)
        ]

    def build(self) -> JobTable:
        def names(vocab: str) -> tuple[str, ...]:
            return tuple(self._vocab[vocab])

        cols: dict[str, Any] = {
            name: np.array(vals, dtype=np.float64 if name in _FLOAT_COLUMNS else np.int64)
            for name, vals in self._cols.items()
        }
        return JobTable(
            names=tuple(self._names),
            gpu_type_names=names("gpu_type"),
            tenant_names=names("tenant") or ("default",),
            user_names=names("user") or ("default",),
            source=self.source,
            origin_epoch=self.origin_epoch,
            deps=self._build_deps(),
            elastic=self._build_elastic(cols["workers"]),
            **cols,
        )

    def _build_elastic(self, workers: IntArray) -> ElasticSpec | None:
        if not self._elastic:
            return None
        n = len(self._names)
        lo: list[int | None] = [None] * n
        hi: list[int | None] = [None] * n
        sp: list[tuple[tuple[int, float], ...] | None] = [None] * n
        for row, (a, b, table) in self._elastic.items():
            why = check_bounds(int(workers[row]), a, b, int(self._cols["gpu_milli"][row]))
            if why is not None:
                raise ValueError(f"job {self._names[row]!r}: {why}")
            lo[row], hi[row], sp[row] = a, b, table
        return ElasticSpec.of(workers, lo, hi, sp)

    def _build_deps(self) -> JobDeps | None:
        if not self._deps:
            return None
        n = len(self._names)
        spec = [""] * n
        kill = np.zeros(n, dtype=bool)
        for row, (text, k) in self._deps.items():
            spec[row] = text
            kill[row] = k
        return JobDeps.of(spec, kill)


_FLOAT_COLUMNS = frozenset({"submit", "duration", "estimate"})


