"""The scheduler's job store: growable columns, one row per job, rows handed out in arrival order.

A :class:`JobStore` holds what a scheduler may know about a job: its request (workers, GPUs, CPU,
memory, GPU type), who asked (tenant, user), its priority and submit time, and the run time to plan
with (``estimate``). It never holds a job's true duration: a driver keeps that (the simulator's
:class:`~kant.model.job.JobTable`, a live executor's clock). The only run time the store learns is
the observed one, written when a job finishes (``runtime``).

Rows are appended at any time (:meth:`JobStore.add`, :meth:`JobStore.extend`): each NumPy column
lives in a buffer whose capacity doubles, and the attribute of the same name is a read-only view of
its first ``len(store)`` entries, replaced after every append (so read the attribute afresh rather
than keeping an old view). :meth:`JobStore.list_of` hands out a column as a Python list for code
that reads one job at a time; such a list is the store's own, appended together with the arrays,
so a reference to it stays valid. Name vocabularies (GPU types, tenants, users) grow as new names
arrive; codes never change.

The simulator fills a store from a trace in one go (:meth:`JobStore.from_table`, row ``i`` is trace
row ``i``); a live service appends one job per submit.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from kant.model.elastic import ElasticBounds
from kant.model.job import FULL_GPU_MILLI, JobKind, JobTable, describe_request

__all__ = ["JobStore", "INT_COLUMNS", "FLOAT_COLUMNS", "grow"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: integer columns, per job (``gpu_type``, ``tenant`` and ``user`` are codes into the vocabularies;
#: ``gpu_type`` is -1 for "any type"; ``total_gpus`` = ``workers x gpus_per_worker``)
INT_COLUMNS = ("workers", "gpus_per_worker", "gpu_milli", "cpu_milli", "memory_mib", "gpu_type", "priority",
               "tenant", "user", "kind", "total_gpus")
#: float columns, per job: submit time; the run time a scheduler plans with (never NaN; ``inf``
#: for a job never expected to end); the user's own estimate (NaN if none); the run time observed
#: when the job finished (NaN until then); its time limit (``inf``: none; a plan never runs past it)
FLOAT_COLUMNS = ("submit", "estimate", "user_estimate", "runtime", "time_limit")
_COLUMNS = INT_COLUMNS + FLOAT_COLUMNS
_VOCABS = ("gpu_type", "tenant", "user")


def grow(arr: npt.NDArray[Any], n: int, fill: float | int | bool = 0) -> npt.NDArray[Any]:
    """``arr`` if it has room for ``n`` rows along its first axis, else a copy with at least twice the
    rows (new rows set to ``fill``): for per-job arrays that grow with a store (amortised O(1))."""
    have = arr.shape[0]
    if have >= n:
        return arr
    size = max(n, 2 * have, 16)
    out = np.full((size, *arr.shape[1:]), fill, dtype=arr.dtype)
    out[:have] = arr
    return out


class JobStore:
    """Growable column store of jobs (see the module docstring). Row ``i`` is job ``i``."""

    workers: IntArray
    gpus_per_worker: IntArray
    gpu_milli: IntArray
    cpu_milli: IntArray
    memory_mib: IntArray
    gpu_type: IntArray
    priority: IntArray
    tenant: IntArray
    user: IntArray
    kind: IntArray
    total_gpus: IntArray
    submit: FloatArray
    estimate: FloatArray
    user_estimate: FloatArray
    runtime: FloatArray
    time_limit: FloatArray

    def __init__(self, *, gpu_type_names: Sequence[str] = (), tenant_names: Sequence[str] = (),
                 user_names: Sequence[str] = (), source: str = "", origin_epoch: float | None = None) -> None:
        self.source = source
        self.origin_epoch = origin_epoch
        self._n = 0
        self._buf: dict[str, npt.NDArray[Any]] = {
            c: np.zeros(16, dtype=np.float64 if c in FLOAT_COLUMNS else np.int64) for c in _COLUMNS
        }
        self._lists: dict[str, list[Any]] = {}
        self.names: list[str] = []
        self._codes: dict[str, dict[str, int]] = {v: {} for v in _VOCABS}
        self.gpu_type_names: tuple[str, ...] = ()
        self.tenant_names: tuple[str, ...] = ()
        self.user_names: tuple[str, ...] = ()
        for vocab, names in (("gpu_type", gpu_type_names), ("tenant", tenant_names), ("user", user_names)):
            for name in names:
                self.code(vocab, name)
        #: elastic jobs' bounds by row (:mod:`kant.model.elastic`); empty when no job is elastic
        self.elastic: dict[int, ElasticBounds] = {}
        #: bumped whenever rows are appended (a reader may cache what it derived from the columns)
        self.version = 0
        self._batching = False
        self._slice()

    @classmethod
    def from_table(cls, table: JobTable, rows: int | None = None) -> JobStore:
        """A store holding the first ``rows`` (default all) rows of a trace, row ``i`` = table row
        ``i``, with the table's vocabularies. A job without an estimate plans with its true duration
        (the oracle estimate the simulator has always used: say so when reporting); ``user_estimate``
        keeps the trace's own estimates."""
        store = cls(gpu_type_names=table.gpu_type_names, tenant_names=table.tenant_names,
                    user_names=table.user_names, source=table.source, origin_epoch=table.origin_epoch)
        store.append_table_rows(table, len(table) if rows is None else rows)
        return store

    def append_table_rows(self, table: JobTable, stop: int) -> range:
        """Append rows ``len(self) .. stop - 1`` of ``table`` (a store made by :meth:`from_table`, the
        jobs arriving one after another)."""
        part = slice(self._n, stop)
        est = table.estimate[part]
        if table.elastic is not None:
            spec, workers = table.elastic, table.workers
            for row in range(self._n, stop):
                bounds = spec.bounds(row, int(workers[row]))
                if bounds is not None:
                    self.elastic[row] = bounds
        return self.extend(
            table.names[part],
            planning=np.where(np.isnan(est), table.duration[part], est),
            user_estimate=est,
            **{c: getattr(table, c)[part] for c in ("submit", "workers", "gpus_per_worker", "gpu_milli", "cpu_milli",
                                                    "memory_mib", "gpu_type", "priority", "tenant", "user", "kind")},
        )

    # --- sizes and views -----------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    def _slice(self) -> None:
        n = self._n
        for name, buf in self._buf.items():
            view = buf[:n]
            view.setflags(write=False)
            setattr(self, name, view)

    @contextlib.contextmanager
    def batch(self) -> Iterator[JobStore]:
        """Append many rows with :meth:`add`: the NumPy views are refreshed once, at the end (inside
        the block they lag behind; the lists of :meth:`list_of` do not)."""
        self._batching = True
        try:
            yield self
        finally:
            self._batching = False
            self._slice()

    def list_of(self, column: str) -> list[Any]:
        """Column ``column`` as the store's own Python list (grows with the store; read only)."""
        lst = self._lists.get(column)
        if lst is None:
            if column not in self._buf:
                raise KeyError(f"no job column {column!r}")
            lst = self._lists[column] = getattr(self, column).tolist()
        return lst

    # --- vocabularies --------------------------------------------------------------------------
    def code(self, vocab: str, name: str) -> int:
        """Code of ``name`` in vocabulary ``vocab`` ('gpu_type', 'tenant' or 'user'), added if new."""
        table = self._codes[vocab]
        code = table.get(name)
        if code is None:
            code = table[name] = len(table)
            setattr(self, f"{vocab}_names", (*getattr(self, f"{vocab}_names"), name))
        return code

    def find_code(self, vocab: str, name: str) -> int:
        """Code of ``name`` in ``vocab``, or -1 if it is not there (nothing is added)."""
        return self._codes[vocab].get(name, -1)

    # --- appending -----------------------------------------------------------------------------
    def _reserve(self, n: int) -> None:
        for name, buf in self._buf.items():
            if buf.shape[0] < n:
                self._buf[name] = grow(buf, n)

    def add(
        self,
        name: str,
        *,
        submit: float,
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
        default_estimate: float = math.inf,
        kind: JobKind = JobKind.TRAINING,
        time_limit: float | None = None,
        elastic: ElasticBounds | None = None,
    ) -> int:
        """Append one job and return its row. ``estimate`` is the user's (None: none given); the job
        plans with it, else with ``default_estimate``; ``elastic``: its bounds, if it is elastic.
        Values are trusted: callers validate first."""
        row = self._n
        if elastic is not None:
            self.elastic[row] = elastic
        self._reserve(row + 1)
        values = {
            "workers": int(workers), "gpus_per_worker": int(gpus_per_worker), "gpu_milli": int(gpu_milli),
            "cpu_milli": int(cpu_milli), "memory_mib": int(memory_mib),
            "gpu_type": -1 if gpu_type is None else self.code("gpu_type", gpu_type),
            "priority": int(priority), "tenant": self.code("tenant", tenant),
            "user": self.code("user", user if user is not None else tenant), "kind": int(kind),
            "total_gpus": int(workers) * int(gpus_per_worker), "submit": float(submit),
            "estimate": float(default_estimate if estimate is None else estimate),
            "user_estimate": math.nan if estimate is None else float(estimate), "runtime": math.nan,
            "time_limit": math.inf if time_limit is None else float(time_limit),
        }
        buf = self._buf
        for col, value in values.items():
            buf[col][row] = value
        for col, lst in self._lists.items():
            lst.append(values[col])
        self.names.append(name)
        self._n = row + 1
        self.version += 1
        if not self._batching:
            self._slice()
        return row

    def extend(self, names: Sequence[str], *, planning: npt.ArrayLike, user_estimate: npt.ArrayLike,
               time_limit: npt.ArrayLike | None = None, **columns: npt.ArrayLike) -> range:
        """Append many jobs at once from whole columns (codes already in this store's vocabularies;
        ``planning`` is the estimate column, ``user_estimate`` NaN where none, ``time_limit`` inf
        where none, all inf when not given). Returns their rows."""
        start, k = self._n, len(names)
        cols: dict[str, npt.NDArray[Any]] = {c: np.asarray(v) for c, v in columns.items()}
        missing = set(INT_COLUMNS) - {"total_gpus"} - set(cols)
        if missing:
            raise ValueError(f"JobStore.extend: missing columns {sorted(missing)}")
        cols["total_gpus"] = cols["workers"].astype(np.int64) * cols["gpus_per_worker"].astype(np.int64)
        cols["estimate"] = np.asarray(planning, dtype=np.float64)
        cols["user_estimate"] = np.asarray(user_estimate, dtype=np.float64)
        cols["runtime"] = np.full(k, np.nan)
        cols["time_limit"] = np.full(k, np.inf) if time_limit is None else np.asarray(time_limit, dtype=np.float64)
        for col, arr in cols.items():
            if arr.shape != (k,):
                raise ValueError(f"JobStore.extend: column {col} has shape {arr.shape}, expected ({k},)")
        if start == 0 and all(arr.dtype == self._buf[col].dtype for col, arr in cols.items()):
            # a whole trace into an empty store (the simulator): its columns become the buffers, no
            # copy (they may be read only: the first append after them grows, which copies)
            self._buf.update(cols)
        else:
            self._reserve(start + k)
            for col, arr in cols.items():
                self._buf[col][start:start + k] = arr
        for col, lst in self._lists.items():
            lst.extend(cols[col].tolist())
        self.names.extend(names)
        self._n = start + k
        self.version += 1
        self._slice()
        return range(start, start + k)

    def update(self, job: int, *, name: str | None = None, **values: float) -> None:
        """Change a waiting job's ``name`` or columns (``priority``, ``estimate``, ``user_estimate``,
        ``time_limit``): a user's update of a pending job. The caller takes the job out of the queue
        first and puts it back after (the queue's order is computed at push)."""
        if name is not None:
            self.names[job] = name
        for column, value in values.items():
            if column not in ("priority", "estimate", "user_estimate", "time_limit"):
                raise KeyError(f"job column {column!r} cannot be updated")
            self._buf[column][job] = value
            lst = self._lists.get(column)
            if lst is not None:
                lst[job] = self._buf[column][job].item()  # as the column holds it (the list mirrors it)
        self.version += 1

    def set_runtime(self, job: int, seconds: float) -> None:
        """The run time observed when ``job`` finished (what a runtime estimator learns from)."""
        self._buf["runtime"][job] = seconds  # (a buffer of its own: extend makes it with np.full)
        lst = self._lists.get("runtime")
        if lst is not None:
            lst[job] = float(seconds)

    # --- descriptions --------------------------------------------------------------------------
    def gpu_type_name(self, job: int) -> str | None:
        code = int(self.gpu_type[job])
        return None if code < 0 else self.gpu_type_names[code]

    def describe_request(self, job: int) -> str:
        return describe_request(int(self.workers[job]), int(self.gpus_per_worker[job]), int(self.gpu_milli[job]),
                                self.gpu_type_name(job))
