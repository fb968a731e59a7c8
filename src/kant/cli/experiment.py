"""``kant experiment``: reproduce published experiments.

``kant experiment fgd``: the FGD paper's allocation experiment on the Alibaba openb trace (see
:mod:`kant.experiments.fgd.run` and docs/experiments.md). Register with::

    from kant.cli.experiment import experiment
    cli.add_command(experiment)
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import yaml
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kant.cli._common import SEED, FiniteFloat, OneLineCommand, console, fail, out
from kant.errors import ConfigError, KantError

__all__ = ["experiment", "fgd"]


@dataclass(frozen=True)
class _Task:
    label: str
    path: str
    nodes: str
    limit: int | None
    policy: str
    seed: int
    inflate: float
    order: str
    args: tuple[tuple[str, Any], ...]


def _run_task(task: _Task) -> Any:
    from kant.experiments.fgd.core import load_cluster_and_pods, run_core
    from kant.experiments.fgd.run import Order, load_workload

    wl = load_workload(task.path, task.nodes, task.limit)
    order: Order = "shuffle" if task.order == "shuffle" else "creation"
    cluster, pods = load_cluster_and_pods(task.path, task.nodes, task.limit)
    return run_core(cluster, pods, wl, task.policy, task.seed, pods_label=task.label, inflate=task.inflate,
                    order=order, policy_args=dict(task.args), never=_never(task.path, task.nodes, task.limit))


_NEVER: dict[tuple[str, str, int | None], Any] = {}


def _never(path: str, nodes: str, limit: int | None) -> Any:
    from kant.experiments.fgd.run import load_inventory, load_workload, never_fits

    key = (path, nodes, limit)
    if key not in _NEVER:
        _NEVER[key] = never_fits(load_inventory(nodes), load_workload(path, nodes, limit))
    return _NEVER[key]


def _parse_args(items: tuple[str, ...], policies: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """``POLICY.KEY=VALUE`` (``*.KEY=VALUE`` for every policy); VALUE is read as a YAML scalar."""
    out_args: dict[str, dict[str, Any]] = {p: {} for p in policies}
    for item in items:
        head, sep, value = item.partition("=")
        name, dot, key = head.partition(".")
        if not sep or not dot or not key:
            raise ConfigError("--arg", item, "expected POLICY.KEY=VALUE")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            parsed = value
        targets = policies if name == "*" else (name,)
        for t in targets:
            if t not in out_args:
                raise ConfigError("--arg", item, f"policy {t!r} is not among --policy")
            out_args[t][key] = parsed
    return out_args


@click.group("experiment")
def experiment() -> None:
    """Reproduce published experiments with kant's readers and placement models."""


@experiment.command("fgd", cls=OneLineCommand)
@click.option("--pods", "pods", multiple=True, default=("default",), show_default=True,
              help="Pod list: default, cpu050, gpushare40, gpuspec20, multigpu30, ... ('all' = every "
                   "variant) or a CSV path; repeat for several.")
@click.option("--policy", "policies", multiple=True,
              help="random, best-fit, dot-product, gpu-packing, gpu-clustering, fgd, e-binpack (or "
                   "best-fit-core); repeat (default: all seven).")
@click.option("--seeds", type=click.IntRange(min=1), default=3, show_default=True,
              help="Number of seeds (each seed: its own inflation sample, order and tie-breaks).")
@click.option("--seed", "first_seed", type=SEED, default=42, show_default=True,
              help="First seed; seeds are SEED, SEED+1, ... (the FGD artifact uses 42-51).")
@click.option("--inflate", type=FiniteFloat(min=0, max=100), default=1.3, show_default=True,
              help="Keep sampling pods until the arrived GPU demand reaches this x the GPU capacity (0 = the "
                   "list as is).")
@click.option("--order", type=click.Choice(["creation", "shuffle"]), default="creation", show_default=True,
              help="Arrival order: creation time (file order when there are no times) or a seeded shuffle "
                   "(what the FGD artifact does).")
@click.option("--arg", "arg_items", multiple=True, metavar="POLICY.KEY=VALUE",
              help="Policy argument, e.g. fgd.popularity_threshold=95 or '*.tie=first'; repeatable.")
