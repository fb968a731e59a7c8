"""A tree of queues with guarantees, borrowing and lending limits (GPUs), and the one rule of what a
queue may hold.

The tree (Kueue's hierarchical cohorts: cohort -> ClusterQueue; Volcano / KAI hierarchical queues;
Slurm's account tree) has a root that stands for the whole cluster, inner queues (an organisation, a
team) and leaves, which tenants map to. Every queue ``q`` has, in GPUs:

* a **guarantee** ``G_q`` (Kueue ``nominalQuota``): its children's guarantees add up to at most its
  own; the root's guarantee is the cluster's GPUs;
* a **borrowing limit** ``B_q`` (default unlimited): it never holds more than ``G_q + B_q``;
* a **lending limit** ``L_q`` (default its whole guarantee): at most ``L_q`` of its unused guarantee
  may be used outside its subtree; the rest, ``R_q = G_q - L_q``, stays reserved for it.

With ``U_q`` the GPUs the running jobs of ``q``'s subtree hold, a queue *takes* from its parent

    E_leaf = max(U_leaf, R_leaf)            E_q = max(R_q, sum over its children c of E_c)

(what it uses, or keeps reserved, whichever is more), and the **capacity** ``A_q`` it may take is,
from the root down::

    A_root = G_root
    A_c    = min(G_c + B_c,  A_p - sum over siblings s of c of E_s)      (p: c's parent)

A job of ``r`` GPUs in leaf ``l`` is admitted when, with it, ``E_q <= A_q`` for every queue ``q`` on
the path from ``l`` to the root (and the top queues take at most ``G_root``). Then no queue exceeds
its limits at any instant: ``U_q <= E_q <= A_q <= G_q + B_q`` for every queue
(:meth:`QueueTree.violations`), since a start is checked on its whole path, and a start elsewhere
lowers a queue's capacity only down to what it takes (its parent's takings stay within the parent's
capacity, which the start checked).

A queue *borrows* when it takes more than its guarantee (``E_q > G_q``). What a leaf is guaranteed,
it gets back by **reclaim**: the running jobs that may be evicted for a job of leaf ``l`` (within its
guarantee with the job: ``U_l + r <= G_l``) are those of leaves ``m`` that borrow, where the child
``c`` of the lowest common ancestor of ``l`` and ``m`` on ``m``'s side borrows too (so some of what
``c`` takes is lent from ``l``'s side); they go in Kueue's order: nearest cohort first (deepest common
ancestor), lowest priority, most recently started (:meth:`QueueTree.reclaim_order`). With every such
job gone, every queue takes at most its guarantee, and a job within its leaf's guarantee is admitted.

Everything here is plain arrays indexed by queue (0 is the root); the ``queues`` plugin keeps one
tree and its usage, the ``fair-share`` plugin reads the weights.

**Per GPU type** (Kueue's resource flavors): a queue may give its guarantee and limits per GPU type
(:attr:`QueueDef.types`). Each GPU type named anywhere in the tree is one more tree of the same shape
(:meth:`QueueDef.for_type`) whose root is the cluster's GPUs of that type and whose queues have the
guarantee and limits given for that type (none given: a leaf is guaranteed 0 of it, an inner queue
its children's sum; no borrowing limit; lends all). The same rule holds in each such tree separately
and in the GPU-total tree, so a job is admitted when every tree it would use admits it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ROOT", "QueueDef", "QueueTree", "kueue_order"]

#: the queue index of the root
ROOT = 0

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class QueueDef:
    """One queue as configured: ``guaranteed`` None means the sum of its children's; ``borrowing_limit``
    and ``lending_limit`` None mean unlimited and its whole guarantee; ``tenants`` of a leaf (None: a
    tenant named as the leaf). These are the GPU total (any type); ``types`` holds, per GPU type
    name, the (guaranteed, borrowing limit, lending limit) given for that type (None: not given)."""

    name: str
    guaranteed: int | None = None
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    weight: float = 1.0
    tenants: tuple[str, ...] | None = None
    children: tuple[QueueDef, ...] = ()
    types: tuple[tuple[str, int | None, int | None, int | None], ...] = ()

    def type_names(self) -> set[str]:
        """Every GPU type named by this queue or a queue below it."""
        out = {t[0] for t in self.types}
        for c in self.children:
            out |= c.type_names()
        return out

    def for_type(self, gpu_type: str) -> QueueDef:
        """This queue (and its subtree) as seen by the tree of one GPU type."""
        g, b, l_ = next(((g, b, l_) for t, g, b, l_ in self.types if t == gpu_type), (None, None, None))
        return QueueDef(self.name, g, b, l_, self.weight, self.tenants,
                        tuple(c.for_type(gpu_type) for c in self.children))

    def total_guarantee(self) -> int:
        """The guarantee this queue resolves to in the GPU-total tree."""
        inner = sum(c.total_guarantee() for c in self.children)
        return inner if self.guaranteed is None else self.guaranteed


class QueueTree:
    """The queues as arrays, their usage, and the capacity rule (see the module docstring).

    ``capacity`` is the root's guarantee (the cluster's GPUs). Raises ValueError naming the queue
    when the guarantees do not nest."""

    def __init__(self, top: Sequence[QueueDef], capacity: float, unit: str = "") -> None:
        #: what the GPUs are ("": any type; else a GPU type name), for reasons
        self.unit = unit
        gpus = f"{unit} GPUs" if unit else "GPUs"
        names: list[str] = ["<cluster>"]
        parent: list[int] = [-1]
        depth: list[int] = [0]
        guaranteed: list[float] = [float(capacity)]
        borrow: list[float] = [0.0]
        lend: list[float] = [math.inf]
        weight: list[float] = [1.0]
        children: list[list[int]] = [[]]
        tenants: dict[str, int] = {}
        defs: list[QueueDef | None] = [None]

        def add(d: QueueDef, p: int) -> int:
            q = len(names)
            names.append(d.name)
            parent.append(p)
            depth.append(depth[p] + 1)
            guaranteed.append(0.0)
            borrow.append(math.inf if d.borrowing_limit is None else float(d.borrowing_limit))
            lend.append(math.inf if d.lending_limit is None else float(d.lending_limit))
            weight.append(float(d.weight))
            children.append([])
            defs.append(d)
            children[p].append(q)
            for c in d.children:
                add(c, q)
            inner = sum(guaranteed[c] for c in children[q])
            g = inner if d.guaranteed is None else float(d.guaranteed)
            if g < inner:
                what = f"guaranteed.{unit}" if unit else "guaranteed"
                raise ValueError(f"queue {d.name}: {what} {g:g} is below its children's {inner:g}")
            guaranteed[q] = g
            if not d.children:
                for t in d.tenants if d.tenants is not None else (d.name,):
                    tenants[t] = q
            return q

        for d in top:
            add(d, ROOT)
        top_sum = sum(guaranteed[c] for c in children[ROOT])
        if top_sum > capacity:
            raise ValueError(f"the queues guarantee {top_sum:g} {gpus}; the cluster has {capacity:g}")
        self.names = tuple(names)
        self.index = {n: i for i, n in enumerate(names)}
        self.parent = np.asarray(parent, dtype=np.int64)
        self.depth = np.asarray(depth, dtype=np.int64)
        self.guaranteed = np.asarray(guaranteed, dtype=np.float64)
        self.borrowing_limit = np.asarray(borrow, dtype=np.float64)
        self.lending_limit = np.asarray(lend, dtype=np.float64)
        self.weight = np.asarray(weight, dtype=np.float64)
        self.children = tuple(tuple(c) for c in children)
        self.is_leaf = np.asarray([not c for c in children], dtype=bool)
        self.is_leaf[ROOT] = False
        #: the leaf of each tenant name
        self.leaf_of = tenants
        #: R_q: the part of the guarantee never lent
        self.reserved = np.maximum(self.guaranteed - self.lending_limit, 0.0)
        self.reserved[ROOT] = 0.0
        #: per queue, the path up to the root (the queue first, the root last)
        self.path: tuple[tuple[int, ...], ...] = tuple(self._path(q) for q in range(len(names)))
        n = len(names)
        # the hot path works on Python lists (a few dozen queues: NumPy scalars would cost more)
        self._par = [int(x) for x in parent]
        self._g = [float(x) for x in self.guaranteed]
        self._lim = [float(x) for x in self.guaranteed + self.borrowing_limit]
        self._lim[ROOT] = self._g[ROOT]
        self._r = [float(x) for x in self.reserved]
        self._leaf = [bool(x) for x in self.is_leaf]
        self._u = [0.0] * n  # U_q
        self._e = [0.0] * n  # E_q
        self._ce = [0.0] * n  # per queue, the sum of its children's E
        self._e, self._ce = self._takes(self._u)

    def _takes(self, usage: list[float]) -> tuple[list[float], list[float]]:
        """E and the children's sums of E for the usage ``usage`` (bottom-up over every queue)."""
        n = len(usage)
        e = [0.0] * n
        ce = [0.0] * n
        r, par, leaf = self._r, self._par, self._leaf
        for q in range(n - 1, 0, -1):  # children after parents: bottom-up
            e[q] = max(r[q], usage[q] if leaf[q] else ce[q])
            ce[par[q]] += e[q]
        e[ROOT] = ce[ROOT]
        return e, ce

    def _path(self, q: int) -> tuple[int, ...]:
        out = [q]
        while out[-1] != ROOT:
            out.append(int(self.parent[out[-1]]))
        return tuple(out)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def usage(self) -> FloatArray:
        """U_q: GPUs the running jobs of each queue's subtree hold."""
        return np.asarray(self._u, dtype=np.float64)

    @property
    def takes(self) -> FloatArray:
        """E_q: what each queue takes from its parent (used or reserved)."""
        return np.asarray(self._e, dtype=np.float64)

    def used(self, q: int) -> float:
        return self._u[q]

    # --- usage ------------------------------------------------------------------------------------
    def add(self, leaf: int, gpus: float) -> None:
        """``gpus`` more (or fewer, negative) GPUs held by ``leaf`` (and so by its ancestors)."""
        u, e, ce, r, par = self._u, self._e, self._ce, self._r, self._par
        for q in self.path[leaf]:
            u[q] += gpus
            if q == ROOT:
                e[q] = ce[q]
                break
            before = e[q]
            e[q] = max(r[q], u[q] if q == leaf else ce[q])
            ce[par[q]] += e[q] - before

    # --- the rule ---------------------------------------------------------------------------------
    def capacity(self, q: int) -> float:
        """A_q now (from the root down its path)."""
        ce, e, lim, par = self._ce, self._e, self._lim, self._par
        avail = self._g[ROOT]
        for c in reversed(self.path[q][:-1]):
            avail = min(lim[c], avail - (ce[par[c]] - e[c]))
        return avail

    def blocking(self, leaf: int, gpus: float) -> tuple[int, float] | None:
        """The highest queue on ``leaf``'s path that a job of ``gpus`` would take past its capacity,
        with that capacity (computed with the job); None if it may start."""
        u, e, ce, r, par, lim = self._u, self._e, self._ce, self._r, self._par, self._lim
        path = self.path[leaf]
        # E' along the path, bottom-up (siblings off the path keep theirs)
        new: list[float] = []
        delta = 0.0
        for q in path[:-1]:
            old = e[q]
            e_new = max(r[q], u[q] + gpus) if q == leaf else max(r[q], ce[q] + delta)
            new.append(e_new)
            delta = e_new - old
        total = ce[ROOT] + delta
        cap = self._g[ROOT]
        if total > cap + 1e-9:
            return ROOT, cap
        avail = cap
        for k in range(len(path) - 2, -1, -1):  # top-down
            c = path[k]
            avail = min(lim[c], avail - (ce[par[c]] - e[c]))  # (the siblings' takings are unchanged)
            if new[k] > avail + 1e-9:
                return c, avail
        return None

    def blocking_without(self, leaf: int, gpus: float, gone: dict[int, float]) -> tuple[int, float] | None:
        """:meth:`blocking` with ``gone[m]`` GPUs fewer held by leaf ``m`` (jobs to evict)."""
        usage = list(self._u)
        for m, g in gone.items():
            for q in self.path[m]:
                usage[q] -= g
        for q in self.path[leaf]:
            usage[q] += gpus
        e, ce = self._takes(usage)
        cap = self._g[ROOT]
        if e[ROOT] > cap + 1e-9:
            return ROOT, cap
        lim, par = self._lim, self._par
        avail = cap
        for c in reversed(self.path[leaf][:-1]):
            avail = min(lim[c], avail - (ce[par[c]] - e[c]))
            if e[c] > avail + 1e-9:
                return c, avail
        return None

    def explain(self, leaf: int, gpus: float, q: int, avail: float) -> str:
        """Why a job of ``gpus`` in ``leaf`` may not start: with it, queue ``q`` would pass its capacity
        ``avail`` (what :meth:`blocking` found)."""
        u = self._u[q]
        tail = f"holds {u:g}, the job needs {gpus:g}"
        unit = f"{self.unit} GPUs" if self.unit else "GPUs"
        if q == ROOT:
            return (
                f"the queues take {self._e[ROOT]:g} of the cluster's {avail:g} {unit}, used or reserved "
                f"(the job needs {gpus:g})"
            )
        name = self.names[q]
        limit = self._lim[q]
        if u + gpus > limit + 1e-9:
            return (
                f"queue {name} at its max of {limit:g} {unit} (guarantee {self._g[q]:g} + borrowing "
                f"limit {self.borrowing_limit[q]:g}; {tail})"
            )
        p = self.names[self._par[q]]
        return (
            f"queue {name} may take {max(avail, 0.0):g} {unit} now: the rest of {p} is used or reserved by "
            f"others ({tail})"
        )

    def violations(self) -> list[str]:
        """Every queue that takes more than its capacity, or holds more than its guarantee plus its
        borrowing limit, now (should be none), in words. Recomputes E from U (not the kept sums)."""
        out: list[str] = []
        e, ce = self._takes(self._u)
        if any(abs(a - b) > 1e-6 for a, b in zip(e, self._e, strict=True)):
            out.append("the kept takings are out of step with the usage")
        avail = [0.0] * len(self)
        avail[ROOT] = self._g[ROOT]
        if e[ROOT] > avail[ROOT] + 1e-9:
            out.append(f"the queues take {e[ROOT]:g} > {avail[ROOT]:g}")
        for q in range(1, len(self)):  # parents come before their children
            p = self._par[q]
            avail[q] = min(self._lim[q], avail[p] - (ce[p] - e[q]))
            if e[q] > avail[q] + 1e-9:
                out.append(f"queue {self.names[q]} takes {e[q]:g} > its capacity {avail[q]:g}")
            if self._u[q] > self._lim[q] + 1e-9:
                out.append(f"queue {self.names[q]} holds {self._u[q]:g} > its max {self._lim[q]:g}")
        return out

    def borrowing(self) -> FloatArray:
        """Per queue, GPUs taken above the guarantee (0 for the root)."""
        out: FloatArray = np.maximum(self.takes - self.guaranteed, 0.0)
        out[ROOT] = 0.0
        return out

    def any_borrowing(self) -> bool:
        """Does some queue take more than its guarantee?"""
        g, e = self._g, self._e
        return any(e[q] > g[q] + 1e-9 for q in range(1, len(g)))

    def lca_child(self, leaf: int, other: int) -> tuple[int, int]:
        """(depth of the lowest common ancestor of ``leaf`` and ``other``, the child of that ancestor
        on ``other``'s side)."""
        mine = set(self.path[leaf])
        prev = other
        for q in self.path[other]:
            if q in mine:
                return int(self.depth[q]), prev
            prev = q
        return 0, prev  # (unreachable: the root is on both paths)

    def may_reclaim_from(self, leaf: int, other: int) -> tuple[bool, int]:
        """May a job of ``leaf`` (within its guarantee) evict a job of ``other``? With the depth of
        their lowest common ancestor (deeper: nearer cohort)."""
        if other == leaf:
            return False, 0
        depth, side = self.lca_child(leaf, other)
        g, e = self._g, self._e
        return bool(e[other] > g[other] + 1e-9 and e[side] > g[side] + 1e-9), depth

    def reclaim_candidates(self, leaf: int, leaves: IntArray) -> tuple[IntArray, IntArray]:
        """Indices into ``leaves`` (the leaves of running jobs) whose jobs a job of ``leaf`` may evict,
        with the depth of each one's lowest common ancestor with ``leaf``."""
        keep: list[int] = []
        depth: list[int] = []
        cache: dict[int, tuple[bool, int]] = {}
        for i, m in enumerate(leaves.tolist()):
            got = cache.get(m)
            if got is None:
                got = cache[m] = self.may_reclaim_from(leaf, m)
            if got[0]:
                keep.append(i)
                depth.append(got[1])
        return np.asarray(keep, dtype=np.int64), np.asarray(depth, dtype=np.int64)

    def reclaim_order(
        self, leaf: int, leaves: IntArray, priority: FloatArray, start: FloatArray, rows: IntArray
    ) -> IntArray:
        """Indices into the running jobs described by (their leaf, priority, start, job row) that a job of
        ``leaf`` may evict, in Kueue's order: nearest cohort first, lowest priority, latest start, row."""
        idx, depth = self.reclaim_candidates(leaf, leaves)
        return kueue_order(idx, depth, priority, start, rows)


def kueue_order(idx: IntArray, depth: IntArray, priority: FloatArray, start: FloatArray, rows: IntArray) -> IntArray:
    """``idx`` (indices into running jobs' priority, start and row) in Kueue's order of victims: the
    deepest common ancestor first (``depth``, one per index), lowest priority, latest start, row."""
    if len(idx) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((rows[idx], -start[idx], priority[idx], -depth))
    out: IntArray = idx[order]
    return out
