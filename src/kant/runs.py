"""Simulations as use cases: load a run's inputs by name and simulate it (:func:`run`), run several in
worker processes (:func:`run_all`), and write what ``kant simulate`` and ``kant compare`` leave in their
folder (:func:`write_run`, :func:`write_comparison`).

The CLI (``kant simulate``, ``kant compare``) and a study's runs (:mod:`kant.sweep.runs`) call these: the
CLI parses options and prints, a sweep plans runs and stores their results, and the loading, simulating
and summarising of one run is written here once. A :class:`RunSpec` is plain data (picklable), so the
same run goes to a worker process or a Ray task as it is.

Importing this module costs nothing: everything a run needs is imported when it runs, with the cyclic
garbage collector off (:func:`loading`), which is what keeps ``kant --version`` and ``kant simulate``'s
start-up short.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kant.errors import KantError

if TYPE_CHECKING:
    from kant.metrics.recorder import SimResult
    from kant.metrics.summary import Metrics
    from kant.sim import Simulator

__all__ = ["Labelled", "Run", "RunSpec", "check_inputs", "labelled", "loading", "per_policy", "run", "run_all",
           "simulating", "write_comparison", "write_run"]


@dataclass(frozen=True)
class RunSpec:
    """Everything one simulation needs, picklable so a worker process can run it."""

    trace: str
    cluster: str
    policy: str
    seed: int
    skip_invalid: bool
    limit: int | None
    cross_leaf_penalty: float
    cross_spine_penalty: float
    restart_cost_s: float
    checkpoint_interval_s: float | None
    check_every: int
    services: str | None = None  # services YAML (inference next to the training trace)
    jobs_out: str | None = None  # per-job results Parquet written by the run (kant.metrics.jobs)
    policy_doc: dict[str, Any] | None = None  # a resolved policy mapping used instead of loading `policy`
    queues: str | None = None  # queues YAML applied to the policy (kant.plugins.queues.with_queues)
    resize_cost_s: float = 30.0  # what a resize of an elastic job costs (kant.sim.execution.ExecutionModel)


@dataclass(frozen=True)
class Run:
    """A finished run: what the simulator recorded, its metrics, and the trace rows dropped
    (``Problems.summary()``: what ``--skip-invalid`` left out)."""

    result: SimResult
    metrics: Metrics
    dropped: str


#: a run as a comparison names it, with its result and metrics
Labelled = tuple[str, "SimResult", "Metrics"]


@contextmanager
def loading() -> Iterator[None]:
    """Loading a run's modules and inputs with the cyclic garbage collector off, then freezing
    everything loaded (:func:`gc.freeze`): it lives as long as the run, so collecting it finds
    nothing. Collections during imports, and the full collections the simulation triggers walking
    every module object, took about 0.05 s of a 1,000-job run's 0.5. The simulator is built in such
    a block too: its job store's per-job lists (82,247 entries each on the whole Philly trace) were
    walked by every full collection of the run."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


#: the cyclic collector's first threshold while a run simulates (CPython's default is 700), see :func:`simulating`
RUN_GEN0 = 5_000


@contextmanager
def simulating() -> Iterator[None]:
    """The simulation with the collector's youngest generation collected after ``RUN_GEN0`` net new
    container objects instead of 700 (restored after; a threshold already above it, or 0, automatic
    collection off, is kept). A run's deaths of older objects (finished jobs' placements, popped
    events) offset its births in that count, so by the time it reaches 700 the young generation holds
    thousands of live objects (queue keys, event tuples, placements) and each collection walks them
    all (docs/performance.md, step 18: on the README default 146 collections took about 0.16 s of the
    run's 4.1, with 5,000 three took 0.003 s). Cyclic garbage waits at most 5,000 objects longer."""
    old = gc.get_threshold()
    if 0 < old[0] < RUN_GEN0:
        gc.set_threshold(RUN_GEN0, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def run(spec: RunSpec, progress: Callable[[int, int], None] | None = None) -> Run:
    """Load the inputs ``spec`` names and simulate them; ``progress(arrived, total)`` hears the jobs
    arrive. Writes the per-job results to ``spec.jobs_out`` when it is set. Every bad input is a
    :class:`~kant.errors.KantError`."""
    with loading():
        from kant.config import load_policy
        from kant.metrics.summary import summarize
        from kant.sim import ExecutionModel, Simulator
        from kant.traces import Problems
        from kant.traces.registry import load_nodes, load_trace

        if spec.policy_doc is not None:
            from kant.config import parse_policy

            policy = parse_policy(spec.policy_doc, spec.policy)
        else:
            policy = load_policy(spec.policy)
        if spec.queues is not None:
            from kant.plugins.queues import load_queues, with_queues

            policy = with_queues(policy, load_queues(spec.queues))
        cluster = load_nodes(spec.cluster)
        problems = Problems(skip=spec.skip_invalid)
        jobs = load_trace(spec.trace, problems=problems, limit=spec.limit)
    try:
        execution = ExecutionModel(
            cross_leaf_penalty=spec.cross_leaf_penalty,
            cross_spine_penalty=spec.cross_spine_penalty,
            restart_cost_s=spec.restart_cost_s,
            checkpoint_interval_s=spec.checkpoint_interval_s,
            resize_cost_s=spec.resize_cost_s,
        )
    except ValueError as exc:
        raise KantError(f"execution model: {exc}") from None
    if spec.services is not None:
        from kant.inference.services import load_services
        from kant.inference.unified import simulate_with_services

        with simulating():
            result, _, sim = simulate_with_services(cluster, jobs, policy, load_services(spec.services),
                                                    seed=spec.seed, execution=execution,
                                                    check_every=spec.check_every, progress=progress)
    else:
        with loading():  # the simulator's store, queue and recorder live as long as the run too
            sim = Simulator(cluster, jobs, policy, seed=spec.seed, execution=execution, check_every=spec.check_every,
                            progress=progress)
        with simulating():
            result = sim.run()
    result.info["policy_file"] = policy.source
    result.info["trace"] = spec.trace
    result.info["cluster"] = spec.cluster
    result.info["cluster_description"] = cluster.describe()
    estimates = _estimates_of(sim)
    metrics = summarize(result, estimates=estimates)
    if spec.jobs_out is not None:
        from kant.metrics.jobs import write_jobs

        write_jobs(spec.jobs_out, result, estimates)
    if spec.services is not None:
        from kant.inference.unified import inference_rows

        report: dict[str, Any] = result.info.pop("inference")  # type: ignore[assignment]
        metrics = metrics.with_extra("inference", report, tuple(inference_rows(report)))
    return Run(result, metrics, problems.summary())


def _estimates_of(sim: Simulator) -> Any:
    """Estimates a policy's runtime estimator made, if it has one (for JTTED)."""
    from kant.plugins.estimator import RuntimeEstimator, estimates_used

    return estimates_used(sim) if sim.plugin(RuntimeEstimator) is not None else None


def run_all(specs: Sequence[RunSpec], workers: int | None = None, done: Callable[[], None] | None = None) -> list[Run]:
    """Run every spec, in ``workers`` processes (default: one per core, at most one per spec; one: here, one
    after the other); ``done()`` is called as each run finishes. The runs come back in the order of ``specs``;
    the first error ends the call."""
    n = workers or min(len(specs), os.cpu_count() or 1)
    runs: list[Run] = []
    if n == 1:
        for spec in specs:
            runs.append(run(spec))
            if done is not None:
                done()
        return runs
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=n) as pool:
        for finished in pool.map(run, specs):
            runs.append(finished)
            if done is not None:
                done()
    return runs


