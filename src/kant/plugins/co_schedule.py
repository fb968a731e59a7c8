"""Co-scheduling of training and inference on one cluster (``mode: unified``) or on a fixed split of
it (``mode: separate``), with the same code path for both.

Inference replicas are the job table's ``JobKind.INFERENCE`` rows; the *inference pool* is
``inference_gpus`` GPUs (default: the GPUs of all inference rows, i.e. every service at its
``max_replicas`` when the rows come from a services file). Its nodes are the last nodes of the
cluster (highest index first) until they hold at least that many GPUs.

Rules:

* ``mode: separate`` (two clusters): the **filter** keeps inference replicas on pool nodes and
  training workers off them; **feasible**: a training gang that cannot fit the non-pool nodes, or a
  replica larger than every pool node, can never run.
* ``mode: unified`` (one cluster): training may use any GPU inference does not hold, except what the
  headroom guard keeps free for bursts of inference traffic (so that a burst does not have to preempt
  training). Two guards, both off by default:

  - **admit** (GPU count): a training job of ``r`` GPUs is admitted only if ``free GPUs - r >=
    headroom_gpus + ceil(headroom_fraction x GPUs held by inference now)``;
  - **filter** (whole nodes, for replicas that need a whole node): the ``headroom_nodes``
    highest-numbered *empty* nodes (up, nothing allocated) are removed from a training worker's
    candidates, so training never takes the last ``headroom_nodes`` empty nodes.

  **feasible**: a training job larger than ``total GPUs - headroom_gpus`` can never run.
* Inference replicas are always admitted; their priority over training comes from the job table
  (``priority``, with the ``priority`` queue-sort plugin) and from the ``inference-reclaim`` action,
  which evicts training work when a replica does not fit (it does nothing in separate mode).

For reports the plugin exposes ``pool_gpus`` (GPUs of the pool nodes), ``training_share`` (the rest:
what training owns in the split; in unified mode training GPUs above it are *loaned* from the pool)
and ``inference_in_use`` (GPUs held by inference replicas now).

Arguments:
    mode: ``unified`` or ``separate``.
    inference_gpus: size of the inference pool in GPUs (null = the GPUs of all inference rows; on the
        live service, which has no trace, null is 0 in unified mode and must be given in separate mode).
    headroom_gpus: free GPUs training may never take (unified mode).
    headroom_fraction: extra free GPUs kept per GPU inference holds (unified mode).
    headroom_nodes: empty nodes training may never take (unified mode).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import Admit, BoolArray, CoScheduling, Filter, JobListener
from kant.framework.registry import register_plugin
from kant.framework.status import SUCCESS, Status
from kant.model.job import JobKind
from kant.model.state import Placement

__all__ = ["NAME", "CoSchedule", "CoScheduleArgs"]

NAME = "co-schedule"
_INFERENCE = int(JobKind.INFERENCE)


class CoScheduleArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    mode: Literal["unified", "separate"] = "unified"
    inference_gpus: int | None = Field(default=None, ge=0)
    headroom_gpus: int = Field(default=0, ge=0)
    headroom_fraction: float = Field(default=0.0, ge=0.0, le=10.0, allow_inf_nan=False)
    headroom_nodes: int = Field(default=0, ge=0)


@register_plugin
class CoSchedule(Admit, Filter, JobListener, CoScheduling):
    """Unified or separate co-scheduling of training and inference (see the module docstring)."""

    NAME = NAME
    Args = CoScheduleArgs
    REQUEST_ONLY = False  # the filter treats training and inference rows differently

    def setup(self, env: SchedulerEnv) -> None:
        args = self.args
        assert isinstance(args, CoScheduleArgs)
        jobs, cluster = env.jobs, env.cluster
        self.mode = args.mode
        self._kind: list[int] = jobs.list_of("kind")  # the store's list: it grows with the store
        if args.inference_gpus is not None:
            want = args.inference_gpus
        elif args.mode == "unified" and env.trace is None:
            # live, unified: replicas come and go with their services, and the pool only sizes the reports
            # (pool_gpus, training_share); training may use every GPU no replica holds either way
            want = 0
        else:
            trace = env.require_trace(NAME, "without inference_gpus the pool is sized from the trace's replicas")
            want = int(trace.total_gpus[trace.kind == JobKind.INFERENCE].sum())
        want = min(want, cluster.total_gpus)
        # pool = the last nodes, highest index first, until they hold `want` GPUs
        from_end = np.cumsum(cluster.gpus[::-1])
        n_pool = int(np.searchsorted(from_end, want, side="left")) + 1 if want > 0 else 0
        pool = np.zeros(cluster.n_nodes, dtype=bool)
        if n_pool:
            pool[cluster.n_nodes - min(n_pool, cluster.n_nodes):] = True
        pool.setflags(write=False)
        self.pool = pool
        self.not_pool = ~pool
        self.pool_gpus = int(cluster.gpus[pool].sum())
        self.training_share = int(cluster.total_gpus) - self.pool_gpus
        self.inference_in_use = 0
        self.headroom_rejections = 0
        self.headroom_nodes = args.headroom_nodes
        self.gpu_nodes = cluster.gpus > 0

    def shares_gpus(self) -> bool:
        """Inference may take GPUs back from training (``inference-reclaim``) only in unified mode."""
        return self.mode != "separate"

    def headroom(self) -> int:
        """GPUs the guard keeps free from training right now."""
        args = self.args
        assert isinstance(args, CoScheduleArgs)
        return args.headroom_gpus + math.ceil(args.headroom_fraction * self.inference_in_use - 1e-9)

    # --- admission -------------------------------------------------------------------------------
    def admit(self, ctx: CycleContext, job: int) -> Status:
        if self.mode != "unified" or self._kind[job] == _INFERENCE:
            return SUCCESS
        r = int(ctx.env.jobs.total_gpus[job])
        h = self.headroom()
        if h and ctx.state.free_gpus - r < h:
            self.headroom_rejections += 1
            return Status.unschedulable(f"headroom guard: {ctx.state.free_gpus} GPUs free, the job needs {r} and "
                                        f"{h} must stay free for inference", NAME)
        return SUCCESS

    def feasible(self, env: SchedulerEnv, job: int) -> Status:
        args = self.args
        assert isinstance(args, CoScheduleArgs)
        jobs, cluster = env.jobs, env.cluster
        g = int(jobs.gpus_per_worker[job])
        w = int(jobs.workers[job])
        if self.mode == "unified":
            if self._kind[job] != _INFERENCE and w * g > cluster.total_gpus - args.headroom_gpus:
                return Status.unresolvable(f"needs {w * g} GPUs; the headroom guard leaves training at most "
                                           f"{cluster.total_gpus - args.headroom_gpus}", NAME)
            return SUCCESS
        nodes = self.pool if self._kind[job] == _INFERENCE else self.not_pool
        slots = int((cluster.gpus[nodes] // g).sum()) if g > 0 else w * int(nodes.any())
        if slots < w:
            side = "inference pool" if self._kind[job] == _INFERENCE else "training partition"
            return Status.unresolvable(f"needs {jobs.describe_request(job)}; the {side} "
                                       f"({int(cluster.gpus[nodes].sum())} GPUs) has room for {slots}", NAME)
        return SUCCESS

    def filter(self, ctx: CycleContext, job: int, mask: BoolArray) -> BoolArray:
        if self.mode == "separate":
            return mask & (self.pool if self._kind[job] == _INFERENCE else self.not_pool)
        k = self.headroom_nodes
        if not k or self._kind[job] == _INFERENCE:
            return mask
        state = ctx.state
        empty = np.flatnonzero(state.up & self.gpu_nodes & (state.free == ctx.env.cluster.gpus))
        if not len(empty):
            return mask
        out = mask.copy()
        out[empty[-k:]] = False
        return out

    # --- accounting ------------------------------------------------------------------------------
    def job_started(self, env: SchedulerEnv, job: int, now: float, placement: Placement) -> None:
        if self._kind[job] == _INFERENCE:
            self.inference_in_use += placement.total_gpus

    def job_stopped(self, env: SchedulerEnv, job: int, now: float, placement: Placement, finished: bool) -> None:
        if self._kind[job] == _INFERENCE:
            self.inference_in_use -= placement.total_gpus
