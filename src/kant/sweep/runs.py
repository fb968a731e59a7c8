"""The runs of a study: their inputs, their keys, and running one (in any process, on any Ray node).

The driver prepares each trace once (read, transformed, limited) into a kant Parquet file in the
study folder; a run refers to its inputs as :class:`InputFile` (path and SHA-256 of the bytes), so a
Ray worker on another machine can receive the bytes and write its own copy. A run's key is the
SHA-256 of everything that decides its result: the trace's bytes, the resolved policy, the cluster
(its file's bytes when it is a file), the services file's bytes, the penalties, restart cost,
checkpoint interval, seed, and the kant version.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kant.errors import ConfigError, KantError
from kant.runs import RunSpec, run
from kant.sweep.study import Study, StudyPoint, TraceInput

__all__ = ["InputFile", "RunOutcome", "RunTask", "execute", "materialise", "plan_runs", "prepare_trace"]


@dataclass(frozen=True)
class InputFile:
    """A file a run reads: its path on the driver, its name and the SHA-256 of its bytes."""

    path: str
    digest: str

    @classmethod
    def of(cls, path: str | Path) -> InputFile:
        p = Path(path)
        return cls(str(p), hashlib.sha256(p.read_bytes()).hexdigest())


@dataclass(frozen=True)
class RunTask:
    """One run, picklable: what a worker needs and the values that label it in the results table."""

    key: str
    params: dict[str, Any]  # policy, trace, cluster, services, penalties, seed: the table's first columns
    trace: InputFile
    cluster: str | InputFile  # built-in name or spec string, or a file
    services: InputFile | None
    policy_doc: dict[str, Any]  # the resolved policy (Policy.to_dict() with the variant's values)


@dataclass(frozen=True)
class RunOutcome:
    """What a run gives back: the per-run JSON report and the per-job Parquet bytes, or an error."""

    key: str
    report: dict[str, Any] | None
    jobs: bytes | None
    error: str | None = None


def prepare_trace(trace: TraceInput, folder: Path) -> InputFile:
    """Read a study trace, apply its transforms and limit, write it to ``folder`` as kant Parquet."""
    import numpy as np

    from kant.traces import Problems
    from kant.traces import transforms as tf
    from kant.traces.parquet import write_parquet
    from kant.traces.registry import load_trace

    jobs = load_trace(trace.name, problems=Problems(skip=trace.skip_invalid))
    if trace.window is not None:
        jobs = tf.window(jobs, *trace.window)
    if trace.sample is not None:
        jobs = tf.sample(jobs, fraction=trace.sample, seed=trace.seed)
    if trace.scale_load is not None:
        jobs = tf.scale_load(jobs, trace.scale_load)
    if trace.tenants_top is not None:
        jobs = tf.tenants_from_vcs(jobs, top=trace.tenants_top)
    if trace.resize_mean is not None:
        jobs = tf.resize_gangs(jobs, trace.resize_mean, seed=trace.seed, preserve_gpu_time=trace.preserve_gpu_time)
    if trace.limit is not None:
        jobs = jobs.take(np.arange(min(trace.limit, len(jobs))))
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in trace.label)
    digest = hashlib.sha256(trace.label.encode()).hexdigest()[:8]
    return InputFile.of(write_parquet(jobs, folder / f"trace-{safe}-{digest}.parquet"))


def run_key(point: StudyPoint, trace: InputFile, cluster: str | InputFile, services: InputFile | None) -> str:
    """SHA-256 (hex) of everything that decides a run's result."""
    from kant import __version__

    ident = {
        "kant": __version__,
        "trace": trace.digest,
        "policy": point.policy.doc,
        "cluster": cluster if isinstance(cluster, str) else {"suffix": Path(cluster.path).suffix,
                                                             "sha256": cluster.digest},
        "services": None if services is None else services.digest,
        "seed": point.seed,
        "cross_leaf_penalty": point.cross_leaf_penalty,
        "cross_spine_penalty": point.cross_spine_penalty,
        "restart_cost": point.restart_cost,
        "checkpoint_interval": point.checkpoint_interval,
    }
    text = json.dumps(ident, sort_keys=True, separators=(",", ":"))  # inf args (no limit) as Infinity
    return hashlib.sha256(text.encode()).hexdigest()