def check_inputs(policies: Sequence[str], services: str | None, queues: str | None = None) -> None:
    """Load each policy file, the services file and the queues file once (the queues applied to each
    policy), so a bad one fails before any run starts."""
    from kant.config import load_policy

    tree = None
    if queues is not None:
        from kant.plugins.queues import load_queues, with_queues

        tree = load_queues(queues)
    for p in policies:
        policy = load_policy(p)
        if tree is not None:
            with_queues(policy, tree)
    if services:
        from kant.inference.services import load_services

        load_services(services)


def per_policy(spec: RunSpec, policies: Sequence[str], jobs_dir: Path) -> list[RunSpec]:
    """``spec`` under each policy, each writing its per-job results to ``jobs_dir/<policy file's stem>.parquet``
    (``<i>-<stem>`` when two stems are alike)."""
    stems = [Path(p).stem for p in policies]
    names = stems if len(set(stems)) == len(stems) else [f"{i + 1}-{s}" for i, s in enumerate(stems)]
    return [replace(spec, policy=p, jobs_out=str(jobs_dir / f"{name}.parquet"))
            for p, name in zip(policies, names, strict=True)]


def labelled(specs: Sequence[RunSpec], runs: Sequence[Run]) -> list[Labelled]:
    """Each run with its label in a comparison: the policy's name, and the file it was read from when
    that is not its name (``mine (mine.yaml)``; the file's name only: no path in a report)."""
    labels = [run_label(r.result.policy, spec.policy) for spec, r in zip(specs, runs, strict=True)]
    if len(set(labels)) < len(labels):  # (two files of one name: told apart as given)
        labels = [f"{r.result.policy} ({spec.policy})" for spec, r in zip(specs, runs, strict=True)]
    return [(label, r.result, r.metrics) for label, r in zip(labels, runs, strict=True)]


def run_label(name: str, given: str) -> str:
    """``name`` (a bundled policy given by its name), or ``name (file)`` for a policy read from a file."""
    return name if given == name else f"{name} ({Path(given).name})"


def write_run(out_dir: Path, finished: Run, *, report: bool = True) -> tuple[Path, Path | None]:
    """``out_dir/result.json`` and (``report``) ``out_dir/report.html`` of one run; their paths."""
    from kant.metrics.report import write_html, write_json

    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = write_json(out_dir / "result.json", finished.result, finished.metrics)
    html_path = write_html(out_dir / "report.html", finished.result, finished.metrics) if report else None
    return json_path, html_path


def write_comparison(out_dir: Path, runs: Sequence[Labelled]) -> tuple[Path, Path, Path]:
    """``comparison.html``, ``comparison.csv`` and ``comparison.json`` (each run's report under its label) in
    ``out_dir``; their paths."""
    from kant.metrics.report import report_dict, write_comparison_csv, write_comparison_html

    out_dir.mkdir(parents=True, exist_ok=True)
    html_path = write_comparison_html(out_dir / "comparison.html", runs)
    csv_path = write_comparison_csv(out_dir / "comparison.csv", runs)
    json_path = out_dir / "comparison.json"
    json_path.write_text(
        json.dumps({label: report_dict(r, m) for label, r, m in runs}, indent=2, sort_keys=True,
                   allow_nan=False) + "\n",
        encoding="utf-8",
    )
    return html_path, csv_path, json_path
