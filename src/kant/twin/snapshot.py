"""A snapshot of a scheduler's live state that the simulator can load and run forward.

:class:`TwinSnapshot` holds what a forward run needs and nothing of the past: the cluster's nodes,
the active jobs (pending and running, in the scheduler's row order, with the estimates it plans
with), the scheduler's own state by row (:class:`~kant.scheduler.SchedulerSnapshot`: the queue,
each running job's nodes, start and expected end, node flags), the effective policy (with the
tenants' quotas folded in), and the run-time error seen so far (``actual / planned`` run time of
finished jobs, with the planned run times and end times: :mod:`kant.twin.ratios` fits them, with the
running jobs as censored ratios). It is plain
data with a JSON form, so a live service can hand it to another process, and a user can save it and
replay it later (``kant whatif --snapshot FILE``).

A snapshot is taken from any :class:`~kant.scheduler.Scheduler` (:meth:`TwinSnapshot.capture`),
the live service's or a simulator's; :meth:`TwinSnapshot.scheduler` loads it back into a new one,
which then decides the same next cycle.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kant.config.policy import Policy, parse_policy
from kant.errors import ConfigError, KantError
from kant.model.cluster import Cluster, NodeSpec
from kant.model.job import JobTable
from kant.model.store import JobStore
from kant.scheduler import Scheduler, SchedulerSnapshot

__all__ = ["TwinSnapshot", "SnapshotError", "SNAPSHOT_VERSION"]

#: the JSON form's version (bumped when a field changes meaning)
SNAPSHOT_VERSION = 1

#: per-job columns of the JSON form: name -> (type, may be null)
_INT_COLS = ("workers", "gpus_per_worker", "gpu_milli", "cpu_milli", "memory_mib", "priority", "kind")
_STR_COLS = ("name", "tenant", "user")


class SnapshotError(KantError):
    """A snapshot that cannot be loaded: names the field and what is wrong."""


@dataclass(frozen=True)
class TwinSnapshot:
    """The live state at ``sched.now`` (see the module docstring). Job ``k`` is row ``k`` of
    ``jobs``, and ``sched`` names jobs by these rows; ``ids[k]`` is the job's id outside (the live
    service's job id, or the simulator's trace row)."""

    nodes: tuple[NodeSpec, ...]
    jobs: Mapping[str, tuple[Any, ...]]  # column -> one value per job (see _INT_COLS, _STR_COLS, below)
    ids: tuple[int, ...]
    sched: SchedulerSnapshot
    policy: Policy
    ratios: tuple[float, ...] = ()  # actual / planned run time of finished jobs, newest last
    seed: int = 0
    info: Mapping[str, Any] = field(default_factory=dict)
    planned: tuple[float, ...] = ()  # the planned run time of each ratio's job (empty: not known)
    tenants: tuple[str, ...] = ()  # the scheduler's tenants, with or without active jobs (quotas name them)
    #: recent arrivals, columns by kant.twin.arrivals.ARRIVAL_COLUMNS (empty: none known): the arrival model's
    #: history
    arrivals: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    ended: tuple[float, ...] = ()  # when each ratio's job ended (empty: not known)
    #: every job that finished after this time has its ratio in ``ratios`` (None: not known; taken as every
    #: job since the running ones started): the history's cut, for kant.twin.ratios's left truncation
    ratios_from: float | None = None

    def __post_init__(self) -> None:
        if self.planned and len(self.planned) != len(self.ratios):
            raise SnapshotError(f"{len(self.ratios)} run-time ratios but {len(self.planned)} planned run times")
        if self.ended and len(self.ended) != len(self.ratios):
            raise SnapshotError(f"{len(self.ratios)} run-time ratios but {len(self.ended)} end times")

    @property
    def now(self) -> float:
        return self.sched.now

    def __len__(self) -> int:
        return len(self.ids)

    # --- taking one -----------------------------------------------------------------------------
    @classmethod
    def capture(cls, sched: Scheduler, now: float, *, ids: Sequence[int] | None = None,
                ratios: Sequence[float] = (), planned: Sequence[float] = (), policy: Policy | None = None,
                info: Mapping[str, Any] | None = None,
                arrivals: Mapping[str, Sequence[Any]] | None = None, ended: Sequence[float] = (),
                ratios_from: float | None = None) -> TwinSnapshot:
        """The state of ``sched`` at ``now``: its pending and running jobs only (rows renumbered in
        their order), the estimate it plans each with (``env.estimate``: a runtime estimator's
        prediction where the policy has one). ``ids`` maps the scheduler's rows to outside ids
        (default: the rows themselves)."""
        snap = sched.snapshot(now)
        rows = sorted({*snap.pending, *snap.running})
        new_row = {r: k for k, r in enumerate(rows)}
        store = sched.jobs
        estimate = sched.env.estimate
        gpu_types, tenants, users = store.gpu_type_names, store.tenant_names, store.user_names
        idx = np.asarray(rows, dtype=np.int64)
        cols: dict[str, tuple[Any, ...]] = {
            "name": tuple(store.names[r] for r in rows),
            "tenant": tuple(tenants[t] for t in store.tenant[idx].tolist()),
            "user": tuple(users[u] for u in store.user[idx].tolist()),
            "gpu_type": tuple(None if g < 0 else gpu_types[g] for g in store.gpu_type[idx].tolist()),
            "submit": tuple(store.submit[idx].tolist()),
            "estimate": tuple(float(estimate(r)) for r in rows),
        }
        for c in _INT_COLS:
            cols[c] = tuple(getattr(store, c)[idx].tolist())
        moved = SchedulerSnapshot(
            now=now,
            pending=tuple(new_row[r] for r in snap.pending),
            running={new_row[r]: rec for r, rec in snap.running.items()},
            node_flags=snap.node_flags,
            bind_failures={new_row[r]: w for r, w in snap.bind_failures.items() if r in new_row},
        )
        cluster = sched.cluster
        nodes = tuple(NodeSpec(cluster.names[i], cluster.gpu_type_names[int(cluster.gpu_type[i])], int(cluster.gpus[i]),
                               int(cluster.cpu_milli[i]), int(cluster.memory_mib[i]),
                               cluster.leaf_names[int(cluster.leaf[i])], cluster.spine_names[int(cluster.spine[i])])
                      for i in range(cluster.n_nodes))
        out_ids = tuple(rows if ids is None else (int(ids[r]) for r in rows))
        return cls(nodes, cols, out_ids, moved, policy or sched.policy, tuple(float(r) for r in ratios),
                   sched.seed, dict(info or {}), tuple(float(x) for x in planned), tuple(tenants),
                   {c: tuple(v) for c, v in (arrivals or {}).items()}, tuple(float(x) for x in ended),
                   None if ratios_from is None else float(ratios_from))

    # --- using one ------------------------------------------------------------------------------
    def cluster(self) -> Cluster:
        return Cluster.from_nodes(list(self.nodes))

    def table(self, duration: Sequence[float] | np.ndarray | None = None) -> JobTable:
        """The active jobs as a job table (rows as in the snapshot). ``duration`` is what a forward
        run takes as each job's true run time (default: its estimate)."""
        c = self.jobs
        n = len(self.ids)

        def vocab(values: Sequence[Any]) -> tuple[tuple[str, ...], np.ndarray]:
            names = tuple(sorted({v for v in values if v is not None}))
            code = {v: i for i, v in enumerate(names)}
            return names, np.asarray([-1 if v is None else code[v] for v in values], dtype=np.int64)

        gpu_names, gpu_codes = vocab(c["gpu_type"])
        tenant_names, tenant_codes = vocab([*c["tenant"], *self.tenants])
        tenant_codes = tenant_codes[:n]
        user_names, user_codes = vocab(c["user"])
        est = np.asarray(c["estimate"], dtype=np.float64)
        dur = est.copy() if duration is None else np.asarray(duration, dtype=np.float64)
        if dur.shape != (n,):
            raise SnapshotError(f"{n} jobs but {dur.shape[0]} durations")
        def ints(col: str) -> np.ndarray:
            return np.asarray(c[col], dtype=np.int64)

        return JobTable(names=tuple(c["name"]), submit=np.asarray(c["submit"], dtype=np.float64), duration=dur,
                        workers=ints("workers"), gpus_per_worker=ints("gpus_per_worker"), gpu_milli=ints("gpu_milli"),
                        cpu_milli=ints("cpu_milli"), memory_mib=ints("memory_mib"), gpu_type=gpu_codes,
                        priority=ints("priority"), tenant=tenant_codes, user=user_codes, estimate=est,
                        kind=ints("kind"), gpu_type_names=gpu_names, tenant_names=tenant_names or ("default",),
                        user_names=user_names or ("default",), source="twin")

    def scheduler(self, policy: Policy | None = None, cluster: Cluster | None = None) -> Scheduler:
        """A new scheduler in this state (the live one's next cycle, if nothing changes)."""
        return Scheduler.from_snapshot(policy or self.policy, cluster or self.cluster(),
                                       JobStore.from_table(self.table()), self.sched, seed=self.seed)

    # --- JSON -----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        jobs = {col: list(values) for col, values in self.jobs.items()}
        jobs["estimate"] = [None if math.isinf(x) else x for x in self.jobs["estimate"]]
        return {
            "version": SNAPSHOT_VERSION,
            "nodes": [{"name": n.name, "gpu_type": n.gpu_type, "gpus": n.gpus, "cpu_milli": n.cpu_milli,
                       "memory_mib": n.memory_mib, "leaf": n.leaf, "spine": n.spine} for n in self.nodes],
            "jobs": {"id": list(self.ids), **jobs},
            "scheduler": self.sched.to_dict(),
            "policy": self.policy.to_dict(),
            "ratios": list(self.ratios),
            "planned": list(self.planned),
            "ended": list(self.ended),
            "ratios_from": self.ratios_from if self.ratios_from is None or math.isfinite(self.ratios_from) else None,
            "tenants": list(self.tenants),
            "arrivals": {c: list(v) for c, v in self.arrivals.items()},
            "seed": self.seed,
            "info": dict(self.info),
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "<snapshot>") -> TwinSnapshot:
        """Load the JSON form; a malformed one raises :class:`SnapshotError` naming the field."""
        return _parse(data, source)


