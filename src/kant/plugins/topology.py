"""Topology-aware gang placement (``topology``, a Place plugin) and soft topology scoring
(``topology-score``, a Score plugin), plus the tier helpers E-Binpack shares.

The network has three tiers (see :class:`kant.model.cluster.Cluster`): a node sits under one leaf
switch, a leaf under one spine, and the spines make up the cluster. A *group* is one leaf, one spine,
or the whole cluster.

Definitions (exact; see ``docs/policy-topology.md``):

* **slots** of a node for a job: how many workers of the job the node can hold now,
  ``min(workers, free // gpus_per_worker, free_cpu // cpu (if modelled), free_mem // mem (if
  modelled))`` on nodes where one worker fits (the framework's fit mask narrowed by the policy's
  Filter plugins), 0 elsewhere. A group's slots are the sum over its nodes.
* **home tier** of a job: the smallest tier with at least one group that could hold every worker of
  the job on the *empty* cluster (same slot rule on the nodes' full capacity, only nodes of an
  allowed GPU type): ``leaf`` if some leaf could, else ``spine`` if some spine could, else
  ``cluster``. It depends only on the job's shape and the cluster, never on the current load.
* **best group** of a tier: among the groups whose slots now are at least the job's workers, the one
  with the fewest free GPUs (``ClusterState.leaf_free`` / ``spine_free``); ties go to the leaf in the
  spine with fewer free GPUs, then to the lowest index. Best fit keeps emptier groups whole for
  larger gangs.

``topology`` (``mode: hard | soft``, ``max_tier: leaf | spine | cluster``):

* single-worker jobs are placed by ``fw.place_workers`` unchanged (topology does not apply);
* ``soft``: the gang goes to the best group of the smallest tier, from its home tier up to
  ``max_tier``, that has one with room now: best leaf, else best spine, else anywhere in the cluster
  (``max_tier: cluster``, the default); if no tier up to ``max_tier`` has room, it waits. Inside the
  chosen group the policy's Filter and Score plugins place the workers (``fw.place_workers``
  restricted to the group);
* ``hard``: the gang goes only to the best group of its home tier and otherwise waits (unschedulable
  now); a gang whose home tier is ``cluster`` is placed anywhere;
* ``feasible`` (both modes): a gang whose home tier is above ``max_tier`` is rejected on arrival (it
  could never run within one group of ``max_tier``).

``topology-score``: for each candidate node ``n`` of a job with gang size ``G`` GPUs (workers x
GPUs per worker)::

    score(n) = MAX_SCORE x (0.5 [leaf_free(n) >= G] + 0.25 [spine_free(n) >= G]
                            + 0.25 (1 - leaf_free(n) / leaf_gpus(n)))

with ``leaf_free``/``spine_free`` the *committed* free GPUs of the node's leaf/spine (they do not
move while one gang is being placed, so every worker of a gang ranks leaves the same way and the
gang stays in the top leaf while it has a fitting node). ``leaf_free >= G`` counts GPUs only, a
necessary but not sufficient condition for the gang to fit in the leaf (fragments may not hold whole
workers): a soft preference, never a guarantee; use the ``topology`` Place plugin for guarantees.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import MAX_SCORE, BoolArray, FloatArray, IntArray, Place, Placer, Score
from kant.framework.registry import register_plugin
from kant.framework.status import SUCCESS, Status
from kant.model.state import Placement

__all__ = [
    "CLUSTER",
    "LEAF",
    "SPINE",
    "TIERS",
    "HomeTierCache",
    "Topology",
    "TopologyArgs",
    "TopologyScore",
    "best_group",
    "empty_cluster_slots",
    "home_tier",
    "lexicographic_key",
    "node_slots",
    "tier_feasible",
    "tier_groups",
]

NAME = "topology"
SCORE_NAME = "topology-score"

#: tier names, smallest first; a tier is referred to by its index into this tuple
TIERS: tuple[str, ...] = ("leaf", "spine", "cluster")
LEAF, SPINE, CLUSTER = 0, 1, 2
TierName = Literal["leaf", "spine", "cluster"]

_ShapeKey = tuple[int, int, int, int, int]


# --- pure helpers (shared with e-binpack) ----------------------------------------------------------
def lexicographic_key(terms: Sequence[IntArray]) -> IntArray:
    """One int64 per element that orders elements like the tuple ``(terms[0][i], terms[1][i], ...)``.

    All terms must be non-negative integers of equal length. Equal tuples get equal keys, so
    ``np.argmin`` on the key breaks ties by the lowest position. Uses a mixed-radix number when it
    fits in 62 bits, else ranks from ``np.lexsort`` (then ties are broken by position already).
    """
    n = len(terms[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    radices = [int(t.max()) + 1 for t in terms]
    if math.prod(radices) < (1 << 62):
        key = np.zeros(n, dtype=np.int64)
        for t, r in zip(terms, radices, strict=True):
            key = key * r + t
        return key
    order = np.lexsort((np.arange(n), *reversed(terms)))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    return rank


def _shape(env: SchedulerEnv, job: int) -> _ShapeKey:
    jobs = env.jobs
    return (
        int(jobs.workers[job]),
        int(jobs.gpus_per_worker[job]),
        int(jobs.cpu_milli[job]),
        int(jobs.memory_mib[job]),
        int(jobs.gpu_type[job]),
    )


def _cap_slots(
    env: SchedulerEnv, shape: _ShapeKey, gpus: IntArray, cpu: IntArray, mem: IntArray
) -> IntArray:
    w, g, c, m, _ = shape
    slots = np.full(len(gpus), w, dtype=np.int64)
    if g > 0:
        slots = np.minimum(slots, gpus // g)
    if c > 0:
        slots = np.where(env.cpu_unmodelled, slots, np.minimum(slots, cpu // c))
    if m > 0:
        slots = np.where(env.mem_unmodelled, slots, np.minimum(slots, mem // m))
    return slots


def node_slots(ctx: CycleContext, job: int, mask: BoolArray) -> IntArray:
    """Workers of ``job`` each node can hold now (capped at the job's workers); 0 outside ``mask``."""
    state = ctx.state
    slots = _cap_slots(ctx.env, _shape(ctx.env, job), state.free, state.free_cpu, state.free_mem)
    return np.where(mask, slots, 0)


def empty_cluster_slots(env: SchedulerEnv, job: int) -> IntArray:
    """Workers of ``job`` each node could hold on the empty cluster (0 on nodes of another GPU type)."""
    shape = _shape(env, job)
    cluster = env.cluster
    slots = _cap_slots(env, shape, cluster.gpus, cluster.cpu_milli, cluster.memory_mib)
    if shape[4] >= 0:
        slots = np.where(env.nodes_of_type(shape[4]), slots, 0)
    return slots


def home_tier(env: SchedulerEnv, job: int) -> int:
    """The smallest tier (index into :data:`TIERS`) with a group that could hold the whole job on the
    empty cluster; ``CLUSTER`` if no single spine could."""
    cluster = env.cluster
    w = int(env.jobs.workers[job])
    slots = empty_cluster_slots(env, job)
    if int(np.bincount(cluster.leaf, weights=slots, minlength=cluster.n_leaves).max()) >= w:
        return LEAF
    if int(np.bincount(cluster.spine, weights=slots, minlength=cluster.n_spines).max()) >= w:
        return SPINE
    return CLUSTER


def tier_groups(ctx: CycleContext, tier: int) -> tuple[IntArray, IntArray, int]:
    """(group index per node, free GPUs per group, number of groups) of a leaf or spine tier."""
    cluster = ctx.env.cluster
    if tier == LEAF:
        return cluster.leaf, ctx.state.leaf_free, cluster.n_leaves
    if tier == SPINE:
        return cluster.spine, ctx.state.spine_free, cluster.n_spines
    raise ValueError(f"tier {tier} has no groups below the cluster")


def best_group(ctx: CycleContext, tier: int, slots: IntArray, workers: int) -> int:
    """Best-fit group of ``tier`` for a gang (see the module docstring), or -1 if none has room."""
    group_of, group_free, n_groups = tier_groups(ctx, tier)
    room = np.bincount(group_of, weights=slots, minlength=n_groups)
    cand = np.flatnonzero(room >= workers)
    if len(cand) == 0:
        return -1
    if len(cand) == 1:
        return int(cand[0])
    free = np.maximum(group_free[cand], 0)
    if tier == LEAF:
        spine_free = np.maximum(ctx.state.spine_free[ctx.env.cluster.leaf_spine[cand]], 0)
        key = lexicographic_key([free, spine_free])
    else:
        key = free
    return int(cand[int(np.argmin(key))])


class HomeTierCache:
    """Home tier per job shape (workers, GPUs, CPU, memory, GPU type), computed once per run."""

    def __init__(self) -> None:
        self._cache: dict[_ShapeKey, int] = {}
        self._cluster: object = None

    def get(self, env: SchedulerEnv, job: int) -> int:
        if env.cluster is not self._cluster:  # a plugin reused on another cluster starts afresh
            self._cache.clear()
            self._cluster = env.cluster
        key = _shape(env, job)
        tier = self._cache.get(key)
        if tier is None:
            tier = self._cache[key] = home_tier(env, job)
        return tier


def tier_feasible(env: SchedulerEnv, job: int, tier: int, max_tier: int, plugin: str) -> Status:
    """Unresolvable when ``tier`` (the job's home tier) is above ``max_tier``."""
    if tier <= max_tier:
        return SUCCESS
    jobs = env.jobs
    return Status.unresolvable(
        f"needs {jobs.describe_request(job)}; no single {TIERS[max_tier]} could ever hold the gang "
        f"(max_tier: {TIERS[max_tier]})",
        plugin,
    )


# --- the plugins ------------------------------------------------------------------------------------
class TopologyArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    mode: Literal["hard", "soft"] = "soft"
    max_tier: TierName = "cluster"


@register_plugin
class Topology(Place):
    """Topology-aware gang placement; the exact rule is in the module docstring."""

    NAME = NAME
    Args = TopologyArgs

    def __init__(self, args: BaseModel | None = None, weight: float = 1.0) -> None:
        super().__init__(args, weight)
        self._home = HomeTierCache()

    @property
    def _args(self) -> TopologyArgs:
        assert isinstance(self.args, TopologyArgs)
        return self.args

    def feasible(self, env: SchedulerEnv, job: int) -> Status:
        if int(env.jobs.workers[job]) <= 1:
            return SUCCESS
        return tier_feasible(env, job, self._home.get(env, job), TIERS.index(self._args.max_tier), NAME)

    def place(self, ctx: CycleContext, job: int, fw: Placer) -> Placement | Status:
        w = int(ctx.env.jobs.workers[job])
        if w <= 1:
            return fw.place_workers(ctx, job)
        home = self._home.get(ctx.env, job)
        max_tier = TIERS.index(self._args.max_tier)
        tiers = [home] if self._args.mode == "hard" else list(range(home, max_tier + 1))
        if tiers == [CLUSTER]:
            return fw.place_workers(ctx, job)
        slots = node_slots(ctx, job, fw.candidate_mask(ctx, job))
        for tier in tiers:
            if tier == CLUSTER:
                return fw.place_workers(ctx, job)
            group = best_group(ctx, tier, slots, w)
            if group >= 0:
                group_of = tier_groups(ctx, tier)[0]
                return fw.place_workers(ctx, job, restrict=group_of == group)
        return Status.unschedulable(
            f"needs {ctx.env.jobs.describe_request(job)}; {self._args.mode} topology: no "
            f"{' or '.join(TIERS[t] for t in tiers)} has room for the whole gang now "
            f"({int(slots.sum())} worker slot(s) in the cluster)",
            NAME,
        )


@register_plugin
class TopologyScore(Score):
    """Soft topology preference for every worker; the exact formula is in the module docstring."""

    NAME = SCORE_NAME

    def score(self, ctx: CycleContext, job: int, nodes: IntArray) -> FloatArray:
        cluster, state, jobs = ctx.env.cluster, ctx.state, ctx.env.jobs
        gang = int(jobs.workers[job]) * int(jobs.gpus_per_worker[job])
        leaf = cluster.leaf[nodes]
        leaf_free = state.leaf_free[leaf]
        leaf_gpus = np.maximum(cluster.leaf_gpus[leaf], 1)
        spine_free = state.spine_free[cluster.spine[nodes]]
        used = 1.0 - leaf_free / leaf_gpus
        result: FloatArray = MAX_SCORE * (0.5 * (leaf_free >= gang) + 0.25 * (spine_free >= gang) + 0.25 * used)
        return result
