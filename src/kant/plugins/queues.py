"""Hierarchical queues: a tree of queues (organisation -> team -> leaf) with guarantees, borrowing and
lending limits in GPUs; tenants map to leaves. The rule is :mod:`kant.model.queues`; this plugin keeps
the tree's usage, admits jobs against it and tells the ``reclaim`` action which borrowers to evict.

A queues file (``kant simulate --queues FILE``, ``kant serve --queues FILE``) or the plugin's args::

    queues:
      - name: research               # an inner queue (a cohort)
        guaranteed: 256               # GPUs (default: the sum of its children's)
        borrowing_limit: 128          # GPUs above its guarantee it may hold (default: unlimited)
        lending_limit: 64             # GPUs of its unused guarantee others may use (default: all)
        weight: 2                     # its fair share among its siblings (the fair-share plugin)
        children:
          - name: vision
            guaranteed: 128
            tenants: [vc1, vc2]       # a leaf's tenants (default: one tenant named as the leaf)
          - {name: nlp, guaranteed: 128}
    fair_share: {half_life_s: 604800}   # optional: order the queue by fair share (the fair-share plugin)

Every key is validated; a bad one is a one-line error naming the file and key path
(``queues[0].children[1].lending_limit: ...``). When the run starts, the guarantees must nest (a
queue's children add up to at most its guarantee; the top queues to at most the cluster's GPUs).

Admission: a job of ``r`` GPUs of a tenant in leaf ``l`` starts only when every queue on ``l``'s path
stays within its capacity (:meth:`kant.model.queues.QueueTree.blocking`); the reason names the queue
(``queue vision at its max of 192 GPUs (guarantee 128 + borrowing limit 64; holds 192, the job needs
8)``). A tenant in no leaf, or a job larger than its leaf can ever hold, is unschedulable on arrival
(held instead with ``hold_over_max``, as the live service does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, model_validator

from kant.config.policy import ActionEntry, PluginEntry, Policy
from kant.config.validation import KeyPathError, validate_document
from kant.config.yaml_file import read_yaml
from kant.errors import ConfigError
from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import Admit, BoolArray, JobListener, QueueGuarantee, QueueSort
from kant.framework.registry import action_class, plugin_class, register_plugin
from kant.framework.status import SUCCESS, Status
from kant.model.queues import ROOT, QueueDef, QueueTree
from kant.model.state import Placement
from kant.model.store import grow

__all__ = ["NAME", "FairShareSpec", "QueueSpec", "Queues", "QueuesArgs", "load_queues", "with_queues"]

NAME = "queues"

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class QueueSpec(BaseModel):
    """One queue of the tree (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, max_length=64)
    guaranteed: int | None = Field(default=None, ge=0)
    borrowing_limit: int | None = Field(default=None, ge=0)
    lending_limit: int | None = Field(default=None, ge=0)
    weight: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    tenants: list[str] | None = None
    children: list[QueueSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> QueueSpec:
        if self.children and self.tenants is not None:
            raise ValueError(f"queue {self.name} has children: only a leaf queue has tenants")
        if self.lending_limit is not None and self.guaranteed is not None and self.lending_limit > self.guaranteed:
            raise ValueError(
                f"queue {self.name}: lending_limit ({self.lending_limit}) is above its guarantee ({self.guaranteed})"
            )
        return self

    def to_def(self) -> QueueDef:
        return QueueDef(
            self.name,
            self.guaranteed,
            self.borrowing_limit,
            self.lending_limit,
            self.weight,
            None if self.tenants is None else tuple(self.tenants),
            tuple(c.to_def() for c in self.children),
        )


class FairShareSpec(BaseModel):
    """Order the queue by fair share over time (the ``fair-share`` plugin's arguments)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    half_life_s: float = Field(default=7 * 86400.0, gt=0.0, allow_inf_nan=False)


class QueuesArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    queues: list[QueueSpec] = Field(min_length=1)
    fair_share: FairShareSpec | None = None
    #: a job that can never start under the queues (its tenant is in no leaf, or it is larger than its
    #: leaf may ever hold) waits with the reason instead of being unschedulable (the live service)
    hold_over_max: bool = False

    @model_validator(mode="after")
    def _unique(self) -> QueuesArgs:
        seen: set[str] = set()
        tenants: dict[str, str] = {}

        def walk(specs: Sequence[QueueSpec], path: str) -> None:
            for i, q in enumerate(specs):
                where = f"{path}[{i}]"
                if q.name in seen:
                    raise KeyPathError(f"{where}.name", f"queue name {q.name!r} is used twice")
                seen.add(q.name)
                if not q.children:
                    for t in q.tenants if q.tenants is not None else [q.name]:
                        if t in tenants:
                            raise KeyPathError(
                                f"{where}.tenants", f"tenant {t!r} is in two leaves: {tenants[t]} and {q.name}"
                            )
                        tenants[t] = q.name
                walk(q.children, f"{where}.children")

        walk(self.queues, "queues")
        return self

    def defs(self) -> tuple[QueueDef, ...]:
        return tuple(q.to_def() for q in self.queues)


def load_queues(path: str | Path) -> QueuesArgs:
    """Read and validate a queues file (one-line errors naming the file and key path or line)."""
    return validate_document(QueuesArgs, read_yaml(path), str(path), "a queues file must be a mapping with 'queues'")


def with_queues(policy: Policy, args: QueuesArgs) -> Policy:
    """``policy`` with the queues in force, in Kueue's order of things: the ``queues`` plugin first
    (its queue order puts jobs within their queue's guarantee before jobs that would borrow), then,
    with ``fair_share``, the ``fair-share`` order, then the policy's own plugins (a ``queues`` or
    ``fair-share`` entry it has is replaced); ``reclaim`` right after its first ``allocate``
    (``allocate_after`` only when that allocate does not block). Raises :class:`ConfigError` if the policy has the flat
    ``quota`` plugin (one quota model at a time)."""
    if any(p.cls.NAME == "quota" for p in policy.plugins):
        raise ConfigError(
            policy.source or policy.name,
            "plugins",
            "the policy has the quota plugin; queues replace it (use a policy without it)",
        )
    plugins = [PluginEntry(Queues, args, 1.0)]
    if args.fair_share is not None:
        fs = plugin_class("fair-share")
        assert fs is not None
        plugins.append(PluginEntry(fs, args, 1.0))
    plugins += [p for p in policy.plugins if p.cls.NAME not in (NAME, "fair-share")]
    actions = list(policy.actions)
    names = [a.cls.NAME for a in actions]
    if "reclaim" not in names and "allocate" in names:
        first = names.index("allocate")
        blocking = bool(getattr(actions[first].args, "blocking", False))
        reclaim = action_class("reclaim")
        assert reclaim is not None
        actions.insert(first + 1, ActionEntry(reclaim, reclaim.Args.model_validate({"allocate_after": not blocking})))
    return replace(policy, plugins=tuple(plugins), actions=tuple(actions))


@register_plugin
class Queues(QueueSort, Admit, JobListener, QueueGuarantee):
    """Admission against a tree of queues, what reclaim needs, and Kueue's first order: jobs whose
    leaf stays within its guarantee before jobs that would borrow (see the module docstring)."""

    NAME = NAME
    Args = QueuesArgs
    REQUEST_ONLY = False
    DYNAMIC = True

    def setup(self, env: SchedulerEnv) -> None:
        args = self.args
        assert isinstance(args, QueuesArgs)
        self.env = env
        try:
            self.tree = QueueTree(args.defs(), float(env.cluster.total_gpus))
        except ValueError as exc:
            raise ConfigError(f"{NAME} plugin", "queues", str(exc)) from None
        self.hold = args.hold_over_max
        #: per tenant code, its leaf (-1: none)
        self.leaf = np.full(0, -1, dtype=np.int64)
        self._map_tenants(env)
        n = len(self.tree)
        #: the most each queue may ever take: its capacity with nothing running (its limits, its
        #: parents', and what the other queues keep reserved)
        self.max_of = np.asarray([self.tree.capacity(q) for q in range(n)])
        self.job_leaf = np.full(len(env.jobs), -1, dtype=np.int64)
        self.start = np.zeros(len(env.jobs), dtype=np.float64)
        self.version = 0
        self._slack = np.zeros(0, dtype=np.float64)
        self._slack_at = -1
        # counters
        self.reclaim_evictions = np.zeros(n, dtype=np.int64)  # jobs of each leaf evicted by reclaim
        self.reclaims_for = np.zeros(n, dtype=np.int64)
        self.admit_rejections = 0
        self.peak_violations = 0  # (for tests: violations seen by check())

    def _map_tenants(self, env: SchedulerEnv) -> None:
        names = env.jobs.tenant_names
        old = len(self.leaf)
        extra = [self.tree.leaf_of.get(name, -1) for name in names[old:]]
        self.leaf = np.concatenate((self.leaf, np.asarray(extra, dtype=np.int64)))

    def jobs_added(self, env: SchedulerEnv, start: int) -> None:
        self.job_leaf = grow(self.job_leaf, len(env.jobs), -1)
        self.start = grow(self.start, len(env.jobs))
        if len(env.jobs.tenant_names) > len(self.leaf):
            self._map_tenants(env)
            self._slack_at = -1

    # --- queue order ---------------------------------------------------------------------------
    def key(self, env: SchedulerEnv, job: int, now: float) -> float:
        return float(self.keys(env, np.asarray([job], dtype=np.int64), now)[0])

    def keys(self, env: SchedulerEnv, jobs: IntArray, now: float) -> FloatArray:
        """0 for a job its leaf's guarantee covers (with the leaf's use now), 1 for one that would borrow
        (or whose tenant is in no leaf)."""
        out: FloatArray = (~self.entitled(env.jobs.tenant[jobs], env.jobs.total_gpus[jobs])).astype(np.float64)
        return out

    # --- admission ----------------------------------------------------------------------------
    def admit(self, ctx: CycleContext, job: int) -> Status:
        jobs = self.env.jobs
        t = int(jobs.tenant[job])
        leaf = int(self.leaf[t])
        if leaf < 0:
            self.admit_rejections += 1
            return Status.unschedulable(f"tenant {jobs.tenant_names[t]} is in no queue", NAME)
        r = float(jobs.total_gpus[job])
        hit = self.tree.blocking(leaf, r)
        if hit is None:
            return SUCCESS
        self.admit_rejections += 1
        return Status.unschedulable(self.tree.explain(leaf, r, *hit), NAME)

    def feasible(self, env: SchedulerEnv, job: int) -> Status:
        if self.hold:
            return SUCCESS
        jobs = env.jobs
        t = int(jobs.tenant[job])
        leaf = int(self.leaf[t])
        if leaf < 0:
            return Status.unresolvable(f"tenant {jobs.tenant_names[t]} is in no queue of the queues file", NAME)
        r = float(jobs.total_gpus[job])
        if r > self.max_of[leaf]:
            return Status.unresolvable(
                f"needs {r:g} GPUs; queue {self.tree.names[leaf]} may take at most {self.max_of[leaf]:g} "
                "(its limits, its parents' and what other queues keep reserved)",
                NAME,
            )
        return SUCCESS

    # --- usage ---------------------------------------------------------------------------------
    def job_started(self, env: SchedulerEnv, job: int, now: float, placement: Placement) -> None:
        leaf = int(self.leaf[int(env.jobs.tenant[job])])
        if leaf < 0:  # (admitted by no rule of ours: a restored snapshot of another policy)
            return
        self.job_leaf[job] = leaf
        self.start[job] = now
        self.tree.add(leaf, float(placement.total_gpus))
        self.version += 1

    def job_stopped(self, env: SchedulerEnv, job: int, now: float, placement: Placement, finished: bool) -> None:
        leaf = int(self.job_leaf[job])
        if leaf < 0:
            return
        self.job_leaf[job] = -1
        self.tree.add(leaf, -float(placement.total_gpus))
        self.version += 1

    # --- reclaim (QueueGuarantee) -------------------------------------------------------------
    def any_borrowing(self) -> bool:
        return self.tree.any_borrowing()

    def entitled(self, tenants: IntArray, gpus: IntArray) -> BoolArray:
        if self._slack_at != self.version:  # per tenant code: GPUs its leaf has left within its guarantee
            tree = self.tree
            slack = np.append(tree.guaranteed - tree.usage + 1e-9, -np.inf)  # (index -1: in no leaf)
            self._slack = slack[self.leaf]
            self._slack_at = self.version
        out: BoolArray = gpus <= self._slack[tenants]
        return out

    def reclaim_order(self, env: SchedulerEnv, job: int, running: IntArray, start: FloatArray) -> IntArray:
        leaf = int(self.leaf[int(env.jobs.tenant[job])])
        leaves = self.job_leaf[running]
        mapped = leaves >= 0
        idx = np.flatnonzero(mapped)
        if len(idx) == 0 or leaf < 0:
            return np.zeros(0, dtype=np.int64)
        sub = self.tree.reclaim_order(
            leaf, leaves[idx], env.jobs.priority[running[idx]].astype(np.float64), start[idx], running[idx]
        )
        out: IntArray = idx[sub]
        return out

    def admits_without(self, env: SchedulerEnv, job: int, victims: Sequence[int]) -> bool:
        jobs = env.jobs
        leaf = int(self.leaf[int(jobs.tenant[job])])
        if leaf < 0:
            return False
        gone: dict[int, float] = {}
        job_leaf, gpus = self.job_leaf, jobs.total_gpus
        for v in victims:
            m = int(job_leaf[v])
            if m >= 0:
                gone[m] = gone.get(m, 0.0) + float(gpus[v])
        return self.tree.blocking_without(leaf, float(gpus[job]), gone) is None

    def reclaimed(self, job: int, victims: Sequence[int]) -> None:
        for v in victims:
            if self.job_leaf[v] >= 0:
                self.reclaim_evictions[int(self.job_leaf[v])] += 1
        leaf = int(self.leaf[int(self.env.jobs.tenant[job])])
        if leaf >= 0:
            self.reclaims_for[leaf] += 1

    # --- reports -------------------------------------------------------------------------------
    def report(self) -> dict[str, dict[str, Any]]:
        """Per queue: parent, the tenants it holds (leaves), guarantee, limits, GPUs held and borrowed
        now, capacity now, reclaim evictions suffered and reclaims made (leaves)."""
        tree = self.tree
        out: dict[str, dict[str, Any]] = {}
        borrowed = tree.borrowing()
        tenants: dict[int, list[str]] = {}
        for tenant, leaf in sorted(tree.leaf_of.items()):
            tenants.setdefault(leaf, []).append(tenant)
        for q in range(1, len(tree)):
            p = int(tree.parent[q])
            out[tree.names[q]] = {
                "parent": None if p == ROOT else tree.names[p],
                "tenants": tenants.get(q, []),
                "leaf": bool(tree.is_leaf[q]),
                "guaranteed": float(tree.guaranteed[q]),
                "borrowing_limit": _finite(tree.borrowing_limit[q]),
                "lending_limit": _finite(tree.lending_limit[q]),
                "weight": float(tree.weight[q]),
                "in_use": float(tree.usage[q]),
                "takes": float(tree.takes[q]),
                "borrowed": float(borrowed[q]),
                "capacity": float(tree.capacity(q)),
                "reclaim_evictions": int(self.reclaim_evictions[q]),
                "reclaims_for": int(self.reclaims_for[q]),
            }
        return out


def _finite(x: float) -> float | None:
    return None if math.isinf(x) else float(x)
