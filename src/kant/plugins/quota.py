"""Queues and quotas: guaranteed and maximum GPUs per tenant, borrowing of idle quota in one cohort.

The model is Kueue's ClusterQueues in one cohort (``nominalQuota`` = *guaranteed*, ``nominalQuota +
borrowingLimit`` = *max*) and Volcano's capacity plugin (``deserved`` / ``capability``). Every tenant
(``JobTable.tenant``) has, for the GPU total and optionally per cluster GPU type:

* ``guaranteed`` G: GPUs the tenant can always get back (by the ``reclaim`` action);
* ``max`` M: GPUs the tenant may never exceed (default: unlimited).

Rules (``U`` = GPUs the tenant's running jobs hold, ``r`` = the job's GPUs):

* **admit**: ``U + r <= M``; and if ``U + r > G`` the job *borrows* and is admitted only with
  ``cohort_borrowing: true``. Whether the borrowed GPUs are free is decided by placement: a free GPU
  is by definition idle quota of someone (or unassigned capacity), so the cohort check of Kueue
  (cohort usage + r <= sum of nominal quotas) holds whenever the job physically fits and the
  guarantees cover the cluster.
* **borrowed GPUs are recorded per job** when it starts: ``b = max(0, U + r - max(U, G))`` (the part
  above the guarantee), per column (total and each GPU type with a per-type guarantee). When a job
  of the tenant stops and the tenant's recorded borrowing exceeds ``max(0, U - G)``, the excess is
  re-labelled as guaranteed on its borrowed jobs, earliest started first (they then no longer count
  as borrowed and are safe from reclaim). So at every instant ``sum of recorded b = max(0, U - G)``
  per tenant and column, and ``U <= G + borrowed`` and ``U <= M``.
* **per GPU type**: a job asking for one GPU type is checked against that type's quota at admission;
  a job that may use several types is checked by this plugin's filter, which removes the nodes of
  types whose quota the job would break.
* **feasible**: a job larger than its tenant's max can never run (reported unschedulable on arrival).

Guarantees can be derived from the trace with ``guarantees_from`` (see :func:`derive_guarantees`):
``gpu-time-share`` gives each tenant a share of ``guaranteed_fraction`` x the cluster's GPUs
proportional to its GPU-time (duration x GPUs) in the trace (largest-remainder rounding, so the
guarantees add up exactly); ``equal`` splits it evenly. Explicit ``tenants.<name>.guaranteed`` wins
over a derived value, which wins over ``default.guaranteed``.

Counters for reports live on the plugin instance (see :meth:`Quota.report` and ``sim.plugin(Quota)``):
``borrowed_gpu_seconds[t]`` (integral over time of ``max(0, U_t - G_t)``), ``reclaim_evictions[t]``
(jobs of tenant t evicted by ``reclaim``), ``reclaims_for[t]`` (jobs of t started by reclaiming),
``borrowing_starts[t]`` (job starts that borrowed), ``peak_borrowed[t]`` and ``admit_rejections``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, model_validator

from kant.config.policy import ActionEntry, PluginEntry, Policy
from kant.errors import ConfigError
from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import Admit, BoolArray, Filter, Guarantee, JobListener
from kant.framework.registry import action_class, register_plugin
from kant.framework.status import SUCCESS, Status
from kant.model.job import JobTable
from kant.model.state import Placement
from kant.model.store import grow

__all__ = ["NAME", "Quota", "QuotaArgs", "TenantQuota", "TypeQuota", "derive_guarantees", "gpu_time_share",
           "with_quotas", "with_tenant_quotas"]

NAME = "quota"

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

GuaranteeMethod = Literal["gpu-time-share", "equal"]


class TypeQuota(BaseModel):
    """Guaranteed / maximum GPUs of one GPU type for one tenant."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    guaranteed: int = Field(default=0, ge=0)
    max: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _max_covers_guarantee(self) -> TypeQuota:
        if self.max is not None and self.max < self.guaranteed:
            raise ValueError(f"max ({self.max}) is below guaranteed ({self.guaranteed})")
        return self


