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
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from kant.config.policy import ActionEntry, PluginEntry, Policy
from kant.config.validation import KeyPathError, validate_document
from kant.config.yaml_file import read_yaml
from kant.errors import ConfigError
from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import Admit, BoolArray, Filter, JobListener, QueueGuarantee, QueueSort
from kant.framework.registry import action_class, plugin_class, register_plugin
from kant.framework.status import SUCCESS, Status
from kant.model.queues import ROOT, QueueDef, QueueTree, kueue_order
from kant.model.state import Placement
from kant.model.store import grow

__all__ = ["NAME", "TYPED_NAME", "FairShareSpec", "QueueSpec", "Queues", "QueuesArgs", "TypedQueues", "load_queues",
           "with_queues"]

NAME = "queues"
#: the queues plugin with per-GPU-type limits (a Filter too: jobs that may use several types)
TYPED_NAME = "queues-by-type"

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


#: GPUs: a whole number (any GPU type) or a mapping of GPU type name to a whole number
Amount = int | dict[str, int]
_AMOUNTS = ("guaranteed", "borrowing_limit", "lending_limit")


def _check_amount(queue: object, key: str, value: object) -> None:
    """A guarantee or limit: a whole number of GPUs >= 0, or ``{GPU type: whole number >= 0}``."""

    def whole(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    if value is None or whole(value):
        return
    if isinstance(value, dict):
        if not value:
            raise ValueError(f"queue {queue}: {key}: an empty mapping (give GPU types, or a number for any type)")
        for t, v in value.items():
            if not isinstance(t, str) or not t:
                raise ValueError(f"queue {queue}: {key}: a GPU type must be a name, got {t!r}")
            if not whole(v):
                raise ValueError(f"queue {queue}: {key}.{t}: must be a whole number of GPUs >= 0, got {v!r}")
        return
    raise ValueError(f"queue {queue}: {key}: must be a whole number of GPUs >= 0 or a mapping of GPU type to "
                     f"GPUs, got {value!r}")


class QueueSpec(BaseModel):
    """One queue of the tree (see the module docstring). ``guaranteed``, ``borrowing_limit`` and
    ``lending_limit`` are GPUs of any type (a number) or per GPU type (``{V100: 16, A100: 8}``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, max_length=64)
    guaranteed: Amount | None = None
    borrowing_limit: Amount | None = None
    lending_limit: Amount | None = None
    weight: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    tenants: list[str] | None = None
    children: list[QueueSpec] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _amounts(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in _AMOUNTS:
                _check_amount(data.get("name", "?"), key, data.get(key))
        return data

    @model_validator(mode="after")
    def _consistent(self) -> QueueSpec:
        if self.children and self.tenants is not None:
            raise ValueError(f"queue {self.name} has children: only a leaf queue has tenants")
        g, lend = self.guaranteed, self.lending_limit
        if isinstance(lend, int) and isinstance(g, int) and lend > g:
            raise ValueError(f"queue {self.name}: lending_limit ({lend}) is above its guarantee ({g})")
        if isinstance(lend, dict) and isinstance(g, dict):
            for t, v in lend.items():
                if t in g and v > g[t]:
                    raise ValueError(f"queue {self.name}: lending_limit.{t} ({v}) is above its guarantee ({g[t]})")
        return self

    def type_names(self) -> set[str]:
        """The GPU types this queue and those below it name."""
        out = {t for key in _AMOUNTS if isinstance(v := getattr(self, key), dict) for t in v}
        for c in self.children:
            out |= c.type_names()
        return out

    def to_def(self) -> QueueDef:
        children = tuple(c.to_def() for c in self.children)
        g, b, lend = self.guaranteed, self.borrowing_limit, self.lending_limit
        types = sorted({t for v in (g, b, lend) if isinstance(v, dict) for t in v})
        per_type = tuple(
            (t, *(v.get(t) if isinstance(v, dict) else None for v in (g, b, lend))) for t in types
        )
        if isinstance(g, dict):  # the GPU total: the types' sum (at least the children's total)
            g = max(sum(g.values()), sum(c.total_guarantee() for c in children))
        return QueueDef(
            self.name,
            g,
            b if isinstance(b, int) else None,
            lend if isinstance(lend, int) else None,
            self.weight,
            None if self.tenants is None else tuple(self.tenants),
            children,
            per_type,  # type: ignore[arg-type]
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
    #: the file it was read from (for errors found when the run starts)
    _source: str = PrivateAttr(default="")

    @property
    def source(self) -> str:
        return self._source or "queues"

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

    def type_names(self) -> list[str]:
        """The GPU types some queue gives a guarantee or limit for, sorted."""
        return sorted(set().union(*(q.type_names() for q in self.queues)))


def load_queues(path: str | Path) -> QueuesArgs:
    """Read and validate a queues file (one-line errors naming the file and key path or line)."""
    args = validate_document(QueuesArgs, read_yaml(path), str(path), "a queues file must be a mapping with 'queues'")
    args._source = str(path)
    return args


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
    plugins = [PluginEntry(TypedQueues if args.type_names() else Queues, args, 1.0)]
    if args.fair_share is not None:
        fs = plugin_class("fair-share")
        assert fs is not None
        plugins.append(PluginEntry(fs, args, 1.0))
    plugins += [p for p in policy.plugins if p.cls.NAME not in (NAME, TYPED_NAME, "fair-share")]
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
    SHAPE_KEYED = True  # (a job's key is its tenant's leaf's, and its GPUs and type: all in its shape)

    def setup(self, env: SchedulerEnv) -> None:
        args = self.args
        assert isinstance(args, QueuesArgs)
        self.env = env
        try:
            self.tree = QueueTree(args.defs(), float(env.cluster.total_gpus))
        except ValueError as exc:
            raise ConfigError(args.source, "queues", str(exc)) from None
        self._setup_types(env, args)
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

    def _setup_types(self, env: SchedulerEnv, args: QueuesArgs) -> None:
        """One tree per GPU type the file names (cluster type code -> tree), their most-ever capacities,
        and per running job its GPUs of those types."""
        cluster = env.cluster
        #: cluster GPU type code -> the tree of that type
        self.types: dict[int, QueueTree] = {}
        names = args.type_names()
        if names and not isinstance(self, Filter):
            raise ConfigError(args.source, "queues", f"per-GPU-type limits need the {TYPED_NAME} plugin "
                              "(kant simulate/serve --queues puts it in)")
        defs = args.defs()
        for tname in names:
            code = cluster.gpu_type_code(tname)
            if code < 0:
                raise ConfigError(args.source, f"queue {_naming(args.queues, tname)}",
                                  f"no GPU type {tname} in the cluster (types: {', '.join(cluster.gpu_type_names)})")
            cap = float(cluster.gpus[cluster.gpu_type == code].sum())
            try:
                self.types[code] = QueueTree([d.for_type(tname) for d in defs], cap, unit=tname)
            except ValueError as exc:
                raise ConfigError(args.source, "queues", str(exc)) from None
        self.type_max = {k: np.asarray([t.capacity(q) for q in range(len(t))]) for k, t in self.types.items()}
        #: per running job, its GPUs of each type that has a tree
        self.job_types: dict[int, list[tuple[int, float]]] = {}
        self._job_type_cache: dict[int, list[int]] = {}
        self._type_slack: dict[int, FloatArray] = {}

    def _job_types(self, job: int) -> list[int]:
        """The cluster GPU types ``job`` may use."""
        code = int(self.env.jobs.gpu_type[job])
        got = self._job_type_cache.get(code)
        if got is None:
            got = self._job_type_cache[code] = (list(range(len(self.env.cluster.gpu_type_names))) if code < 0
                                               else self.env.cluster_types_of(code))
        return got

    def _only_type(self, job: int) -> int:
        """The one GPU type with a tree that ``job`` uses, or -1 (several types, or none with a tree)."""
        types = self._job_types(job)
        return types[0] if len(types) == 1 and types[0] in self.types else -1

    def _type_block(self, job: int, leaf: int, r: float) -> str:
        """Why the per-type trees hold ``job`` now ("" if they do not): its one type's tree, or, for a
        job that may use several types, every one of them having a tree that holds it."""
        types = self._job_types(job)
        why = ""
        for k in types:
            tree = self.types.get(k)
            if tree is None:
                return ""
            hit = tree.blocking(leaf, r)
            if hit is None:
                return ""
            why = why or tree.explain(leaf, r, *hit)
        return why

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
        types = env.jobs.gpu_type[jobs] if self.types else None
        out: FloatArray = (~self.entitled(env.jobs.tenant[jobs], env.jobs.total_gpus[jobs], types)).astype(np.float64)
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
            if not self.types:
                return SUCCESS
            why = self._type_block(job, leaf, r)
            if not why:
                return SUCCESS
        else:
            why = self.tree.explain(leaf, r, *hit)
        self.admit_rejections += 1
        return Status.unschedulable(why, NAME)

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
        if self.types:
            types = self._job_types(job)
            if types and all(k in self.types and r > self.type_max[k][leaf] for k in types):
                k = types[0]
                return Status.unresolvable(
                    f"needs {r:g} GPUs; queue {self.tree.names[leaf]} may take at most {self.type_max[k][leaf]:g} "
                    f"{self.types[k].unit} GPUs" + (" (and no more of its other types)" if len(types) > 1 else ""),
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
        if self.types:
            per = self._type_use(placement)
            if per:
                self.job_types[job] = per
                for k, g in per:
                    self.types[k].add(leaf, g)
        self.version += 1

    def job_stopped(self, env: SchedulerEnv, job: int, now: float, placement: Placement, finished: bool) -> None:
        leaf = int(self.job_leaf[job])
        if leaf < 0:
            return
        self.job_leaf[job] = -1
        self.tree.add(leaf, -float(placement.total_gpus))
        for k, g in self.job_types.pop(job, ()):
            self.types[k].add(leaf, -g)
        self.version += 1

    def _type_use(self, placement: Placement) -> list[tuple[int, float]]:
        """(type, GPUs) of ``placement`` for the types that have a tree."""
        gpu_type = self.env.cluster.gpu_type
        use: dict[int, float] = {}
        for node, count in placement.per_node.items():
            k = int(gpu_type[node])
            if k in self.types:
                use[k] = use.get(k, 0.0) + float(placement.gpus * count)
        return sorted(use.items())

    # --- reclaim (QueueGuarantee) -------------------------------------------------------------
    def any_borrowing(self) -> bool:
        return self.tree.any_borrowing() or any(t.any_borrowing() for t in self.types.values())

    def entitled(self, tenants: IntArray, gpus: IntArray, types: IntArray | None = None) -> BoolArray:
        """Within the leaf's guarantee in the GPU total and, for a job of one GPU type that has a tree
        (``types``: the jobs' GPU type codes), in that type's tree too."""
        if self._slack_at != self.version:  # per tenant code: GPUs its leaf has left within its guarantee
            tree = self.tree
            slack = np.append(tree.guaranteed - tree.usage + 1e-9, -np.inf)  # (index -1: in no leaf)
            self._slack = slack[self.leaf]
            self._type_slack = {k: np.append(t.guaranteed - t.usage + 1e-9, -np.inf)[self.leaf]
                                for k, t in self.types.items()}
            self._slack_at = self.version
        out: BoolArray = gpus <= self._slack[tenants]
        if types is not None and self.types and len(types):
            for code in np.unique(types).tolist():
                cl = self._job_type_cache.get(code)
                if cl is None:
                    cl = self._job_type_cache[code] = (list(range(len(self.env.cluster.gpu_type_names))) if code < 0
                                                       else self.env.cluster_types_of(code))
                if len(cl) == 1 and cl[0] in self.types:
                    sel = types == code
                    out[sel] &= gpus[sel] <= self._type_slack[cl[0]][tenants[sel]]
        return out

    def reclaim_order(self, env: SchedulerEnv, job: int, running: IntArray, start: FloatArray) -> IntArray:
        leaf = int(self.leaf[int(env.jobs.tenant[job])])
        leaves = self.job_leaf[running]
        mapped = leaves >= 0
        idx = np.flatnonzero(mapped)
        if len(idx) == 0 or leaf < 0:
            return np.zeros(0, dtype=np.int64)
        prio = env.jobs.priority[running[idx]].astype(np.float64)
        k = self._only_type(job) if self.types else -1
        if k < 0 and self.types and self._type_block(job, leaf, float(env.jobs.total_gpus[job])):
            # a job of several types whose every type's tree holds it now: the filter keeps it off them
            # all whatever is evicted (reclaim by the GPU total only frees what the trees still hold)
            return np.zeros(0, dtype=np.int64)
        if k < 0:
            sub = self.tree.reclaim_order(leaf, leaves[idx], prio, start[idx], running[idx])
        else:  # borrowers in the GPU total, and borrowers of the job's type that hold some of it
            cand, depth = self.tree.reclaim_candidates(leaf, leaves[idx])
            best = dict(zip(cand.tolist(), depth.tolist(), strict=True))
            holds = np.fromiter((any(t == k for t, _ in self.job_types.get(int(j), ())) for j in running[idx]),
                                dtype=bool, count=len(idx))
            tc, td = self.types[k].reclaim_candidates(leaf, leaves[idx])
            for i, d in zip(tc.tolist(), td.tolist(), strict=True):
                if holds[i]:
                    best[i] = max(best.get(i, d), d)
            keys = sorted(best)
            sub = kueue_order(np.asarray(keys, dtype=np.int64), np.asarray([best[i] for i in keys], dtype=np.int64),
                              prio, start[idx], running[idx])
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
        if self.tree.blocking_without(leaf, float(gpus[job]), gone) is not None:
            return False
        k = self._only_type(job) if self.types else -1
        if k < 0:
            return True
        gone_k: dict[int, float] = {}
        for v in victims:
            m = int(job_leaf[v])
            for t, g in self.job_types.get(int(v), ()):
                if t == k and m >= 0:
                    gone_k[m] = gone_k.get(m, 0.0) + g
        return self.types[k].blocking_without(leaf, float(gpus[job]), gone_k) is None

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
            if self.types:
                out[tree.names[q]]["per_type"] = {
                    t.unit: {
                        "guaranteed": float(t.guaranteed[q]),
                        "borrowing_limit": _finite(t.borrowing_limit[q]),
                        "lending_limit": _finite(t.lending_limit[q]),
                        "in_use": float(t.usage[q]),
                        "borrowed": float(max(t.takes[q] - t.guaranteed[q], 0.0)),
                        "capacity": float(t.capacity(q)),
                    }
                    for _, t in sorted(self.types.items(), key=lambda kt: kt[1].unit)
                }
        return out


@register_plugin
class TypedQueues(Queues, Filter):
    """:class:`Queues` with per-GPU-type guarantees and limits: also a Filter, which drops the nodes of
    the GPU types whose tree would not admit the whole job (for jobs that may use several types; a
    job of one type is checked at admission). A separate plugin so that trees without per-type
    limits keep the filter-free (class-based) placement."""

    NAME = TYPED_NAME

    def filter(self, ctx: CycleContext, job: int, mask: BoolArray) -> BoolArray:
        leaf = int(self.leaf[int(self.env.jobs.tenant[job])])
        if leaf < 0 or len(self._job_types(job)) < 2:  # (one type: admission checks it, reclaim too)
            return mask
        r = float(self.env.jobs.total_gpus[job])
        bad = [k for k, t in self.types.items() if t.blocking(leaf, r) is not None]
        if not bad:
            return mask
        out: BoolArray = mask & ~np.isin(self.env.cluster.gpu_type, bad)
        return out


def _naming(queues: Sequence[QueueSpec], gpu_type: str) -> str:
    """The first queue (depth first) that names ``gpu_type``, and the key: ``vision: guaranteed.H100``."""
    for q in queues:
        for key in _AMOUNTS:
            v = getattr(q, key)
            if isinstance(v, dict) and gpu_type in v:
                return f"{q.name}: {key}.{gpu_type}"
        found = _naming(q.children, gpu_type)
        if found:
            return found
    return ""


def _finite(x: float) -> float | None:
    return None if math.isinf(x) else float(x)
