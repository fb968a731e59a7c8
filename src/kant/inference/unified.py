"""Inference services next to a training trace, on one cluster or on a fixed split of it.

:class:`InferenceDriver` turns a services file into what the simulator runs:

* **Rows.** Each service gets ``max_replicas`` rows of kind ``INFERENCE`` (one worker of
  ``gpus_per_replica`` GPUs, never-ending, the service's priority and tenant) appended after the
  training rows. They are *held*: the trace merge never submits them; the driver does.
* **Traffic and autoscaling.** Each service's traffic is built from its trace
  (:mod:`kant.inference.traffic`), and its autoscaler schedule (:func:`kant.inference.autoscaler.autoscale`)
  is computed before the run from the offered load, since Kubernetes-HPA decisions depend only on the
  load and on the autoscaler's own history.
* **A simulator process** (``Simulator.add_process``) applies the schedule: at each change it submits
  replica rows (lowest idle row first) or stops them (``Simulator.stop``, in the order of
  :mod:`kant.inference.replicas`: queued replicas first, then the most recently started, so ready
  replicas are kept longest; the live service scales down in the same order).
* **A listener** appended to the scheduler's listeners logs every start and stop of a replica; after
  the run :meth:`InferenceDriver.report` turns the log into ready-replica step functions (a replica is
  ready ``startup_delay_s`` after it starts, plus the ``inference-reclaim`` action's
  ``reclaim_delay_s`` when it was started by reclaiming), SLO attainment (:mod:`kant.inference.slo`),
  replica-hours and the GPU accounting of loans and reclaims.

Whether the cluster is unified or split is the policy's business (the ``co-schedule`` plugin and the
``inference-reclaim`` action, bundled as the ``unified`` and ``separate`` policies), so both modes
run exactly this code.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from kant.actions.inference_reclaim import InferenceReclaim
from kant.config.policy import Policy
from kant.errors import ConfigError
from kant.framework.context import SchedulerEnv
from kant.framework.plugin import JobListener
from kant.inference.autoscaler import HpaConfig, Schedule, autoscale
from kant.inference.replicas import scale_down_victims
from kant.inference.services import ServicesConfig, ServiceSpec
from kant.inference.slo import attainment
from kant.inference.traffic import RateFunction, base_bins, stretch
from kant.metrics.recorder import SimResult
from kant.model.cluster import Cluster
from kant.model.deps import JobDeps
from kant.model.elastic import ElasticSpec
from kant.model.job import JobKind, JobTable
from kant.model.state import Placement
from kant.plugins.co_schedule import CoSchedule
from kant.sim.execution import ExecutionModel
from kant.sim.simulator import Simulator
from kant.traces.load import LoadSeries

__all__ = ["InferenceDriver", "ServiceRun", "append_replicas", "inference_rows", "loaned_gpus", "share_loan",
           "simulate_with_services", "training_share"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
LoadFn = Callable[[str], LoadSeries]


@dataclass
class ServiceRun:
    """One service as the driver runs it."""

    index: int
    spec: ServiceSpec
    hpa: HpaConfig
    rows: IntArray
    traffic: RateFunction
    capacity_rps: FloatArray  # requests/s one replica serves, per traffic bin
    schedule: Schedule
    active: list[int] = field(default_factory=list)  # rows submitted and not stopped, oldest first


def append_replicas(training: JobTable, services: list[ServiceSpec]) -> tuple[JobTable, list[IntArray]]:
    """A job table with the training rows (same row numbers) followed by ``max_replicas`` INFERENCE
    rows per service; returns it and each service's rows."""
    n = len(training)
    gpu_types = list(training.gpu_type_names)
    tenants = list(training.tenant_names)
    users = list(training.user_names)

    def code(vocab: list[str], name: str) -> int:
        if name not in vocab:
            vocab.append(name)
        return vocab.index(name)

    cols: dict[str, list[Any]] = {c: [] for c in ("submit", "duration", "workers", "gpus_per_worker", "gpu_milli",
                                                   "cpu_milli", "memory_mib", "gpu_type", "priority", "tenant",
                                                   "user", "estimate", "kind")}
    names: list[str] = []
    rows: list[IntArray] = []
    for s in services:
        start = n + len(names)
        g_code = -1 if s.gpu_type is None else code(gpu_types, s.gpu_type)
        t_code = code(tenants, s.tenant)
        u_code = code(users, s.tenant)
        for r in range(s.max_replicas):
            names.append(f"{s.name}/replica-{r}")
            cols["submit"].append(s.start_s)
            cols["duration"].append(math.inf)
            cols["workers"].append(1)
            cols["gpus_per_worker"].append(s.gpus_per_replica)
            cols["gpu_milli"].append(1000)
            cols["cpu_milli"].append(0)
            cols["memory_mib"].append(0)
            cols["gpu_type"].append(g_code)
            cols["priority"].append(s.priority)
            cols["tenant"].append(t_code)
            cols["user"].append(u_code)
            cols["estimate"].append(math.nan)
            cols["kind"].append(int(JobKind.INFERENCE))
        rows.append(np.arange(start, n + len(names), dtype=np.int64))
    floats = {"submit", "duration", "estimate"}
    merged: dict[str, Any] = {
        c: np.concatenate([getattr(training, c), np.asarray(v, dtype=np.float64 if c in floats else np.int64)])
        for c, v in cols.items()
    }
    deps = training.deps
    if deps is not None:  # the replicas depend on nothing
        kill = np.concatenate([deps.kill_on_invalid, np.zeros(len(names), dtype=bool)])
        deps = JobDeps(deps.spec + ("",) * len(names), kill)
    elastic = training.elastic
    if elastic is not None:  # the replicas are rigid: min = max = 1 worker
        one = np.ones(len(names), dtype=np.int64)
        elastic = ElasticSpec(np.concatenate([elastic.min_workers, one]), np.concatenate([elastic.max_workers, one]),
                              elastic.speedup + (None,) * len(names))
    table = JobTable(
        names=training.names + tuple(names),
        gpu_type_names=tuple(gpu_types),
        tenant_names=tuple(tenants) or ("default",),
        user_names=tuple(users) or ("default",),
        source=training.source,
        origin_epoch=training.origin_epoch,
        deps=deps,
        elastic=elastic,
        **merged,
    )
    return table, rows