class TenantQuota(BaseModel):
    """One tenant's quota. ``None`` means "not set here" (derived value, default, or unlimited)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    guaranteed: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)
    per_type: dict[str, TypeQuota] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _max_covers_guarantee(self) -> TenantQuota:
        if self.max is not None and self.guaranteed is not None and self.max < self.guaranteed:
            raise ValueError(f"max ({self.max}) is below guaranteed ({self.guaranteed})")
        return self


class QuotaArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tenants: dict[str, TenantQuota] = Field(default_factory=dict)
    default: TenantQuota = Field(default_factory=TenantQuota)
    cohort_borrowing: bool = True
    guarantees_from: GuaranteeMethod | None = None
    guaranteed_fraction: float = Field(default=1.0, gt=0.0, le=1.0)
    #: a job larger than its tenant's max waits, held by admission with the quota's reason, instead of
    #: being unschedulable on arrival (the live service: an admin may raise the max)
    hold_over_max: bool = False


# --- deriving guarantees from a trace ------------------------------------------------------------
def gpu_time_share(jobs: JobTable) -> FloatArray:
    """Each tenant's share of the trace's GPU-time (sum of duration x GPUs; never-ending jobs such
    as inference services are left out). Equal shares if the trace has no GPU-time."""
    n = len(jobs.tenant_names)
    work = jobs.duration * jobs.total_gpus
    finite = np.isfinite(work)
    per = np.bincount(jobs.tenant[finite], weights=work[finite], minlength=n).astype(np.float64)
    total = float(per.sum())
    if total <= 0:
        return np.full(n, 1.0 / n)
    return per / total


def _apportion(shares: FloatArray, total: int) -> IntArray:
    """Largest-remainder rounding of ``shares x total`` to integers that add up to ``total``
    (ties to the lower tenant index)."""
    exact = shares * total
    base = np.floor(exact).astype(np.int64)
    left = total - int(base.sum())
    if left > 0:
        order = np.lexsort((np.arange(len(shares)), -(exact - base)))
        base[order[:left]] += 1
    return base


def derive_guarantees(jobs: JobTable, capacity: int, method: GuaranteeMethod = "gpu-time-share",
                      fraction: float = 1.0) -> IntArray:
    """Guaranteed GPUs per tenant (indexed like ``jobs.tenant_names``) that add up to
    ``floor(fraction x capacity)``: proportional to GPU-time share, or equal."""
    n = len(jobs.tenant_names)
    total = math.floor(fraction * capacity)
    shares = gpu_time_share(jobs) if method == "gpu-time-share" else np.full(n, 1.0 / n)
    return _apportion(shares, total)


# --- the plugin ----------------------------------------------------------------------------------
@register_plugin
class Quota(Admit, Filter, JobListener, Guarantee):
    """Guaranteed / max GPUs per tenant with cohort borrowing (see the module docstring).

    Arrays are indexed ``[tenant, column]``; column 0 is the GPU total and column ``1 + k`` the
    cluster GPU type ``k``. ``guaranteed``/``maximum`` hold ``inf`` where nothing is configured.
    """

    NAME = NAME
    Args = QuotaArgs
    REQUEST_ONLY = False  # the filter looks at the job's tenant and its quota usage

    def setup(self, env: SchedulerEnv) -> None:
        args = self.args
        assert isinstance(args, QuotaArgs)
        jobs, cluster = env.jobs, env.cluster
        self.env = env
        self.borrowing_on = args.cohort_borrowing
        n_t = len(jobs.tenant_names)
        n_c = 1 + len(cluster.gpu_type_names)
        self.tenant_names = jobs.tenant_names
        index = {name: i for i, name in enumerate(jobs.tenant_names)}
        unknown = sorted(set(args.tenants) - set(index))
        if unknown:
            raise ConfigError(f"{NAME} plugin", f"args.tenants.{unknown[0]}",
                              f"no such tenant in the trace; tenants: {', '.join(jobs.tenant_names)}")
        derived = None
        if args.guarantees_from is not None:
            trace = env.require_trace(NAME, f"guarantees_from: {args.guarantees_from} reads the trace's tenants")
            derived = derive_guarantees(trace, cluster.total_gpus, args.guarantees_from, args.guaranteed_fraction)
        guaranteed, maximum = self._limits(jobs.tenant_names, derived)
        self.guaranteed = guaranteed
        self.maximum = maximum
        self.per_type_limited = np.isfinite(guaranteed[:, 1:]) | np.isfinite(maximum[:, 1:])  # [tenant, type]
        self.usage = np.zeros((n_t, n_c), dtype=np.float64)
        self.borrowed = np.zeros((n_t, n_c), dtype=np.float64)
        self.job_borrowed = np.zeros((len(jobs), n_c), dtype=np.float64)
        self.ever_borrowed = np.zeros(len(jobs), dtype=bool)
        self._borrowing: list[dict[int, float]] = [{} for _ in range(n_t)]  # tenant -> {job: start}
        # counters for reports
        self.borrowed_gpu_seconds = np.zeros(n_t, dtype=np.float64)
        self.peak_borrowed = np.zeros(n_t, dtype=np.float64)
        self.borrowing_starts = np.zeros(n_t, dtype=np.int64)
        self.reclaim_evictions = np.zeros(n_t, dtype=np.int64)
        self.reclaims_for = np.zeros(n_t, dtype=np.int64)
        self.admit_rejections = 0
        #: bumped whenever the set of borrowing jobs or their recorded borrowing changes (reclaim
        #: caches failures on it)
        self.borrow_version = 0
        self._pool = np.zeros(0, dtype=np.int64)
        self._pool_version = -1
        self._last_t = -math.inf
        self._since = np.zeros(n_t, dtype=np.float64)  # last update of borrowed_gpu_seconds
        #: per-type usage is tracked only when some tenant has a per-type quota
        self.tracks_types = bool(self.per_type_limited.any())
        # job-side type code -> cluster type codes (cached)
        self._types: dict[int, list[int]] = {}

    def _limits(self, names: tuple[str, ...], derived: IntArray | None) -> tuple[FloatArray, FloatArray]:
        """(guaranteed, maximum) rows for the tenants ``names`` (``derived``: guarantees from the
        trace, indexed like ``names``)."""
        args = self.args
        assert isinstance(args, QuotaArgs)
        cluster = self.env.cluster
        n_c = 1 + len(cluster.gpu_type_names)
        guaranteed = np.full((len(names), n_c), np.inf)
        maximum = np.full((len(names), n_c), np.inf)
        for t, name in enumerate(names):
            spec = args.tenants.get(name, args.default)
            g: float
            if spec.guaranteed is not None:
                g = spec.guaranteed
            elif derived is not None:
                g = float(derived[t])
            elif args.default.guaranteed is not None:
                g = args.default.guaranteed
            else:
                g = 0.0
            m = spec.max if spec.max is not None else args.default.max
            guaranteed[t, 0] = g
            maximum[t, 0] = math.inf if m is None else float(m)
            per_type = spec.per_type or args.default.per_type
            for tname, tq in per_type.items():
                code = cluster.gpu_type_code(tname)
                if code < 0:
                    raise ConfigError(f"{NAME} plugin", f"args.tenants.{name}.per_type.{tname}",
                                      f"no such GPU type in the cluster; types: {', '.join(cluster.gpu_type_names)}")
                guaranteed[t, 1 + code] = tq.guaranteed
                maximum[t, 1 + code] = math.inf if tq.max is None else float(tq.max)
        if np.any(maximum[:, 0] < guaranteed[:, 0]):
            t = int(np.flatnonzero(maximum[:, 0] < guaranteed[:, 0])[0])
            raise ConfigError(f"{NAME} plugin", f"args.tenants.{names[t]}.max",
                              f"max ({maximum[t, 0]:g}) is below the guarantee ({guaranteed[t, 0]:g})")
        return guaranteed, maximum

    def jobs_added(self, env: SchedulerEnv, start: int) -> None:
        """New jobs get empty borrowing records; new tenants (a live submit) get the configured quota
        (their own entry, else ``default``) and no usage."""
        n = len(env.jobs)
        self.job_borrowed = grow(self.job_borrowed, n)
        self.ever_borrowed = grow(self.ever_borrowed, n, False)
        names = env.jobs.tenant_names
        n_old = len(self.tenant_names)
        if len(names) == n_old:
            return
        guaranteed, maximum = self._limits(names[n_old:], None)
        k = len(names) - n_old
        self.tenant_names = names
        self.guaranteed = np.concatenate((self.guaranteed, guaranteed))
        self.maximum = np.concatenate((self.maximum, maximum))
        self.per_type_limited = np.isfinite(self.guaranteed[:, 1:]) | np.isfinite(self.maximum[:, 1:])
        self.tracks_types = bool(self.per_type_limited.any())
        self.usage = np.concatenate((self.usage, np.zeros((k, self.usage.shape[1]))))
        self.borrowed = np.concatenate((self.borrowed, np.zeros((k, self.borrowed.shape[1]))))
        self._borrowing.extend({} for _ in range(k))
        for counter in ("borrowed_gpu_seconds", "peak_borrowed", "borrowing_starts", "reclaim_evictions",
                        "reclaims_for", "_since"):
            arr = getattr(self, counter)
            setattr(self, counter, np.concatenate((arr, np.zeros(k, dtype=arr.dtype))))

    def reclaimed(self, job: int, victims: Sequence[int]) -> None:
        tenant = self.env.jobs.tenant
        for v in victims:
            self.reclaim_evictions[int(tenant[v])] += 1
        self.reclaims_for[int(tenant[job])] += 1

    def _job_types(self, job: int) -> list[int]:
        code = int(self.env.jobs.gpu_type[job])
        if code < 0:
            return list(range(len(self.env.cluster.gpu_type_names)))
        types = self._types.get(code)
        if types is None:
            types = self._types[code] = self.env.cluster_types_of(code)
        return types

    def borrowing_jobs(self) -> list[int]:
        """Running jobs with borrowed GPUs recorded (any column)."""
        return [job for per_tenant in self._borrowing for job in per_tenant]

    def borrowing_total(self) -> IntArray:
        """Running jobs with borrowed GPUs recorded in the GPU total, ascending (cached until the
        set changes: ``borrow_version``)."""
        if self._pool_version != self.borrow_version:
            pool = sorted(j for j in self.borrowing_jobs() if self.job_borrowed[j, 0] > 0)
            self._pool = np.asarray(pool, dtype=np.int64)
            self._pool_version = self.borrow_version
        return self._pool

    def within_guarantee(self, job: int) -> bool:
        """Would ``job`` fit in its tenant's guaranteed GPUs (total column) right now?"""
        t = int(self.env.jobs.tenant[job])
        return bool(self.usage[t, 0] + float(self.env.jobs.total_gpus[job]) <= self.guaranteed[t, 0])

    # --- admission -----------------------------------------------------------------------------
    def _check(self, t: int, col: int, r: float, what: str) -> str:
        u = self.usage[t, col]
        gpus = f"{what + ' ' if what else ''}GPUs"
        if u + r > self.maximum[t, col]:
            return (f"tenant {self.tenant_names[t]} at its max of {self.maximum[t, col]:g} {gpus} "
                    f"(holds {u:g}, the job needs {r:g})")
        if u + r > self.guaranteed[t, col] and not self.borrowing_on:
            return (f"tenant {self.tenant_names[t]} at its guarantee of {self.guaranteed[t, col]:g} {gpus} "
                    f"(holds {u:g}, the job needs {r:g}; borrowing is off)")
        return ""

    def admit(self, ctx: CycleContext, job: int) -> Status:
        jobs = self.env.jobs
        t = int(jobs.tenant[job])
        r = float(jobs.total_gpus[job])
        why = self._check(t, 0, r, "")
        if not why:
            types = self._job_types(job)
            if len(types) == 1 and self.per_type_limited[t, types[0]]:
                why = self._check(t, 1 + types[0], r, self.env.cluster.gpu_type_names[types[0]])
        if why:
            self.admit_rejections += 1
            return Status.unschedulable(why, NAME)
        return SUCCESS

    def feasible(self, env: SchedulerEnv, job: int) -> Status:
        args = self.args
        assert isinstance(args, QuotaArgs)
        if args.hold_over_max:  # admission holds it with the quota's reason
            return SUCCESS
        jobs = env.jobs
        t = int(jobs.tenant[job])
        r = float(jobs.total_gpus[job])
        if r > self.maximum[t, 0]:
            return Status.unresolvable(f"needs {r:g} GPUs; tenant {self.tenant_names[t]} may hold at most "
                                       f"{self.maximum[t, 0]:g}", NAME)
        types = self._job_types(job)
        if types and all(self.per_type_limited[t, k] and r > self.maximum[t, 1 + k] for k in types):
            return Status.unresolvable(f"needs {r:g} GPUs; tenant {self.tenant_names[t]}'s per-type max is "
                                       "smaller for every GPU type it may use", NAME)
        return SUCCESS

    def filter(self, ctx: CycleContext, job: int, mask: BoolArray) -> BoolArray:
        """Drop nodes of GPU types whose per-type quota the whole job would break (only for tenants
        with per-type quotas and jobs that may use several types)."""
        jobs = self.env.jobs
        t = int(jobs.tenant[job])
        limited = self.per_type_limited[t]
        if not limited.any():
            return mask
        r = float(jobs.total_gpus[job])
        u = self.usage[t, 1:]
        bad = limited & ((u + r > self.maximum[t, 1:]) | (
            (u + r > self.guaranteed[t, 1:]) & (not self.borrowing_on)))
        if not bad.any():
            return mask
        out: BoolArray = mask & ~bad[self.env.cluster.gpu_type]
        return out

    # --- accounting ----------------------------------------------------------------------------
    def _type_request(self, placement: Placement) -> FloatArray:
        cluster = self.env.cluster
        req = np.zeros(self.usage.shape[1] - 1, dtype=np.float64)
        for node, count in placement.per_node.items():
            req[int(cluster.gpu_type[node])] += placement.gpus * count
        return req

    def _integrate(self, t: int, now: float) -> None:
        """Add tenant t's borrowed GPU-seconds up to ``now`` (call before its borrowing changes)."""
        since = float(self._since[t])
        if now > since:
            self.borrowed_gpu_seconds[t] += (now - since) * float(self.borrowed[t, 0])
            self._since[t] = now

    def job_started(self, env: SchedulerEnv, job: int, now: float, placement: Placement) -> None:
        self._last_t = max(self._last_t, now)
        t = int(env.jobs.tenant[job])
        r = float(placement.total_gpus)
        u = float(self.usage[t, 0])
        b0 = max(0.0, u + r - max(u, float(self.guaranteed[t, 0])))
        self.usage[t, 0] = u + r
        bt: FloatArray | None = None
        if self.tracks_types:
            req = self._type_request(placement)
            ut, gt = self.usage[t, 1:], self.guaranteed[t, 1:]
            with np.errstate(invalid="ignore"):
                bt = np.where(np.isfinite(gt), np.maximum(ut + req - np.maximum(ut, gt), 0.0), 0.0)
            self.usage[t, 1:] += req
            if not bt.any():
                bt = None
        if b0 > 0 or bt is not None:
            self._integrate(t, now)
            self.borrowed[t, 0] += b0
            self.job_borrowed[job, 0] = b0
            if bt is not None:
                self.borrowed[t, 1:] += bt
                self.job_borrowed[job, 1:] = bt
            self.ever_borrowed[job] = True
            self._borrowing[t][job] = now
            self.borrow_version += 1
            if b0 > 0:
                self.borrowing_starts[t] += 1
            self.peak_borrowed[t] = max(self.peak_borrowed[t], self.borrowed[t, 0])

    def job_stopped(self, env: SchedulerEnv, job: int, now: float, placement: Placement, finished: bool) -> None:
        self._last_t = max(self._last_t, now)
        t = int(env.jobs.tenant[job])
        self.usage[t, 0] -= placement.total_gpus
        if self.tracks_types:
            self.usage[t, 1:] -= self._type_request(placement)
        if self._borrowing[t].pop(job, None) is not None:
            self.borrow_version += 1
            self._integrate(t, now)
            self.borrowed[t] -= self.job_borrowed[job]
            self.job_borrowed[job] = 0.0
        if not self._borrowing[t]:
            return
        excess0 = float(self.borrowed[t, 0]) - max(0.0, float(self.usage[t, 0]) - float(self.guaranteed[t, 0]))
        if self.tracks_types:
            g = self.guaranteed[t]
            with np.errstate(invalid="ignore"):
                allowed = np.where(np.isfinite(g), np.maximum(self.usage[t] - g, 0.0), 0.0)
            excess = self.borrowed[t] - allowed
        else:
            excess = np.zeros(self.usage.shape[1])
            excess[0] = excess0
        if np.any(excess > 1e-9):
            self._integrate(t, now)
            self._relabel(t, excess)

    def _relabel(self, t: int, excess: FloatArray) -> None:
        """Turn ``excess`` recorded borrowing of tenant t back into guaranteed use, on its borrowed
        jobs in start order (earliest first, then job row)."""
        self.borrow_version += 1
        borrowing = self._borrowing[t]
        for job in sorted(borrowing, key=lambda j: (borrowing[j], j)):
            take = np.minimum(self.job_borrowed[job], np.maximum(excess, 0.0))
            self.job_borrowed[job] -= take
            self.borrowed[t] -= take
            excess = excess - take
            if not self.job_borrowed[job].any():
                del borrowing[job]
            if not np.any(excess > 1e-9):
                break

    # --- reports -------------------------------------------------------------------------------
    def report(self) -> dict[str, dict[str, float]]:
        """Per tenant: guaranteed and max GPUs, GPUs in use and borrowed now, GPU-seconds borrowed,
        peak borrowed, starts that borrowed, reclaim evictions suffered and reclaims made for it."""
        for t in range(len(self.tenant_names)):
            self._integrate(t, self._last_t)
        out: dict[str, dict[str, float]] = {}
        for t, name in enumerate(self.tenant_names):
            out[name] = {
                "guaranteed": float(self.guaranteed[t, 0]),
                "max": float(self.maximum[t, 0]),
                "in_use": float(self.usage[t, 0]),
                "borrowed_now": float(self.borrowed[t, 0]),
                "borrowed_gpu_seconds": float(self.borrowed_gpu_seconds[t]),
                "peak_borrowed": float(self.peak_borrowed[t]),
                "borrowing_starts": int(self.borrowing_starts[t]),
                "reclaim_evictions": int(self.reclaim_evictions[t]),
                "reclaims_for": int(self.reclaims_for[t]),
            }
        return out


