"""Reclaim: give a tenant its guaranteed GPUs back by evicting other tenants' borrowed jobs.

Needs the ``quota`` plugin in the policy (it keeps usage, guarantees and per-job borrowed GPUs).

Rule. The action walks the pending queue in the policy's order. A pending job ``p`` of tenant ``t``
may reclaim when ``t`` is under its guarantee with ``p`` included (``U_t + r_p <= G_t``, GPU total) and
``p`` passes admission. The *candidates* are jobs of other tenants that were running when the cycle
began and have borrowed GPUs recorded (``quota.job_borrowed > 0``: the part of a tenant's use above
its guarantee; see :mod:`kant.plugins.quota`). Victims are chosen among them with
:func:`kant.actions.victims.choose_victims`: lowest ``JobTable.priority`` first, then the fewest
victims, then the least work lost (GPU-seconds since the last checkpoint, see ``checkpoint_interval_s``),
then lower job rows; if no subset of candidates makes ``p`` fit, nothing is evicted. The plan is
simulated on a private statement first; then the victims are evicted with
:func:`kant.actions.common.evict_job` (back to the queue; checkpoint/restart model applies) and
``p`` starts. This is Kueue's ``reclaimWithinCohort`` and Volcano's ``reclaim`` action.

With a tree of queues (a :class:`~kant.framework.plugin.QueueGuarantee`: the ``queues`` plugin) the
rule is the tree's: a pending job may reclaim when its leaf queue stays within its guarantee with it;
the victims are the running jobs the tree names (jobs of borrowing queues whose borrowing comes from
the job's side of the tree), tried in Kueue's order (nearest cohort first, lowest priority, most
recently started), evicted in that order until the job both fits and is admitted by the queues with
them gone, then every victim not needed is given back, last evicted first
(:func:`kant.actions.victims.victims_in_order`). Failures are remembered while no capacity came back
and no queue's usage changed.

Evictions are counted on the quota plugin (``reclaim_evictions`` per victim tenant, ``reclaims_for``
per reclaiming tenant) and on this action (``evictions``).

Arguments:
    checkpoint_interval_s: used to estimate work lost (set it to the simulator's execution model).
    max_reclaims_per_cycle: stop after starting this many jobs by reclaiming in one cycle.
    allocate_after: after a cycle's reclaims, run one allocate pass (the ``allocate`` action's rule)
        so that capacity the victims left over, and the victims themselves, can start at once.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kant.actions.evicting import EvictingAction, Skip, Walk, in_queue_order
from kant.actions.pool import BoolArray, Candidates, IntArray, placement_entries
from kant.actions.victims import victims_in_order
from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import Guarantee, Plugin, QueueGuarantee
from kant.framework.registry import register_action
from kant.framework.runner import Framework
from kant.model.fit import gpu_slots
from kant.model.state import Placement
from kant.model.store import JobStore

__all__ = ["NAME", "Reclaim", "ReclaimArgs"]

NAME = "reclaim"


class ReclaimArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    checkpoint_interval_s: float | None = Field(default=None, gt=0.0)
    max_reclaims_per_cycle: int | None = Field(default=None, ge=1)
    allocate_after: bool = True


@dataclass(eq=False)
class _ReclaimWalk(Walk):
    guarantee: Guarantee | None = None
    v_tenant: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    v_gpus: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    max_node: int = 0  # GPUs of the largest node once every pool job on it is gone
    stamp: tuple[int, int, int] = (-1, -1, 0)


@register_action
class Reclaim(EvictingAction[_ReclaimWalk]):
    NAME = NAME
    Args = ReclaimArgs

    @classmethod
    def check_plugins(cls, args: BaseModel, plugins: Sequence[type[Plugin]]) -> tuple[str, str] | None:
        if any(issubclass(p, (Guarantee, QueueGuarantee)) for p in plugins):
            return None
        return "", "the reclaim action needs a Guarantee plugin in the policy (one of: quota, queues)"

    def __init__(self, args: BaseModel | None = None) -> None:
        super().__init__(args)
        a = self.args
        assert isinstance(a, ReclaimArgs)
        self.limit = a.max_reclaims_per_cycle
        self.allocate_after = a.allocate_after
        self._guarantee: Guarantee | None = None
        self._tree: QueueGuarantee | None = None
        # shapes that could not reclaim; valid while no capacity came back and no borrowing changed
        self._failed: set[Hashable] = set()
        self._failed_at: tuple[int, int, int] = (-1, -1, 0)
        self._entries: tuple[int, tuple[IntArray, IntArray, IntArray]] | None = None
        self._shape_tenant: IntArray | None = None
        self._shape_gpus: IntArray = np.zeros(0, dtype=np.int64)
        self._shape_gpw: IntArray = np.zeros(0, dtype=np.int64)
        self._shape_type: IntArray = np.zeros(0, dtype=np.int64)
        self.evictions = 0
        self.reclaims = 0

    def attach(self, fw: Framework) -> None:
        self._tree = fw.plugin(QueueGuarantee)
        if self._tree is not None:
            return
        self._guarantee = fw.plugin(Guarantee)
        if self._guarantee is None:
            raise ValueError("the reclaim action needs a Guarantee plugin (quota) in the policy")

    def jobs_added(self, env: SchedulerEnv, start: int) -> None:
        self._shape_tenant = None  # new jobs may bring new shapes

    def begin(self, ctx: CycleContext, fw: Framework) -> _ReclaimWalk | None:
        args = self.args
        assert isinstance(args, ReclaimArgs)
        if self._tree is None and self._guarantee is None:
            self.attach(fw)
        if self._tree is not None:
            return self._tree_begin(ctx, fw, self._tree, args)
        quota = self._guarantee
        assert quota is not None
        if not ctx.running or not len(ctx.queue) or not np.any(quota.borrowed[:, 0] > 0):
            return None
        jobs = ctx.env.jobs
        # the only possible victims: jobs borrowing GPUs (total) running since before the cycle
        pool = quota.borrowing_total()
        if len(pool) == 0:
            return None
        if ctx.started:  # started in this cycle: not victims
            started = {j for j, _ in ctx.started}
            keep = [j for j in pool.tolist() if j not in started]
            if len(keep) < len(pool):
                pool = np.asarray(keep, dtype=np.int64)
            if len(pool) == 0:
                return None
        # failures stay valid while no capacity came back, no borrowing changed and the candidate
        # pool is the same
        state = ctx.state
        stamp = (int(getattr(state, "release_count", -1)), quota.borrow_version, hash(pool.tobytes()))
        if stamp != self._failed_at or stamp[0] < 0:
            self._failed = set()
        failed = self._failed
        # pending shapes whose tenant is under its guarantee with the job included (tenant and
        # request are the same for every job of a shape), skipping shapes known to fail
        queue = ctx.queue
        if self._shape_tenant is None:
            self._shape_tenant, self._shape_gpus, self._shape_gpw, self._shape_type = _per_shape(queue.shapes, jobs)
        shape_ids = np.asarray(queue.pending_shapes(), dtype=np.int64)
        t = self._shape_tenant[shape_ids]
        within = quota.usage[t, 0] + self._shape_gpus[shape_ids] <= quota.guaranteed[t, 0]
        if failed and within.any():
            known = np.zeros(len(self._shape_tenant), dtype=bool)
            known[np.fromiter(failed, dtype=np.int64, count=len(failed))] = True
            within &= ~known[shape_ids]
        if within.any():
            if self._entries is None or self._entries[0] != stamp[2]:  # placements of the pool
                self._entries = (stamp[2], placement_entries(ctx, pool))
            e_idx, e_node, e_cnt = self._entries[1]
            # cheap bounds per shape: GPUs freed by evicting every other tenant's borrowing job, and
            # the largest node once every pool job on it is gone
            pool_gpus = jobs.total_gpus[pool]
            by_tenant = np.bincount(jobs.tenant[pool], weights=pool_gpus, minlength=quota.usage.shape[0])
            room = state.free_gpus + float(pool_gpus.sum()) - by_tenant[t]
            node_bound = state.free + np.bincount(e_node, weights=e_cnt * jobs.gpus_per_worker[pool[e_idx]],
                                                  minlength=len(state.free))
            fits = (self._shape_gpus[shape_ids] <= room) & (self._shape_gpw[shape_ids] <= node_bound.max())
            failed.update(shape_ids[within & ~fits].tolist())
            within &= fits
        if not within.any():
            self._failed_at = stamp
            return None
        lists = [queue.shape_jobs(s) for s in shape_ids[within].tolist()]
        pending = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=sum(map(len, lists)))
        assert self._entries is not None
        entries = self._entries[1]
        e_idx, e_node, e_cnt = entries
        # per node, GPUs free once every pool job there is gone: an upper bound for one worker
        node_bound = state.free + np.bincount(e_node, weights=e_cnt * jobs.gpus_per_worker[pool[e_idx]],
                                              minlength=len(state.free)).astype(np.int64)
        order = in_queue_order(ctx, fw, pending)
        keys = queue.shapes[np.asarray(order, dtype=np.int64)].tolist()
        walk = _ReclaimWalk(order, keys, pool, jobs.priority[pool].astype(np.float64), failed,
                            args.checkpoint_interval_s, entries)
        walk.guarantee = quota
        walk.v_tenant = jobs.tenant[pool]
        walk.v_gpus = jobs.total_gpus[pool]
        walk.max_node = int(node_bound.max()) if len(node_bound) else 0
        walk.stamp = stamp
        return walk

    def _tree_begin(self, ctx: CycleContext, fw: Framework, tree: QueueGuarantee,
                    args: ReclaimArgs) -> _ReclaimWalk | None:
        """The walk with a tree of queues: pending jobs within their leaf's guarantee, in queue order
        (one per shape that is not known to fail), and every job running since before the cycle."""
        if not ctx.running or not len(ctx.queue) or not tree.any_borrowing():
            return None
        stamp = (int(getattr(ctx.state, "release_count", -1)), tree.version, 0)
        if stamp != self._failed_at or stamp[0] < 0:
            self._failed = set()
        failed = self._failed
        queue = ctx.queue
        jobs = ctx.env.jobs
        if self._shape_tenant is None:
            self._shape_tenant, self._shape_gpus, self._shape_gpw, self._shape_type = _per_shape(queue.shapes, jobs)
        shape_ids = np.asarray(queue.pending_shapes(), dtype=np.int64)
        # pending shapes within their leaf's guarantee (tenant and request are the same for every job
        # of a shape), skipping shapes known to fail
        keep = tree.entitled(self._shape_tenant[shape_ids], self._shape_gpus[shape_ids], self._shape_type[shape_ids])
        if failed and keep.any():
            keep &= np.fromiter((s not in failed for s in shape_ids.tolist()), dtype=bool, count=len(shape_ids))
        if not keep.any():
            self._failed_at = stamp
            return None
        lists = [queue.shape_jobs(s) for s in shape_ids[keep].tolist()]
        pending = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=sum(map(len, lists)))
        started = {j for j, _ in ctx.started}
        pool = np.asarray(sorted(j for j in ctx.running if j not in started), dtype=np.int64)
        if len(pool) == 0:
            return None
        order = in_queue_order(ctx, fw, pending)
        keys = queue.shapes[np.asarray(order, dtype=np.int64)].tolist()
        walk = _ReclaimWalk(order, keys, pool, ctx.env.jobs.priority[pool].astype(np.float64), failed,
                            args.checkpoint_interval_s)
        walk.stamp = stamp
        return walk

    def plan(self, ctx: CycleContext, fw: Framework, walk: _ReclaimWalk, job: int,
             cands: Candidates) -> tuple[list[int], Placement] | None:
        tree = self._tree
        if tree is None:
            return super().plan(ctx, fw, walk, job, cands)
        running = ctx.running
        start = np.fromiter((running[int(j)].start for j in cands.jobs), dtype=np.float64, count=len(cands))
        order = tree.reclaim_order(ctx.env, job, cands.jobs, start)
        if len(order) == 0:
            return None
        env = ctx.env
        return victims_in_order(ctx, fw, job, cands.jobs[order].tolist(),
                                lambda victims: tree.admits_without(env, job, victims))

    def victim_pool(self, ctx: CycleContext, fw: Framework, walk: _ReclaimWalk, job: int) -> BoolArray | Skip:
        if self._tree is not None:
            if not self._tree.any_borrowing():
                return Skip.FAILED
            return walk.alive
        quota = walk.guarantee
        assert quota is not None
        if not quota.within_guarantee(job):
            return Skip.FAILED
        jobs, running = ctx.env.jobs, walk.running
        # recorded borrowing can shrink during the cycle (re-labelled when a tenant's jobs stop)
        sel: BoolArray = walk.alive & (walk.v_tenant != int(jobs.tenant[job])) & (quota.job_borrowed[running, 0] > 0)
        # cheap bounds before planning: the GPUs all candidates free, and the largest node
        if (not sel.any() or ctx.state.free_gpus + int(walk.v_gpus[sel].sum()) < int(jobs.total_gpus[job])
                or gpu_slots(walk.max_node, int(jobs.gpus_per_worker[job]), int(jobs.gpu_milli[job])) < 1
                or not fw.admit(ctx, job).ok):
            return Skip.FAILED
        return sel

    def planned(self, ctx: CycleContext, walk: _ReclaimWalk, job: int, victims: list[int]) -> None:
        if self._tree is not None:
            self._tree.reclaimed(job, victims)
            self.evictions += len(victims)
            self.reclaims += 1
            return
        assert walk.guarantee is not None
        walk.guarantee.reclaimed(job, victims)
        self.evictions += len(victims)
        self.reclaims += 1

    def exhausted(self, walk: _ReclaimWalk) -> bool:
        if self._tree is not None:
            return not self._tree.any_borrowing()
        assert walk.guarantee is not None
        return not np.any(walk.alive & (walk.guarantee.job_borrowed[walk.running, 0] > 0))

    def end(self, ctx: CycleContext, walk: _ReclaimWalk) -> None:
        if self._tree is not None:
            self._failed_at = (int(getattr(ctx.state, "release_count", -1)), self._tree.version, 0)
            return
        assert walk.guarantee is not None
        self._failed_at = (int(getattr(ctx.state, "release_count", -1)), walk.guarantee.borrow_version,
                           walk.stamp[2])


def _per_shape(shapes: IntArray, jobs: JobStore) -> tuple[IntArray, IntArray, IntArray, IntArray]:
    """Tenant, total GPUs, GPUs per worker and GPU type of each shape id (the same for every job of a
    shape)."""
    n = int(shapes.max()) + 1 if len(shapes) else 0
    s_tenant = np.zeros(n, dtype=np.int64)
    s_gpus = np.zeros(n, dtype=np.int64)
    s_gpw = np.zeros(n, dtype=np.int64)
    s_tenant[shapes] = jobs.tenant
    s_gpus[shapes] = jobs.total_gpus
    s_gpw[shapes] = jobs.gpus_per_worker
    s_type = np.zeros(n, dtype=np.int64)
    s_type[shapes] = jobs.gpu_type
    return s_tenant, s_gpus, s_gpw, s_type