class _ReplicaLog(JobListener):
    """Logs starts (+1) and stops (-1) of rows from ``first_row`` on (the replicas)."""

    NAME = "inference-replica-log"

    def __init__(self, first_row: int) -> None:
        super().__init__()
        self.first_row = first_row
        self.events: list[tuple[int, float, int]] = []

    def job_started(self, env: SchedulerEnv, job: int, now: float, placement: Placement) -> None:
        if job >= self.first_row:
            self.events.append((job, now, 1))

    def job_stopped(self, env: SchedulerEnv, job: int, now: float, placement: Placement, finished: bool) -> None:
        if job >= self.first_row:
            self.events.append((job, now, -1))


# --- step functions ------------------------------------------------------------------------------
def training_share(total_gpus: float, pool: list[tuple[int, int]]) -> float:
    """The GPUs training owns when no ``co-schedule`` split says otherwise: the cluster less the
    inference pool, every service at ``max_replicas`` (``pool``: ``(max_replicas, gpus_per_replica)``
    per service)."""
    return float(total_gpus) - float(sum(m * g for m, g in pool))


def loaned_gpus(training_gpus: npt.ArrayLike, share: float) -> FloatArray:
    """GPUs *loaned* to training: what training holds above its share (:func:`training_share`),
    i.e. GPUs of the inference pool's headroom that training jobs hold (the simulator's report
    integrates it; the live dashboard shows it now)."""
    return np.maximum(np.asarray(training_gpus, dtype=np.float64) - share, 0.0)