@click.option("--trace-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="openb trace folder (default: <shared traces>/alibaba-openb-gpu-v2023).")
@click.option("--nodes", "nodes_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Node list CSV (default: openb_node_list_gpu_node.csv in the trace folder).")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Only the first N pods of each list (smoke runs).")
@click.option("--jobs", "workers", type=click.IntRange(min=1), default=None,
              help="Parallel processes (default: one per core).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("kant-out/fgd"),
              show_default=True, help="Folder for CSV, JSON, PNG and HTML outputs.")
def fgd(pods: tuple[str, ...], policies: tuple[str, ...], seeds: int, first_seed: int, inflate: float, order: str,
        arg_items: tuple[str, ...], trace_dir: Path | None, nodes_path: Path | None, limit: int | None,
        workers: int | None, out_dir: Path) -> None:
    """The FGD paper's experiment: pods arrive (no departures) onto the openb cluster until
    INFLATE x its GPU capacity has arrived; report allocated vs arrived GPUs for every policy."""
    from kant.experiments.fgd.core import POLICY_NAMES, core_plugin
    from kant.experiments.fgd.report import TABLE_HEAD, format_table_rows, write_outputs
    from kant.experiments.fgd.run import load_inventory, openb_dir, resolve_pods

    try:
        pols = policies or POLICY_NAMES
        if len(set(pols)) != len(pols):
            fail("a policy is listed twice")
        pargs = _parse_args(arg_items, tuple(pols))
        for p in pols:
            core_plugin(p, pargs[p])  # fail fast on a bad name or argument
        lists = resolve_pods(pods, trace_dir)
        nodes = str(nodes_path or openb_dir(trace_dir) / "openb_node_list_gpu_node.csv")
        inv = load_inventory(nodes)
        never_counts: dict[str, int] = {}
        for label, path in lists:  # fail fast on a bad pod list
            never_counts[label] = int(_never(str(path), nodes, limit).sum())
        tasks = [
            _Task(label, str(path), nodes, limit, p, first_seed + i, inflate, order, tuple(sorted(pargs[p].items())))
            for label, path in lists for p in pols for i in range(seeds)
        ]
        n = workers or min(len(tasks), os.cpu_count() or 1)
        t0 = time.perf_counter()
        results: list[Any] = []
        with Progress(TextColumn("[bold]fgd experiment[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=True) as bar:
            job = bar.add_task("runs", total=len(tasks))
            if n == 1:
                for t in tasks:
                    results.append(_run_task(t))
                    bar.advance(job)
            else:
                with ProcessPoolExecutor(max_workers=n) as pool:
                    for r in pool.map(_run_task, tasks):
                        results.append(r)
                        bar.advance(job)
        wall = time.perf_counter() - t0
        config = {
            "pods": [label for label, _ in lists], "policies": list(pols),
            "seeds": [first_seed + i for i in range(seeds)],
            "inflate": inflate, "order": order, "limit": limit,
            "policy_args": {p: a for p, a in pargs.items() if a},
            "nodes": nodes, "capacity_gpus": inv.total_gpu_milli // 1000, "n_nodes": inv.n_nodes,
        }
        agg = write_outputs(out_dir, results, config)
    except KantError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{exc.filename or out_dir}: {exc.strerror or exc}")
    for label, _ in lists:
        table = Table(title=f"{label}: {inv.n_nodes} nodes, {inv.total_gpu_milli // 1000} GPUs, inflate {inflate:g}, "
                            f"{order} order, {seeds} seed(s) (mean ± sd)", title_justify="left")
        for h in TABLE_HEAD:
            table.add_column(h, justify="left" if h == "policy" else "right")
        for row in format_table_rows(agg, label):
            table.add_row(*row)
        out.print(table)
        k = never_counts[label]
        if k:
            out.print(f"{label}: {k} pod(s) of the list fit no node even of the empty cluster (reported apart, "
                      "not as failures)")
        red = [r for r in agg["reduction"] if r["pods"] == label and r["measure"] == "unalloc_at_100_pct"]
        if red:
            out.print("FGD vs others, unallocated GPUs at 100% arrived: " + ", ".join(
                f"{r['baseline']} {r['reduction_pct']:+.1f}%" for r in red) + " (positive = FGD leaves fewer)")
    console.print(f"{len(results)} runs in {wall:.1f} s on {n} process(es); wrote {out_dir}/fgd_report.html, "
                  "fgd_summary.csv, fgd_runs.csv, fgd_curves.csv, fgd_reduction.csv, fgd.json and PNGs")