# --- parsing the JSON form ------------------------------------------------------------------------
def _need(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise SnapshotError(f"{where}: missing field {key!r}")
    value = data[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise SnapshotError(f"{where}.{key}: expected {_kind_name(kind)}, got {type(value).__name__}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({dict: "an object", list: "a list", int: "an integer", float: "a number",
                        str: "a string"}.get(k, k.__name__) for k in kinds)


def _parse(data: Any, source: str) -> TwinSnapshot:
    if not isinstance(data, Mapping):
        raise SnapshotError(f"{source}: a snapshot is a JSON object")
    version = _need(data, "version", int, source)
    if version != SNAPSHOT_VERSION:
        raise SnapshotError(f"{source}.version: {version} is not supported (this kant reads {SNAPSHOT_VERSION})")
    nodes = []
    for i, raw in enumerate(_need(data, "nodes", list, source)):
        where = f"{source}.nodes[{i}]"
        if not isinstance(raw, Mapping):
            raise SnapshotError(f"{where}: expected an object")
        gpus = _need(raw, "gpus", int, where)
        if gpus < 0:
            raise SnapshotError(f"{where}.gpus: must be >= 0, got {gpus}")
        nodes.append(NodeSpec(_need(raw, "name", str, where), _need(raw, "gpu_type", str, where), gpus,
                              int(raw.get("cpu_milli", 0)), int(raw.get("memory_mib", 0)), raw.get("leaf"),
                              raw.get("spine")))
    if len({n.name for n in nodes}) != len(nodes):
        raise SnapshotError(f"{source}.nodes: node names repeat")
    jobs_raw = _need(data, "jobs", dict, source)
    ids = _need(jobs_raw, "id", list, f"{source}.jobs")
    n = len(ids)
    cols: dict[str, tuple[Any, ...]] = {}
    specs: list[tuple[str, type | tuple[type, ...]]] = [(c, int) for c in _INT_COLS]
    specs += [(c, str) for c in _STR_COLS]
    specs += [("submit", (int, float)), ("estimate", (int, float)), ("gpu_type", str)]
    for col, kind in specs:
        values = _need(jobs_raw, col, list, f"{source}.jobs")
        if len(values) != n:
            raise SnapshotError(f"{source}.jobs.{col}: {len(values)} values for {n} jobs")
        for k, v in enumerate(values):
            nullable = col in ("estimate", "gpu_type")
            if (v is None and not nullable) or (v is not None and (not isinstance(v, kind) or isinstance(v, bool))):
                raise SnapshotError(f"{source}.jobs.{col}[{k}]: expected {_kind_name(kind)}, got {v!r}")
        if col == "estimate":
            values = [math.inf if v is None else float(v) for v in values]
            if any(not v >= 0 for v in values):
                raise SnapshotError(f"{source}.jobs.estimate: estimates must be >= 0")
        if col in ("workers", "gpus_per_worker") and any(v < (1 if col == "workers" else 0) for v in values):
            raise SnapshotError(f"{source}.jobs.{col}: a value is out of range")
        cols[col] = tuple(values)
    try:
        sched = SchedulerSnapshot.from_dict(_need(data, "scheduler", dict, source))
    except (KeyError, TypeError, ValueError) as exc:
        raise SnapshotError(f"{source}.scheduler: malformed ({exc})") from None
    for row in (*sched.pending, *sched.running):
        if not 0 <= row < n:
            raise SnapshotError(f"{source}.scheduler: names job row {row}, but the snapshot has {n} jobs")
    try:
        policy = parse_policy(_need(data, "policy", dict, source), f"{source}.policy")
    except ConfigError as exc:
        raise SnapshotError(str(exc)) from None
    ratios = _need(data, "ratios", list, source) if "ratios" in data else []
    if any(isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0 for r in ratios):
        raise SnapshotError(f"{source}.ratios: run-time ratios must be positive numbers")
    planned = _need(data, "planned", list, source) if "planned" in data else []
    if any(isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0 for x in planned):
        raise SnapshotError(f"{source}.planned: planned run times must be positive numbers")
    if planned and len(planned) != len(ratios):
        raise SnapshotError(f"{source}.planned: {len(planned)} planned run times for {len(ratios)} ratios")
    ended = _need(data, "ended", list, source) if "ended" in data else []
    if any(isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) for x in ended):
        raise SnapshotError(f"{source}.ended: end times must be numbers")
    if ended and len(ended) != len(ratios):
        raise SnapshotError(f"{source}.ended: {len(ended)} end times for {len(ratios)} ratios")
    since = data.get("ratios_from")
    if since is not None and (isinstance(since, bool) or not isinstance(since, (int, float))
                              or not math.isfinite(since)):
        raise SnapshotError(f"{source}.ratios_from: must be a number or null")
    tenants = _need(data, "tenants", list, source) if "tenants" in data else []
    if not all(isinstance(t, str) for t in tenants):
        raise SnapshotError(f"{source}.tenants: tenant names must be strings")
    info = data.get("info", {})
    arrivals = _arrivals(data.get("arrivals") or {}, f"{source}.arrivals")
    return TwinSnapshot(tuple(nodes), cols, tuple(int(i) for i in ids), sched, policy,
                        tuple(float(r) for r in ratios), int(data.get("seed", 0)),
                        info if isinstance(info, dict) else {}, tuple(float(x) for x in planned), tuple(tenants),
                        arrivals, tuple(float(x) for x in ended), None if since is None else float(since))


def _arrivals(raw: Any, where: str) -> dict[str, tuple[Any, ...]]:
    """The arrival history's columns (kant.twin.arrivals.ARRIVAL_COLUMNS), checked."""
    from kant.twin.arrivals import ARRIVAL_COLUMNS

    if not isinstance(raw, Mapping):
        raise SnapshotError(f"{where}: expected an object of columns")
    if not raw:
        return {}
    n = None
    out: dict[str, tuple[Any, ...]] = {}
    for col in ARRIVAL_COLUMNS:
        values = _need(raw, col, list, where)
        if n is None:
            n = len(values)
        elif len(values) != n:
            raise SnapshotError(f"{where}.{col}: {len(values)} values for {n} arrivals")
        for k, v in enumerate(values):
            if col in ("tenant", "user"):
                ok = isinstance(v, str)
            elif col == "gpu_type":
                ok = v is None or isinstance(v, str)
            elif col in ("submit", "estimate"):
                ok = (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                      and (col == "submit" or v >= 0))
            else:
                ok = isinstance(v, int) and not isinstance(v, bool)
            if not ok:
                raise SnapshotError(f"{where}.{col}[{k}]: {v!r} is not a valid value")
        out[col] = tuple(values)
    return out