def share_loan(loaned: int, headroom: dict[int, int]) -> dict[int, int]:
    """The ``loaned`` GPUs shared out over the services (by key) in proportion to their headroom
    (``max_replicas x gpus_per_replica`` less the replicas they keep), floored, never above a
    service's headroom."""
    total = sum(max(0, h) for h in headroom.values())
    if total <= 0 or loaned <= 0:
        return {k: 0 for k in headroom}
    part = min(1.0, loaned / total)
    return {k: int(max(0, h) * part) for k, h in headroom.items()}


def _steps(times: FloatArray, deltas: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Breakpoints and values of the step function that starts at 0 and adds ``deltas`` at ``times``."""
    t = np.asarray(times, dtype=np.float64)
    d = np.asarray(deltas, dtype=np.float64)
    order = np.argsort(t, kind="stable")
    t, d = t[order], d[order]
    uniq, first = np.unique(t, return_index=True)
    sums = np.add.reduceat(d, first) if len(d) else np.zeros(0)
    return uniq, np.cumsum(sums)


def _value_at(bp: FloatArray, values: FloatArray, t: npt.ArrayLike, before: float = 0.0) -> FloatArray:
    """The step function (``values[k]`` from ``bp[k]`` on, ``before`` before ``bp[0]``) at time(s) ``t``."""
    x = np.asarray(t, dtype=np.float64)
    if not len(values):
        return np.full(x.shape, before)
    k = np.searchsorted(bp, x, side="right") - 1
    out: FloatArray = np.where(k >= 0, values[np.maximum(k, 0)], before)
    return out


def _integral(bp: FloatArray, values: FloatArray, lo: float, hi: float) -> float:
    """Integral over ``[lo, hi]`` of the step function (0 before the first breakpoint)."""
    if hi <= lo or not len(bp):
        return 0.0
    edges = np.concatenate((bp, [math.inf]))
    w = np.diff(np.clip(edges, lo, hi))
    return float(np.dot(values, w))


class InferenceDriver:
    """Builds the replica rows, traffic and autoscaler schedules of a services file and drives them
    through a :class:`~kant.sim.Simulator` (see the module docstring)."""

    def __init__(self, config: ServicesConfig, training: JobTable, cluster: Cluster, *,
                 load: LoadFn | None = None) -> None:
        config.check_cluster(cluster)
        self.config = config
        self.cluster = cluster
        self.n_training = len(training)
        self.start = min(s.start_s for s in config.services)
        if config.horizon_s is not None:
            horizon = float(config.horizon_s)
        elif self.n_training:
            horizon = float(training.submit.max())
        else:
            raise ConfigError(config.source, "horizon_s", "needed when there is no training trace")
        if horizon <= self.start:
            raise ConfigError(config.source, "horizon_s", f"the traffic horizon ({horizon:g} s) must be after the "
                              f"first service start ({self.start:g} s)")
        self.horizon = horizon
        self.jobs, rows = append_replicas(training, config.services)
        self.held = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        loader = load or _default_loader()
        cache: dict[str, LoadSeries] = {}
        self.runs: list[ServiceRun] = []
        for i, (spec, hpa) in enumerate(zip(config.services, config.autoscalers, strict=True)):
            if spec.traffic.trace not in cache:
                cache[spec.traffic.trace] = loader(spec.traffic.trace)
            self.runs.append(self._build(i, spec, hpa, rows[i], cache[spec.traffic.trace]))
        self.log = _ReplicaLog(self.n_training)
        self.sim: Simulator | None = None
        self._events: list[tuple[float, int, int]] = sorted(
            (float(t), r.index, int(n)) for r in self.runs for t, n in zip(r.schedule.times, r.schedule.replicas,
                                                                          strict=True))
        self._ptr = 0
        self.scale_ups = 0
        self.scale_downs = 0

    # --- building ----------------------------------------------------------------------------------
    def _build(self, i: int, spec: ServiceSpec, hpa: HpaConfig, rows: IntArray, series: LoadSeries) -> ServiceRun:
        where = f"services[{i}]"
        tr = spec.traffic
        try:
            base, tokens = base_bins(series, tr.bin_s, streams=tr.streams, token_field=spec.token_field)
        except ValueError as exc:
            raise ConfigError(self.config.source, f"{where}.traffic", str(exc)) from None
        start = spec.start_s
        n_bins = max(1, math.ceil((self.horizon - start) / tr.bin_s - 1e-9))
        traffic = stretch(base, tokens, start=start, bin_s=tr.bin_s, n_bins=n_bins,
                          spec=tr.stretch_spec(self.config.seed + i))
        if spec.capacity_rps is not None:
            cap = np.full(n_bins, spec.capacity_rps)
        else:
            assert spec.capacity_tps is not None
            if spec.tokens_per_request is not None:
                per_req = np.full(n_bins, spec.tokens_per_request)
            elif traffic.tokens is not None:
                per_req = np.maximum(traffic.tokens, 1.0)
            else:
                raise ConfigError(self.config.source, f"{where}.capacity_tps",
                                  f"trace {tr.trace!r} has no token counts; give tokens_per_request")
            cap = spec.capacity_tps / per_req
        offered = RateFunction(traffic.start, traffic.bin_s, traffic.rate / cap)
        period = hpa.period_s
        ticks = start + period * np.arange(1, math.floor((self.horizon - start) / period + 1e-9) + 1)
        lo = np.maximum(ticks - hpa.window, start)
        load = offered.mean(lo, ticks)
        schedule = autoscale(ticks, load, min_replicas=spec.min_replicas, max_replicas=spec.max_replicas,
                             config=hpa, start=start)
        return ServiceRun(i, spec, hpa, rows, traffic, cap, schedule)

    # --- running -----------------------------------------------------------------------------------
    def attach(self, sim: Simulator) -> None:
        """Hook the driver into a simulator built on :attr:`jobs` with ``held=driver.held``."""
        if sim.jobs is not self.jobs:
            raise ValueError("the simulator must run the driver's job table (driver.jobs)")
        self.sim = sim
        sim.scheduler.framework.listeners.append(self.log)
        for action in sim.scheduler.actions:
            if isinstance(action, InferenceReclaim) and action.checkpoint_interval_s is None:
                action.checkpoint_interval_s = sim.execution.checkpoint_interval_s
        if self._events:
            sim.add_process(self._process, self._events[0][0])

    def _process(self, sim: Simulator, now: float) -> float | None:
        events = self._events
        while self._ptr < len(events) and events[self._ptr][0] <= now:
            _, svc, target = events[self._ptr]
            self._ptr += 1
            self._scale(sim, self.runs[svc], target)
        return events[self._ptr][0] if self._ptr < len(events) else None

    def _scale(self, sim: Simulator, run: ServiceRun, target: int) -> None:
        active = run.active
        if target > len(active):
            used = set(active)
            for row in run.rows.tolist():
                if len(active) >= target:
                    break
                if row not in used:
                    active.append(row)
                    sim.submit(row)
                    self.scale_ups += 1
        elif target < len(active):
            running = sim.scheduler.running
            starts = [running[row].start if row in running else None for row in active]
            drop = {active[k] for k in scale_down_victims(starts, len(active) - target)}
            for row in drop:
                sim.stop(row)
                self.scale_downs += 1
            run.active = [r for r in active if r not in drop]

    # --- reporting ---------------------------------------------------------------------------------
    def _runs_of(self, run: ServiceRun, end: float) -> tuple[FloatArray, FloatArray, IntArray]:
        """(start, stop, row) of every placement of the service's replicas (stop = ``end`` if still up)."""
        first, last = int(run.rows[0]), int(run.rows[-1])
        open_: dict[int, float] = {}
        starts: list[float] = []
        stops: list[float] = []
        rows: list[int] = []
        for row, t, sign in self.log.events:
            if not first <= row <= last:
                continue
            if sign > 0:
                open_[row] = t
            else:
                s = open_.pop(row)
                starts.append(s)
                stops.append(t)
                rows.append(row)
        for row, s in open_.items():
            starts.append(s)
            stops.append(end)
            rows.append(row)
        return (np.asarray(starts, dtype=np.float64), np.asarray(stops, dtype=np.float64),
                np.asarray(rows, dtype=np.int64))

    def report(self, result: SimResult) -> dict[str, Any]:
        """Inference and co-scheduling metrics of a finished run (JSON-safe; see ``docs/inference.md``)."""
        sim = self.sim
        if sim is None:
            raise ValueError("attach the driver to a simulator and run it first")
        end = max(float(result.end_time), self.horizon)
        lo, hi = self.start, self.horizon
        co = sim.plugin(CoSchedule)
        reclaim = sim.action(InferenceReclaim)
        reclaimed = set(reclaim.reclaim_starts) if reclaim is not None else set()
        extra_delay = reclaim.reclaim_delay_s if reclaim is not None else 0.0
        mode = co.mode if co is not None else "none"
        services: dict[str, dict[str, Any]] = {}
        inf_t: list[FloatArray] = []
        inf_d: list[FloatArray] = []
        tot_req = tot_ok = 0.0
        shortfall_total = 0.0
        for run in self.runs:
            spec = run.spec
            starts, stops, rows = self._runs_of(run, end)
            g = spec.gpus_per_replica
            inf_t += [starts, stops]
            inf_d += [np.full(len(starts), float(g)), np.full(len(stops), -float(g))]
            pbp, pval = _steps(np.concatenate([starts, stops]), np.concatenate([np.ones(len(starts)),
                                                                                 -np.ones(len(stops))]))
            # replicas placed at the service's start were already up; others need their start-up delay
            # (plus the reclaim delay when they were started by reclaiming)
            delay = np.array([0.0 if s <= spec.start_s else
                              spec.startup_delay_s + (extra_delay if (int(r), float(s)) in reclaimed else 0.0)
                              for r, s in zip(rows.tolist(), starts.tolist(), strict=True)], dtype=np.float64)
            ready_at = starts + delay
            became = ready_at < stops
            rbp, rval = _steps(np.concatenate([ready_at[became], stops[became]]),
                               np.concatenate([np.ones(int(became.sum())), -np.ones(int(became.sum()))]))
            slo = self._slo(run, rbp, rval, lo, hi)
            lag = spec.startup_delay_s + (extra_delay if mode != "separate" and reclaim is not None else 0.0)
            short, longest = self._shortfall(run, rbp, rval, lag, lo, hi)
            shortfall_total += short
            tot_req += slo["requests"]
            tot_ok += slo["requests_within_slo"]
            replica_s = _integral(pbp, pval, lo, hi)
            dval = run.schedule.replicas.astype(np.float64)
            services[spec.name] = {
                **slo,
                "gpus_per_replica": g,
                "replica_hours": replica_s / 3600.0,
                "ready_replica_hours": _integral(rbp, rval, lo, hi) / 3600.0,
                "desired_replica_hours": _integral(run.schedule.times, dval, lo, hi) / 3600.0,
                "gpu_hours": replica_s * g / 3600.0,
                "mean_rps": float(run.traffic.rate.mean()),
                "peak_rps": float(run.traffic.rate.max()),
                "peak_desired_replicas": int(run.schedule.replicas.max()),
                "hpa_ticks": run.schedule.ticks,
                "hpa_changes": len(run.schedule.times) - 1,
                "replica_starts": len(starts),
                "started_by_reclaim": sum(1 for r, s in zip(rows.tolist(), starts.tolist(), strict=True)
                                          if (int(r), float(s)) in reclaimed),
                "shortfall_s": short,
                "longest_shortfall_s": longest,
            }
        # cluster-wide GPU accounting over the traffic window
        ibp, ival = _steps(np.concatenate(inf_t) if inf_t else np.zeros(0),
                           np.concatenate(inf_d) if inf_d else np.zeros(0))
        times = np.asarray(result.times, dtype=np.float64)
        alloc = np.asarray(result.series["allocated_gpus"], dtype=np.float64)
        grid = np.unique(np.concatenate([times, ibp, [lo]]))
        total_alloc = _value_at(times, alloc, grid)
        inf_alloc = _value_at(ibp, ival, grid)
        train_alloc = total_alloc - inf_alloc
        total = float(self.cluster.total_gpus)
        share = float(co.training_share) if co is not None else training_share(
            total, [(r.spec.max_replicas, r.spec.gpus_per_replica) for r in self.runs])
        covered = hi - lo
        training = self.jobs.kind == JobKind.TRAINING
        return {
            "mode": mode,
            "window": [lo, hi],
            "pool_gpus": int(total - share),
            "training_share_gpus": int(share),
            "headroom_gpus": co.headroom() if co is not None else 0,
            "slo_attainment": tot_ok / tot_req if tot_req > 0 else None,
            "requests": tot_req,
            "replica_hours": sum(s["replica_hours"] for s in services.values()),
            "gpu_hours_inference": _integral(grid, inf_alloc, lo, hi) / 3600.0,
            "gpu_hours_training": _integral(grid, train_alloc, lo, hi) / 3600.0,
            "gpu_hours_loaned": _integral(grid, loaned_gpus(train_alloc, share), lo, hi) / 3600.0,
            "training_gpu_share": _integral(grid, train_alloc, lo, hi) / (total * covered) if covered > 0 else None,
            "inference_gpu_share": _integral(grid, inf_alloc, lo, hi) / (total * covered) if covered > 0 else None,
            "reclaims": reclaim.reclaims if reclaim is not None else 0,
            "reclaim_victims": reclaim.victims if reclaim is not None else 0,
            "gpus_reclaimed": reclaim.gpus_reclaimed if reclaim is not None else 0,
            "gpu_hours_lost_to_reclaim": reclaim.lost_gpu_seconds / 3600.0 if reclaim is not None else 0.0,
            "training_preemptions": int(result.preemptions[training].sum()),
            "headroom_rejections": co.headroom_rejections if co is not None else 0,
            "shortfall_s": shortfall_total,
            "scale_ups": self.scale_ups,
            "scale_downs": self.scale_downs,
            "services": services,
        }

    def _slo(self, run: ServiceRun, rbp: FloatArray, rval: FloatArray, lo: float, hi: float) -> dict[str, Any]:
        spec, tr = run.spec, run.traffic
        a = max(lo, tr.start)
        b = min(hi, tr.end)
        edges = tr.edges
        inner = rbp[(rbp > a) & (rbp < b)]
        pts = np.unique(np.concatenate([edges[(edges > a) & (edges < b)], inner, [a, b]]))
        seg_lo, seg_hi = pts[:-1], pts[1:]
        k = tr.bin_of(seg_lo)
        lam = tr.rate[k]
        ready = _value_at(rbp, rval, seg_lo).astype(np.int64)
        att = attainment(lam, ready, run.capacity_rps[k], spec.concurrency, spec.slo_ms / 1000.0, spec.slo_metric)
        req = lam * (seg_hi - seg_lo)
        n_req = float(req.sum())
        ok = float(np.dot(req, att))
        day = np.floor((seg_lo - a) / 86_400.0).astype(np.int64)
        per_day_req = np.bincount(day, weights=req)
        per_day_ok = np.bincount(day, weights=req * att)
        has = per_day_req > 0
        daily = per_day_ok[has] / per_day_req[has]
        overloaded = (lam > 0) & (lam >= ready * run.capacity_rps[k])
        return {
            "slo_attainment": ok / n_req if n_req > 0 else None,
            "slo_attainment_worst_day": float(daily.min()) if daily.size else None,
            "requests": n_req,
            "requests_within_slo": ok,
            "overloaded_s": float((seg_hi - seg_lo)[overloaded].sum()),
        }

    def _shortfall(self, run: ServiceRun, rbp: FloatArray, rval: FloatArray, lag: float, lo: float,
                   hi: float) -> tuple[float, float]:
        """Seconds in ``[lo, hi]`` when ready replicas are below the lagged need, the fewest replicas the
        autoscaler wanted over the last ``lag`` seconds (its wish may take the start-up delay, plus the
        reclaim delay, to be ready), and the longest such stretch."""
        st = run.schedule.times
        sv = run.schedule.replicas.astype(np.float64)
        pts = np.unique(np.concatenate([st, st + lag, rbp, [lo, hi]]))
        pts = pts[(pts >= lo) & (pts <= hi)]
        if len(pts) < 2:
            return 0.0, 0.0
        seg = pts[:-1]
        # need(t) = min of desired over [t - lag, t]: desired at t - lag and every change in (t - lag, t]
        need = _value_at(st, sv, seg - lag, before=0.0)
        first = np.searchsorted(st, seg - lag, side="right")
        last = np.searchsorted(st, seg, side="right")
        for k in np.flatnonzero(last > first).tolist():
            need[k] = min(need[k], float(sv[first[k]:last[k]].min()))
        ready = _value_at(rbp, rval, seg)
        bad = ready < need - 1e-9
        widths = np.diff(pts)
        total = float(widths[bad].sum())
        longest = 0.0
        cur = 0.0
        for b, w in zip(bad.tolist(), widths.tolist(), strict=True):
            cur = cur + w if b else 0.0
            longest = max(longest, cur)
        return total, longest


def _default_loader() -> LoadFn:
    from kant.traces.registry import load_load

    return load_load


def simulate_with_services(
    cluster: Cluster,
    training: JobTable,
    policy: Policy,
    services: ServicesConfig,
    *,
    seed: int = 0,
    execution: ExecutionModel | None = None,
    check_every: int = 0,
    progress: Callable[[int, int], None] | None = None,
    load: LoadFn | None = None,
) -> tuple[SimResult, InferenceDriver, Simulator]:
    """Run a training trace and a services file together; the inference metrics are in
    ``result.info["inference"]``."""
    driver = InferenceDriver(services, training, cluster, load=load)
    sim = Simulator(cluster, driver.jobs, policy, seed=seed, execution=execution, check_every=check_every,
                    progress=progress, held=driver.held)
    driver.attach(sim)
    result = sim.run()
    result.info["inference"] = driver.report(result)
    result.info["services_file"] = services.source
    return result, driver, sim


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f} %"


def inference_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """Headline rows ``(label, value)`` of an inference report, for the CLI tables."""
    rows = [
        ("Co-scheduling mode", str(report["mode"])),
        ("Inference SLO attainment", _pct(report["slo_attainment"])),
    ]
    for name, s in report["services"].items():
        worst = _pct(s["slo_attainment_worst_day"])
        rows.append((f"  SLO {name} (worst day)", f"{_pct(s['slo_attainment'])} ({worst})"))
    rows += [
        ("Inference replica-hours", f"{report['replica_hours']:,.0f}"),
        ("Training GPU share / inference GPU share", f"{_pct(report['training_gpu_share'])} / "
                                                      f"{_pct(report['inference_gpu_share'])}"),
        ("GPU-hours loaned to training", f"{report['gpu_hours_loaned']:,.0f}"),
        ("Reclaims (replicas) / GPUs reclaimed", f"{report['reclaims']:,} / {report['gpus_reclaimed']:,}"),
        ("Training GPU-hours lost to reclaim", f"{report['gpu_hours_lost_to_reclaim']:,.0f}"),
        ("Training preemptions", f"{report['training_preemptions']:,}"),
        ("Replica shortfall beyond start-up", f"{report['shortfall_s']:,.0f} s"),
    ]
    return rows