def with_tenant_quotas(policy: Policy, quotas: Mapping[str, tuple[int | None, int | None]], *,
                       hold_over_max: bool | None = None) -> Policy:
    """``policy`` with each named tenant's (guaranteed, max) GPUs set in its quota plugin (None: not
    set, as in a policy file). A policy without a quota plugin gets one (see :func:`with_quotas`), so
    quotas apply under every policy. ``hold_over_max``: set that argument of the quota plugin (None:
    as the policy has it)."""
    tenants: dict[str, TenantQuota] = {}
    existing = next((e.args for e in policy.plugins if issubclass(e.cls, Quota)), None)
    for name, (guaranteed, most) in quotas.items():
        base = existing.tenants.get(name, TenantQuota()) if isinstance(existing, QuotaArgs) else TenantQuota()
        try:
            tenants[name] = TenantQuota.model_validate({**base.model_dump(), "guaranteed": guaranteed, "max": most})
        except ValueError as exc:
            raise ConfigError(policy.source or policy.name, f"tenants.{name}", _first_error(exc)) from None
    return with_quotas(policy, tenants, hold_over_max=hold_over_max)


def _first_error(exc: ValueError) -> str:
    """The message of a pydantic validation error, in one line."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        return str(first.get("msg", exc)).removeprefix("Value error, ")
    return str(exc).splitlines()[0]


def with_quotas(policy: Policy, tenants: Mapping[str, TenantQuota], *, hold_over_max: bool | None = None) -> Policy:
    """``policy`` with the quotas ``tenants`` in force (quotas apply by default, whatever the policy).

    * A policy with a quota plugin gets these tenants' entries in it (each replaces the tenant's own).
    * A policy without one gets a quota plugin, after its other plugins (``cohort_borrowing: true``,
      no guarantees but these), and, if some tenant has a guarantee above 0 and the policy has no
      ``reclaim`` action, ``reclaim`` right after its first ``allocate`` (``allocate_after`` only when
      that allocate does not block: a blocking policy's later actions, backfill, come next anyway).
      With no quota given, the policy is returned as it is: a deployment without quotas runs the
      policy unchanged.
    """
    entries: list[PluginEntry] = []
    found = False
    for entry in policy.plugins:
        if issubclass(entry.cls, Quota):
            found = True
            args = entry.args
            assert isinstance(args, QuotaArgs)
            update: dict[str, object] = {"tenants": {**args.tenants, **tenants}}
            if hold_over_max is not None:
                update["hold_over_max"] = hold_over_max
            entry = PluginEntry(entry.cls, args.model_copy(update=update), entry.weight)
        entries.append(entry)
    if found:
        return replace(policy, plugins=tuple(entries))
    if not tenants:
        return policy
    args = QuotaArgs(tenants=dict(tenants), hold_over_max=bool(hold_over_max))
    entries.append(PluginEntry(Quota, args, 1.0))
    actions = list(policy.actions)
    names = [a.cls.NAME for a in actions]
    guaranteed = any((q.guaranteed or 0) > 0 or any(t.guaranteed > 0 for t in q.per_type.values())
                     for q in tenants.values())
    if guaranteed and "reclaim" not in names and "allocate" in names:
        first = names.index("allocate")
        blocking = bool(getattr(actions[first].args, "blocking", False))
        reclaim = action_class("reclaim")
        assert reclaim is not None
        reclaim_args = reclaim.Args.model_validate({"allocate_after": not blocking})
        actions.insert(first + 1, ActionEntry(reclaim, reclaim_args))
    return replace(policy, plugins=tuple(entries), actions=tuple(actions))
