"""The one rule for how many workers of a request fit on a node.

A worker of a request needs ``gpus`` GPUs of an allowed GPU type, ``cpu_milli`` CPU and
``memory_mib`` memory on one node. A *GPU share* (``gpus`` 1 and ``0 < gpu_milli < 1000``, as the
openb trace and fractional-GPU schedulers have it) needs ``gpu_milli`` thousandths of one GPU: a
completely free GPU holds ``1000 // gpu_milli`` such workers and a partly used GPU with ``f`` milli
free holds ``f // gpu_milli`` more. A whole-GPU worker only ever goes on completely free GPUs. CPU
or memory a node does not model (0 in the inventory) never limits. A request for no GPU is limited by
CPU and memory only (``limit`` workers when neither is asked for).

Every place that counts worker slots calls this module: the runner (feasibility, the fit mask, the
room bound), preemption and reclaim (victim planning), the failure memo (what a capacity return
adds) and backfill (see ``docs/gpu-sharing.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kant.model.job import FULL_GPU_MILLI

if TYPE_CHECKING:
    from kant.model.store import JobStore

__all__ = ["FULL_GPU_MILLI", "Request", "gpu_slots", "is_share", "slots_gained", "worker_slots"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def is_share(gpus: int, gpu_milli: int) -> bool:
    """Does a worker of ``gpus`` GPUs at ``gpu_milli`` ask for a share of one GPU?"""
    return gpus == 1 and 0 < gpu_milli < FULL_GPU_MILLI


@dataclass(frozen=True, slots=True)
class Request:
    """What one job asks for: ``workers`` x (``gpus`` GPUs at ``gpu_milli`` each, ``cpu_milli``,
    ``memory_mib``), on GPU type ``gpu_type`` (a job-side code, -1 = any)."""

    workers: int
    gpus: int
    gpu_milli: int = FULL_GPU_MILLI
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_type: int = -1

    @classmethod
    def of(cls, jobs: JobStore, job: int) -> Request:
        return cls(int(jobs.workers[job]), int(jobs.gpus_per_worker[job]), int(jobs.gpu_milli[job]),
                   int(jobs.cpu_milli[job]), int(jobs.memory_mib[job]), int(jobs.gpu_type[job]))

    @property
    def share(self) -> bool:
        return is_share(self.gpus, self.gpu_milli)

    def slots(self, free: IntArray, free_cpu: IntArray, free_mem: IntArray, cpu_unmodelled: BoolArray,
              mem_unmodelled: BoolArray, *, share_free: IntArray | None = None, limit: int | None = None,
              ok: BoolArray | None = None) -> IntArray:
        """:func:`worker_slots` for this request."""
        return worker_slots(self.gpus, self.gpu_milli, self.cpu_milli, self.memory_mib, free, free_cpu, free_mem,
                            cpu_unmodelled, mem_unmodelled, share_free=share_free,
                            limit=self.workers if limit is None else limit, ok=ok)


def gpu_slots(free_gpus: int, gpus: int, gpu_milli: int = FULL_GPU_MILLI) -> int:
    """Workers of ``gpus`` GPUs (at ``gpu_milli`` each) that ``free_gpus`` completely free GPUs hold
    (the scalar form of the GPU term of :func:`worker_slots`; ``gpus`` > 0)."""
    if gpus == 1 and gpu_milli < FULL_GPU_MILLI:
        return free_gpus * (FULL_GPU_MILLI // gpu_milli) if gpu_milli > 0 else free_gpus
    return free_gpus // gpus


def worker_slots(gpus: int, gpu_milli: int, cpu_milli: int, memory_mib: int, free: IntArray, free_cpu: IntArray,
                 free_mem: IntArray, cpu_unmodelled: BoolArray, mem_unmodelled: BoolArray, *,
                 share_free: IntArray | None = None, limit: int, ok: BoolArray | None = None) -> IntArray:
    """Workers of the request each node holds, given per-node completely free GPUs ``free``, free
    CPU and memory; for a GPU share, plus ``share_free`` (per node, the workers its partly used GPUs
    hold: :meth:`kant.model.shares.ShareBooks.workers`). A request for no GPU holds ``limit``
    workers where CPU and memory allow. 0 off ``ok``. Never negative. The free arrays may have more
    dimensions than the per-node masks (rows x nodes: capacity over time, as backfill's profile has
    it); masks broadcast over the last axis."""
    if gpus > 0:
        if gpus == 1 and 0 < gpu_milli < FULL_GPU_MILLI:
            slots = free * (FULL_GPU_MILLI // gpu_milli)
            if share_free is not None:
                slots = slots + share_free
        else:
            slots = free // gpus
    else:
        slots = np.full(np.shape(free), limit, dtype=np.int64)
    if cpu_milli > 0:
        slots = np.where(cpu_unmodelled, slots, np.minimum(slots, free_cpu // cpu_milli))
    if memory_mib > 0:
        slots = np.where(mem_unmodelled, slots, np.minimum(slots, free_mem // memory_mib))
    if ok is not None:
        return np.where(ok, np.maximum(slots, 0), 0)
    return slots


def slots_gained(returns: list[tuple[int, int, int]], node_types: list[int], gpus: int,
                 types: frozenset[int] | None, any_return: bool) -> int:
    """Worker slots of ``gpus`` whole GPUs the capacity returns ``(node, free before, free after)``
    add on nodes of ``types`` (None: any): :func:`gpu_slots` of after minus before, summed (inlined:
    the failure memo replays every return). For a request that ``any_return`` helps (CPU or memory
    needs, a GPU share: a return need not free a whole GPU to help), 1 if any return is on such a
    node, else 0; a request for no GPU gains 1 per return."""
    gain = 0
    for node, before, after in returns:
        if types is not None and node_types[node] not in types:
            continue
        if any_return:
            return 1
        gain += after // gpus - before // gpus if gpus > 0 else 1
    return gain
