"""The GPU-share books of a cluster state: which GPUs hold shares and how much of each is free.

A GPU share (``gpus`` 1, ``gpu_milli`` below 1000, see :mod:`kant.model.fit`) takes part of one GPU.
:class:`~kant.model.state.ClusterState` counts *completely free* GPUs in ``free``; a GPU that holds
shares is taken from it (it becomes an open *GPU slot* of its node here) and goes back to it when its
last share leaves. The state owns one :class:`ShareBooks` (``state.shares``) and calls :meth:`take`
and :meth:`give`; it moves the whole GPUs they open and close. Only share requests touch the books
(docs/gpu-sharing.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from kant.errors import SchedulingError
from kant.model.fit import FULL_GPU_MILLI

__all__ = ["SLOT_CLOSED", "ShareBooks"]

#: the value of an unused GPU slot in :attr:`ShareBooks.slots`
SLOT_CLOSED = -1

IntArray = npt.NDArray[np.int64]


class ShareBooks:
    """Per node, the GPU slots that hold shares, and per share job, the slot of each worker.

    ``names`` are the nodes' names (for errors); ``up`` is the state's list of which nodes take work
    (read, never written: a node that takes no work offers none of its slots)."""

    def __init__(self, names: Sequence[str], up: list[bool]) -> None:
        n_nodes = len(names)
        self._names = names
        self._up = up
        #: per node with shares: free milli of each GPU slot (SLOT_CLOSED: an unused slot)
        self.slots: dict[int, list[int]] = {}
        #: per node: the largest free milli of an open GPU slot (0: none)
        self.best: IntArray = np.zeros(n_nodes, dtype=np.int64)
        #: per share job: the GPU slot of each worker (in placement order)
        self.of_job: dict[int, tuple[int, ...]] = {}
        #: per node: bumped on every change of its GPU slots (a reader may cache per-GPU views)
        self.version: IntArray = np.zeros(n_nodes, dtype=np.int64)
        self.open = 0  # open GPU slots (GPUs holding shares); the state counts them as allocated GPUs
        self.used_milli = 0  # milli held by shares on them

    # --- queries -----------------------------------------------------------------------------
    def room(self, node: int, milli: int) -> int:
        """Workers of ``milli`` the open GPU slots of ``node`` hold."""
        slots = self.slots.get(node)
        return sum(v // milli for v in slots if v > 0) if slots else 0

    def workers(self, milli: int) -> IntArray:
        """Per node, the workers of ``milli`` its open GPU slots hold (0 on nodes taking no work)."""
        out = np.zeros(len(self._names), dtype=np.int64)
        up = self._up
        for node, slots in self.slots.items():
            if up[node]:
                out[node] = sum(v // milli for v in slots if v > 0)
        return out

    def free_milli(self, node: int) -> list[int]:
        """Free milli of each open GPU slot of ``node``, largest first."""
        return sorted((v for v in self.slots.get(node, ()) if v >= 0), reverse=True)

    # --- changes -----------------------------------------------------------------------------
    def take(self, job: int, node: int, m: int, pick: int, whole_free: int) -> tuple[int, bool]:
        """Book ``m`` milli for ``job`` on a GPU slot of ``node``: the one with free milli ``pick``,
        or for ``pick`` -1 the best fit (the least free that holds it), else a completely free GPU
        (``whole_free`` of them are free). Returns (the slot, whether it opened a completely free
        GPU: the caller then takes that GPU from its whole-GPU books)."""
        slots = self.slots.get(node)
        if slots is None:
            slots = self.slots[node] = []
        best = -1
        if pick < 0:
            for i, v in enumerate(slots):
                if v >= m and (best < 0 or v < slots[best]):
                    best = i
        elif pick < FULL_GPU_MILLI:
            if pick < m or pick not in slots:
                raise SchedulingError(f"job {job}: node {self._names[node]} has no GPU with {pick} milli "
                                      f"free for {m} milli")
            best = slots.index(pick)
        opened = best < 0
        if opened:  # open a completely free GPU
            if whole_free < 1:
                raise SchedulingError(f"job {job}: node {self._names[node]} has no free GPU for a share")
            self.open += 1
            if SLOT_CLOSED in slots:
                best = slots.index(SLOT_CLOSED)
                slots[best] = FULL_GPU_MILLI - m
            else:
                best = len(slots)
                slots.append(FULL_GPU_MILLI - m)
        else:
            slots[best] -= m
        self.used_milli += m
        self.best[node] = max(max(slots), 0)
        self.version[node] += 1
        return best, opened

    def give(self, node: int, slot: int, m: int) -> bool:
        """Give back ``m`` milli on GPU slot ``slot`` of ``node``. Returns whether that was the GPU's
        last share (it is closed: the caller gives the GPU back to its whole-GPU books)."""
        slots = self.slots[node]
        v = slots[slot] = slots[slot] + m
        self.used_milli -= m
        closed = v == FULL_GPU_MILLI
        if closed:
            slots[slot] = SLOT_CLOSED
            self.open -= 1
        self.best[node] = max(max(slots), 0)
        self.version[node] += 1
        return closed

    def copy(self, keep: bool = True) -> ShareBooks:
        """Books for a planning copy of the state: the same open slots (``keep``), else none (each
        node's version kept). Booking on the copy leaves these books as they are."""
        books = ShareBooks.__new__(ShareBooks)
        books._names, books._up = self._names, self._up
        books.version = self.version.copy()
        if keep:
            books.slots = {n: list(v) for n, v in self.slots.items()}
            books.best = self.best.copy()
            books.of_job = dict(self.of_job)
            books.open, books.used_milli = self.open, self.used_milli
        else:
            books.slots, books.of_job = {}, {}
            books.best = np.zeros_like(self.best)
            books.open = books.used_milli = 0
        return books

    # --- checking ----------------------------------------------------------------------------
    def check(self, jobs: Mapping[int, object], slot_used: dict[tuple[int, int], int]) -> None:
        """The books against the share allocations: ``jobs`` are the jobs holding an allocation,
        ``slot_used`` the milli held per (node, GPU slot); raises :class:`SchedulingError`."""
        names = self._names
        if set(self.of_job) - set(jobs):
            raise SchedulingError("share slots of a job that holds no allocation")
        for (node, slot), milli in slot_used.items():
            slots = self.slots.get(node, [])
            if milli > FULL_GPU_MILLI:
                raise SchedulingError(f"node {names[node]} GPU slot {slot} over-shared: {milli} milli")
            if slot >= len(slots) or slots[slot] != FULL_GPU_MILLI - milli:
                raise SchedulingError(f"node {names[node]} GPU slot {slot} free milli out of step")
        n_open = 0
        for node, slots in self.slots.items():
            for slot, v in enumerate(slots):
                if v != SLOT_CLOSED:
                    n_open += 1
                    if (node, slot) not in slot_used:
                        raise SchedulingError(f"node {names[node]} GPU slot {slot} open with no share")
            if int(self.best[node]) != max([*slots, 0]):
                raise SchedulingError(f"node {names[node]} share_max out of step")
        if n_open != self.open or sum(slot_used.values()) != self.used_milli:
            raise SchedulingError("share aggregates out of step")
