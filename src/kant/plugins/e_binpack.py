"""E-Binpack (``e-binpack``, a Place plugin): Kant's enhanced binpack for gangs on a switched network.

The exact rule (also in ``docs/policy-e-binpack.md``). Candidate nodes are those where one worker of
the job fits now (the framework's fit mask narrowed by the policy's Filter plugins); *slots* of a
node are how many workers it can hold now (see :mod:`kant.plugins.topology`). The policy's Score
plugins are not used: E-Binpack ranks nodes itself.

**Node key** for placing ``r`` GPUs on one node, lower is better, compared as a tuple
(:func:`ebinpack_key`)::

    (class, free - r, <tie-break terms>, node index)
    class = 0 if free == r (exact fit: the node ends full)
            1 if the node is partly used (0 < free < capacity) and free > r
            2 if the node is empty (free == capacity) and free > r
    tie-break terms (``tie_break``, default [leaf, spine]): free GPUs of the node's leaf, then of
            its spine (fuller groups first, so whole leaves and spines stay empty for big gangs)

So a small job fills a partly used node, prefers an exact fit, and breaks an empty node only when no
partly used node fits; among equals it goes to the fullest leaf/spine, then the lowest index.

**Single-worker jobs**: the candidate with the lowest key for ``r = gpus_per_worker``.

**Gangs (workers > 1)**:

1. if some node can hold every worker (slots >= workers), all workers go on the candidate of
   those with the lowest key for ``r = workers x gpus_per_worker`` (one node: no network traffic);
2. else, by ``topology``:

   * ``soft`` (default): the best leaf (among leaves with enough slots, the fewest free GPUs; ties to
     the fuller spine, then the lowest index), else the best spine (fewest free GPUs), else the whole
     cluster — trying tiers from the gang's home tier up to ``max_tier``; if none has room, the gang
     waits;
   * ``hard``: only the best group of the gang's *home tier* (the smallest tier one of whose groups
     could hold the gang on the empty cluster); otherwise the gang waits. A gang bigger than any
     spine has home tier ``cluster`` and may use any nodes;
   * ``off``: the whole cluster, nodes in single-node key order (``r = gpus_per_worker``);
     ``max_tier`` is ignored.

   Inside the chosen group the nodes are taken in the order of the tuple
   ``(spine free GPUs [cluster group only], leaf free GPUs [spine or cluster group], class, free - r,
   node index)`` with ``r = gpus_per_worker``, each node taking as many workers as its slots allow,
   until every worker has a place. For workers of a whole node's size only empty nodes fit, so the
   gang takes whole empty nodes inside the smallest group that holds it.

**Feasibility**: with ``topology: soft`` or ``hard``, a gang whose home tier is above ``max_tier``
(default ``cluster``: never) is rejected on arrival.

Everything is vectorised over node arrays (``np.bincount`` for group slots, one integer key per
node, ``np.argsort``/``np.cumsum`` to fill a group); the only Python loop is over at most three
tiers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, field_validator

from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import IntArray, Place, Placer
from kant.framework.registry import register_plugin
from kant.framework.status import SUCCESS, Status
from kant.model.classes import NodeClasses
from kant.model.fit import FULL_GPU_MILLI
from kant.model.state import Placement
from kant.plugins.topology import (
    CLUSTER,
    SPINE,
    TIERS,
    HomeTierCache,
    TierName,
    best_group,
    lexicographic_key,
    node_slots,
    tier_feasible,
    tier_groups,
)
from kant.stamp import Stamped

if TYPE_CHECKING:
    from kant.plugins.share_place import NodeRows

__all__ = ["EMPTY", "EXACT", "PARTIAL", "EBinpack", "EBinpackArgs", "ebinpack_key", "fill_in_order", "node_class"]

#: up to this many leaves, _pick works on Python lists; beyond, NumPy over the leaves is cheaper
_FEW_LEAVES = 32
_NO_LEAF = np.int64(1 << 62)  # above every leaf key (the key multipliers keep keys below 2**62)

NAME = "e-binpack"

#: node classes of the key, best first
EXACT, PARTIAL, EMPTY = 0, 1, 2

TieBreak = Literal["leaf", "spine"]

def node_class(capacity: IntArray, free: IntArray, request: int) -> IntArray:
    """EXACT where ``free == request``, else PARTIAL on partly used nodes, else EMPTY."""
    return np.where(free == request, EXACT, np.where(free < capacity, PARTIAL, EMPTY)).astype(np.int64)


def ebinpack_key(
    capacity: IntArray,
    free: IntArray,
    request: int,
    leaf_free: IntArray,
    spine_free: IntArray,
    tie_break: Sequence[TieBreak] = ("leaf", "spine"),
) -> IntArray:
    """Pure scoring function: E-Binpack's preference key per node for ``request`` GPUs on one node
    (lower is better; equal keys tie and go to the lowest position).

    All arrays are per candidate node (every node must have ``free >= request``); ``leaf_free`` and
    ``spine_free`` are the free GPUs of each node's leaf and spine. Orders like the tuple
    ``(class, free - request, *tie-break terms)``, class as in the module docstring.
    """
    terms: list[IntArray] = [node_class(capacity, free, request), np.maximum(free - request, 0)]
    for t in tie_break:
        terms.append(np.maximum(leaf_free if t == "leaf" else spine_free, 0))
    return lexicographic_key(terms)


def fill_in_order(nodes: IntArray, key: IntArray, slots: IntArray, workers: int) -> tuple[int, ...]:
    """Workers' nodes when ``nodes`` (ascending) are taken in ``key`` order (ties: lower node first),
    each holding up to ``slots`` workers, until ``workers`` are placed. Needs ``slots.sum() >= workers``."""
    order = np.argsort(key, kind="stable")
    take = slots[order]
    cum = np.cumsum(take)
    k = int(np.searchsorted(cum, workers))
    take = take[: k + 1].copy()
    take[k] -= int(cum[k]) - workers
    return tuple(np.repeat(nodes[order[: k + 1]], take).tolist())


class EBinpackArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    topology: Literal["soft", "hard", "off"] = "soft"
    max_tier: TierName = "cluster"
    tie_break: tuple[TieBreak, ...] = ("leaf", "spine")
    #: one-worker jobs by the share-aware key (:func:`kant.plugins.share_place.ebinpack_share_key`,
    #: free milli-GPU per GPU) instead of the whole-GPU key; gangs as without it
    share_aware: bool = False
    #: share-aware mode: equal keys go to the lowest node index or a uniform pick from ``env.rng``
    tie: Literal["first", "random"] = "first"

    @field_validator("tie_break")
    @classmethod
    def _distinct(cls, value: tuple[TieBreak, ...]) -> tuple[TieBreak, ...]:
        if len(set(value)) != len(value):
            raise ValueError("tie_break lists a term twice")
        return value


@register_plugin
class EBinpack(Place):
    """E-Binpack gang placement; the exact rule is in the module docstring."""

    NAME = NAME
    Args = EBinpackArgs
    SHARES = True  # share jobs go to the runner's filter+score unless share_aware

    def __init__(self, args: BaseModel | None = None, weight: float = 1.0) -> None:
        super().__init__(args, weight)
        self._home = HomeTierCache()
        self._mult: tuple[int, int, int, int] | None = None
        self._mult_cluster: object = None
        self._plans: dict[tuple[int, int], list[list[int]]] = {}
        self._leaf_nodes: list[list[int]] = []
        self._leaf_first: list[int] = []
        self._leaves_in_order = False
        self._per_leaf: Stamped[list[int]] = Stamped([])  # key per leaf, while the free capacity is unchanged
        self._per_leaf_array: Stamped[IntArray] = Stamped(np.zeros(0, dtype=np.int64))  # the same, as an array
        self._leaf_spine: list[int] = []
        self._rows: NodeRows | None = None
        # share-aware placement of one-worker jobs has its own search; otherwise a one-worker job no
        # node has room for ends in _no_fit(0) on either path of place (the class index's, the scan's)
        self._share_aware = self._args.share_aware
        self.one_worker_by_room = not self._share_aware

    @property
    def _args(self) -> EBinpackArgs:
        assert isinstance(self.args, EBinpackArgs)
        return self.args

    def _place_share_aware(self, ctx: CycleContext, job: int, fw: Placer) -> Placement | Status:
        from kant.plugins.share_place import MILLI, NodeRows, ebinpack_share_key

        nodes = np.flatnonzero(fw.candidate_mask(ctx, job))
        if not nodes.size:
            return fw.place_workers(ctx, job)  # says why, the runner's way
        rows = self._rows
        if rows is None:
            rows = self._rows = NodeRows(ctx.env)
        rows.sync(ctx.state)
        g, c, m = fw.job_gpus[job], fw.job_cpu[job], fw.job_mem[job]
        share = fw.is_share(job)
        milli = fw.job_milli[job] if share else (MILLI if g > 0 else 0)
        cpu_free = np.where(ctx.env.cpu_unmodelled[nodes], np.iinfo(np.int64).max // 4, ctx.state.free_cpu[nodes])
        key = ebinpack_share_key(rows, nodes, cpu_free.astype(np.int64), g, milli, c,
                                 max(int(ctx.env.cluster.gpus.max()), 1))
        cand = nodes[key == key.min()]
        if cand.size == 1 or self._args.tie == "first":
            node = int(cand[0])
        else:
            node = int(cand[int(ctx.env.rng.integers(cand.size))])
        if share:
            return Placement((node,), 1, c, m, milli)
        return Placement((node,), g, c, m)

    def setup(self, env: SchedulerEnv) -> None:
        """Precompute the mixed-radix multipliers of the single-node key from the cluster's static
        bounds (free <= node GPUs, leaf free <= leaf GPUs, spine free <= spine GPUs), so the hot path
        builds the key in a few array operations. ``None`` (fall back to :func:`ebinpack_key`) when
        the product of the bounds does not fit in 62 bits."""
        cluster = env.cluster
        self._mult_cluster = cluster
        self._plans = {}
        self._rows = None
        self._leaf_nodes = [[] for _ in range(cluster.n_leaves)]
        for node, leaf in enumerate(cluster.leaf.tolist()):
            self._leaf_nodes[leaf].append(node)
        self._leaf_first = [nodes[0] if nodes else cluster.n_nodes for nodes in self._leaf_nodes]
        # leaves hold consecutive node ranges in leaf order (as every built-in cluster does): then the
        # lowest node of tied leaves is in the lowest-numbered leaf
        self._leaves_in_order = bool(np.all(np.diff(cluster.leaf) >= 0))
        self._per_leaf.forget()
        self._per_leaf_array.forget()
        self._leaf_spine = cluster.leaf_spine.tolist()
        bound = {"leaf": int(cluster.leaf_gpus.max()) + 1, "spine": int(cluster.spine_gpus.max()) + 1}
        radices = [3, int(cluster.gpus.max()) + 1, *(bound[t] for t in self._args.tie_break)]
        if math.prod(radices) >= (1 << 62):
            self._mult = None
            return
        mult = [1] * len(radices)
        for i in range(len(radices) - 2, -1, -1):
            mult[i] = mult[i + 1] * radices[i + 1]
        by_term = dict(zip(self._args.tie_break, mult[2:], strict=True))
        self._mult = (mult[0], mult[1], by_term.get("leaf", 0), by_term.get("spine", 0))

    def feasible(self, env: SchedulerEnv, job: int) -> Status:
        if int(env.jobs.workers[job]) <= 1 or self._args.topology == "off":
            return SUCCESS
        return tier_feasible(env, job, self._home.get(env, job), TIERS.index(self._args.max_tier), NAME)

    def _node_key(self, ctx: CycleContext, nodes: IntArray, request: int) -> IntArray:
        """:func:`ebinpack_key` of ``nodes`` (ascending) now; the same order, computed faster."""
        cluster, state = ctx.env.cluster, ctx.state
        if self._mult_cluster is not cluster:
            self.setup(ctx.env)
        free = state.free[nodes]
        if self._mult is None:
            return ebinpack_key(
                cluster.gpus[nodes],
                free,
                request,
                state.leaf_free[cluster.leaf[nodes]],
                state.spine_free[cluster.spine[nodes]],
                self._args.tie_break,
            )
        m_cls, m_free, m_leaf, m_spine = self._mult
        key: IntArray = (free - request) * m_free
        key += np.where(free == request, 0, np.where(free < cluster.gpus[nodes], m_cls, 2 * m_cls))
        if m_leaf or m_spine:  # the tie-break terms, combined per leaf first (few leaves, many nodes)
            per_leaf = state.leaf_free * m_leaf + state.spine_free[cluster.leaf_spine] * m_spine
            key += per_leaf[cluster.leaf[nodes]]
        return key

    # --- the same choice from the node-class index (no node scan) --------------------------------
    def _class_plan(self, env: SchedulerEnv, classes: NodeClasses, request: int, gpu_type: int) -> list[list[int]]:
        """Node classes (GPU type, capacity, free) with ``free >= request`` of an allowed type, grouped
        by equal ``(class, free - request)`` (the key's terms that depend on the node alone), best
        group first. Cached per (request, type)."""
        key = (request, gpu_type)
        plan = self._plans.get(key)
        if plan is None:
            cand = classes.class_free >= request
            if gpu_type >= 0:
                cand &= np.isin(classes.class_type, env.cluster_types_of(gpu_type))
            ids = np.flatnonzero(cand)
            free, cap = classes.class_free[ids], classes.class_cap[ids]
            rank = np.where(free == request, EXACT, np.where(free < cap, PARTIAL, EMPTY))
            order_key = rank * (int(classes.class_cap.max(initial=0)) + 1) + (free - request)
            plan = []
            last = None
            for i in np.argsort(order_key, kind="stable").tolist():
                if order_key[i] != last:
                    plan.append([])
                    last = order_key[i]
                plan[-1].append(int(ids[i]))
            self._plans[key] = plan
        return plan

    def _pick(self, ctx: CycleContext, classes: NodeClasses, plan: list[list[int]]) -> int:
        """The node with the lowest :meth:`_node_key` among the nodes of ``plan``'s classes, or -1:
        the first group with a node, then the lowest tie-break value per leaf (leaves holding nodes of
        the group, from the per-leaf class counts), then the lowest node index in those leaves.
        Plain Python over the leaves on small clusters (NumPy calls on so small arrays cost more),
        NumPy over them beyond ``_FEW_LEAVES``."""
        assert self._mult is not None
        _, _, m_leaf, m_spine = self._mult
        count = classes.count
        for group in plan:
            if len(group) == 1:  # one class per group: one GPU type and capacity (the usual case)
                if not count[group[0]]:
                    continue
                live = group
            else:
                live = [c for c in group if count[c]]
                if not live:
                    continue
            if not (m_leaf or m_spine):
                return min(classes.head(c) for c in live)
            leaf_count = classes.leaf_count
            if len(live) == 1:  # one class: if one leaf holds all its nodes, its lowest node is the answer
                c = live[0]
                head = classes.head(c)
                if count[c] == 1 or leaf_count.item(c, classes.node_leaf[head]) == count[c]:
                    return head
            row = leaf_count[live[0]] if len(live) == 1 else leaf_count[live].sum(axis=0)
            node_class = classes.node_class
            many = len(row) > _FEW_LEAVES  # then NumPy over the leaves
            if many and self._leaves_in_order:
                leaves = []
            elif many:
                leaves = np.flatnonzero(row).tolist()
            else:
                leaves = [i for i, n in enumerate(row.tolist()) if n]  # leaves holding a node of the group
            if self._leaves_in_order:  # the lowest leaf of the lowest key = the lowest node of the tie
                if many:  # argmin keeps the first of equals: the lowest leaf
                    leaf = int(np.where(row > 0, self._leaf_key_array(ctx, m_leaf, m_spine), _NO_LEAF).argmin())
                elif len(leaves) == 1:
                    leaf = leaves[0]
                else:  # min keeps the first of equals: the lowest leaf
                    leaf = min(leaves, key=self._leaf_keys(ctx, m_leaf, m_spine).__getitem__)
                nodes = self._leaf_nodes[leaf]
                if len(live) == 1:
                    c = live[0]
                    for n in nodes:
                        if node_class[n] == c:
                            return n
                else:
                    wanted = set(live)
                    for n in nodes:
                        if node_class[n] in wanted:
                            return n
                raise AssertionError("leaf counts out of step with the node classes")  # pragma: no cover
            if len(leaves) == 1:
                tied = leaves
            else:
                per_leaf = self._leaf_keys(ctx, m_leaf, m_spine)
                low = min(per_leaf[i] for i in leaves)
                tied = [i for i in leaves if per_leaf[i] == low]
            first = self._leaf_first
            if len(tied) > 1:
                tied.sort(key=first.__getitem__)
            wanted = set(live)
            best = -1
            for leaf in tied:
                if best >= 0 and first[leaf] > best:
                    break  # every node of this leaf and of the later ones has a higher index
                for n in self._leaf_nodes[leaf]:
                    if node_class[n] in wanted:
                        if best < 0 or n < best:
                            best = n
                        break
            return best
        return -1

    def _leaf_keys(self, ctx: CycleContext, m_leaf: int, m_spine: int) -> list[int]:
        """The tie-break part of the key per leaf (``leaf free x m_leaf + spine free x m_spine``), cached
        while the state's free capacity is unchanged."""
        state = ctx.state
        cached = self._per_leaf
        if cached.fresh(state, state.version):
            return cached.value
        keys: list[int]
        if state.cluster.n_leaves > _FEW_LEAVES:
            keys = self._leaf_key_array(ctx, m_leaf, m_spine).tolist()
        else:
            spine_free = state.spine_free.tolist()
            keys = [
                lf * m_leaf + spine_free[sp] * m_spine
                for lf, sp in zip(state.leaf_free.tolist(), self._leaf_spine, strict=True)
            ]
        return cached.keep(state, state.version, keys)

    def _leaf_key_array(self, ctx: CycleContext, m_leaf: int, m_spine: int) -> IntArray:
        """:meth:`_leaf_keys` as an array (for clusters with many leaves), cached alike."""
        state = ctx.state
        cached = self._per_leaf_array
        if cached.fresh(state, state.version):
            return cached.value
        keys: IntArray = state.leaf_free * m_leaf + state.spine_free[state.cluster.leaf_spine] * m_spine
        return cached.keep(state, state.version, keys)

    def place(self, ctx: CycleContext, job: int, fw: Placer) -> Placement | Status:
        if self._share_aware and fw.job_workers[job] == 1:
            return self._place_share_aware(ctx, job, fw)
        if fw.job_milli[job] < FULL_GPU_MILLI and fw.is_share(job):
            return fw.place_workers(ctx, job)
        w, g, c, m = fw.job_workers[job], fw.job_gpus[job], fw.job_cpu[job], fw.job_mem[job]
        # the class index when it gives the same answer as the node scan: no filters, the live state,
        # a GPU job, CPU and memory not asked for (or not modelled), an exact single-node key
        classes = ctx.state.classes
        if classes is not None and (
            fw.filters or self._mult is None or self._mult_cluster is not ctx.env.cluster or g <= 0
            or (c and not fw.cpu_all_unmodelled) or (m and not fw.mem_all_unmodelled)
        ):
            classes = None
        if classes is not None:
            t = fw.job_type[job]
            plan = self._plans.get((w * g, t))  # (the cached plan without a call: see _class_plan)
            if plan is None:
                plan = self._class_plan(ctx.env, classes, w * g, t)
            best = self._pick(ctx, classes, plan)
            if best >= 0:  # one worker, or the whole gang on one node
                return Placement((best,) * w, g, c, m)
            if w == 1:
                return _no_fit(ctx, job, 0)
        mask = fw.candidate_mask(ctx, job)
        if w == 1:
            nodes = np.flatnonzero(mask)
            if len(nodes) == 0:
                return _no_fit(ctx, job, 0)
            best = int(nodes[int(np.argmin(self._node_key(ctx, nodes, g)))])
            return Placement((best,), g, c, m)
        slots = node_slots(ctx, job, mask)
        whole = np.flatnonzero(slots >= w)
        if len(whole):
            best = int(whole[int(np.argmin(self._node_key(ctx, whole, w * g)))])
            return Placement((best,) * w, g, c, m)
        total = int(slots.sum())
        if total < w:
            return _no_fit(ctx, job, total)
        args = self._args
        if args.topology == "off":
            nodes = np.flatnonzero(slots)
            return Placement(fill_in_order(nodes, self._node_key(ctx, nodes, g), slots[nodes], w), g, c, m)
        home = self._home.get(ctx.env, job)
        max_tier = TIERS.index(args.max_tier)
        tiers = [home] if args.topology == "hard" else list(range(home, max_tier + 1))
        for tier in tiers:
            if tier == CLUSTER:
                nodes = np.flatnonzero(slots)
            else:
                group = best_group(ctx, tier, slots, w)
                if group < 0:
                    continue
                nodes = np.flatnonzero((tier_groups(ctx, tier)[0] == group) & (slots > 0))
            key = self._group_key(ctx, tier, nodes, g)
            return Placement(fill_in_order(nodes, key, slots[nodes], w), g, c, m)
        return Status.unschedulable(
            f"needs {ctx.env.jobs.describe_request(job)}; {args.topology} topology: no "
            f"{' or '.join(TIERS[t] for t in tiers)} has room for the whole gang now "
            f"({total} worker slot(s) in the cluster)",
            NAME,
        )

    def _group_key(self, ctx: CycleContext, tier: int, nodes: IntArray, g: int) -> IntArray:
        cluster, state = ctx.env.cluster, ctx.state
        free = state.free[nodes]
        terms: list[IntArray] = [node_class(cluster.gpus[nodes], free, g), np.maximum(free - g, 0)]
        if tier >= SPINE:
            terms.insert(0, np.maximum(state.leaf_free[cluster.leaf[nodes]], 0))
        if tier >= CLUSTER:
            terms.insert(0, np.maximum(state.spine_free[cluster.spine[nodes]], 0))
        return lexicographic_key(terms)




def _no_fit(ctx: CycleContext, job: int, slots: int) -> Status:
    return Status.unschedulable(
        f"needs {ctx.env.jobs.describe_request(job)}; room now for {slots} worker(s)", "node-resources-fit"
    )