def plan_runs(study: Study, inputs: Path) -> list[RunTask]:
    """Prepare the study's traces into ``inputs`` and list its runs in grid order."""
    traces: dict[str, InputFile] = {}
    for i, t in enumerate(study.traces):
        try:
            traces[t.label] = prepare_trace(t, inputs)
        except KantError as exc:  # an unreadable trace or a transform that does not apply: name the entry
            raise ConfigError(study.source, f"traces[{i}]", str(exc)) from None
    clusters: dict[str, str | InputFile] = {
        c: InputFile.of(c) if Path(c).is_file() else c for c in study.clusters
    }
    services = {s: InputFile.of(s) for s in study.services if s is not None}
    tasks: list[RunTask] = []
    for point in study.points():
        trace = traces[point.trace.label]
        cluster = clusters[point.cluster]
        svc = None if point.services is None else services[point.services]
        params = {
            "policy": point.policy.label,
            "trace": point.trace.label,
            "cluster": study.label(point.cluster),
            "services": "" if point.services is None else study.label(point.services),
            "cross_leaf_penalty": point.cross_leaf_penalty,
            "cross_spine_penalty": point.cross_spine_penalty,
            "restart_cost": point.restart_cost,
            "checkpoint_interval": point.checkpoint_interval,
            "seed": point.seed,
        }
        key = run_key(point, trace, cluster, svc)
        tasks.append(RunTask(key, params, trace, cluster, svc, point.policy.doc))
    return tasks


def materialise(file: InputFile, data: bytes | None = None) -> str:
    """A local path holding ``file``'s bytes: its own path without ``data`` (a local process), else a copy
    written from ``data`` into a cache folder keyed by the digest (a Ray worker, maybe on another node)."""
    p = Path(file.path)
    if data is None:
        return str(p)
    cache = Path(tempfile.gettempdir()) / "kant-sweep-inputs" / file.digest
    target = cache / p.name
    if not target.exists():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = cache / f".{p.name}.{os.getpid()}"
        tmp.write_bytes(data)
        os.replace(tmp, target)
    return str(target)


def execute(task: RunTask, locate: Callable[[InputFile], str] = materialise) -> RunOutcome:
    """Run one simulation; a failure (bad input, a bug) comes back as an outcome with the error."""
    try:
        return _execute(task, locate)
    except KantError as exc:
        return RunOutcome(task.key, None, None, str(exc))
    except Exception as exc:  # a bug in a run must not end the study: report it with where it happened
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return RunOutcome(task.key, None, None,
                          f"{type(exc).__name__}: {exc} ({Path(where.filename).name}:{where.lineno})")


def _execute(task: RunTask, locate: Callable[[InputFile], str]) -> RunOutcome:
    from kant.metrics.report import report_dict

    p = task.params
    with tempfile.TemporaryDirectory(prefix="kant-run-") as tmp:
        jobs_path = Path(tmp) / "jobs.parquet"
        spec = RunSpec(
            trace=locate(task.trace),
            cluster=task.cluster if isinstance(task.cluster, str) else locate(task.cluster),
            policy=p["policy"],
            seed=p["seed"],
            skip_invalid=False,
            limit=None,
            cross_leaf_penalty=p["cross_leaf_penalty"],
            cross_spine_penalty=p["cross_spine_penalty"],
            restart_cost_s=p["restart_cost"],
            checkpoint_interval_s=p["checkpoint_interval"],
            check_every=0,
            services=None if task.services is None else locate(task.services),
            jobs_out=str(jobs_path),
            policy_doc=task.policy_doc,
        )
        finished = run(spec)
        jobs = jobs_path.read_bytes()
    result = finished.result
    # the labels of the study, not the paths this worker read its copies from
    result.info["trace"] = p["trace"]
    result.info["cluster"] = p["cluster"]
    report = report_dict(result, finished.metrics)
    report["trace"] = p["trace"]
    report["study"] = {"key": task.key, **p}
    return RunOutcome(task.key, report, jobs)
