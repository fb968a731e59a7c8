"""``kant trace``: list the known traces, describe one, convert one to Parquet.

Register with ``cli.add_command(trace)``. Every :class:`~kant.errors.KantError` ends the command
with one line ``error: <message>`` on stderr and exit status 2.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from kant.cli._common import SEED, FiniteFloat, OneLineCommand, fail
from kant.errors import ConfigError, KantError
from kant.text import parse_window

__all__ = ["trace"]


def _window(text: str) -> tuple[float | None, float | None]:
    try:
        return parse_window(text)
    except ValueError as exc:
        raise ConfigError("command line", "--window", str(exc)) from None


@click.group()
def trace() -> None:
    """Inspect and convert traces (job logs, node inventories, inference load)."""


@trace.command("list")
def list_cmd() -> None:
    """List the named traces and whether their files are here."""
    from kant.traces.registry import list_traces, shared_traces_dir

    out = Console()
    table = Table(title=f"traces (shared folder: {shared_traces_dir() or 'not found'})", title_justify="left")
    table.add_column("name", style="bold")
    table.add_column("kind")
    table.add_column("here")
    table.add_column("description")
    for e in list_traces():
        loc = e.location()
        table.add_row(e.name, e.kind, "yes" if loc is not None and loc.exists() else "no", e.description)
    out.print(table)
    out.print("also: any file path (CSV/TSV of a known layout, kant Parquet, mapping YAML), and "
              "synthetic:jobs=N,seed=S,...")


def _load(name: str, skip_invalid: bool) -> tuple[Any, Any]:
    from kant.traces import Problems
    from kant.traces.registry import load_any

    problems = Problems(skip=skip_invalid)
    return load_any(name, problems=problems), problems


def _report_dropped(problems: Any, skip_invalid: bool) -> None:
    if skip_invalid:
        err = Console(stderr=True)
        err.print(f"skip-invalid: {problems.summary()}", highlight=False, soft_wrap=True, markup=False)
        for e in problems.errors[:5]:
            err.print(f"  {e}", highlight=False, soft_wrap=True, markup=False)
        if len(problems) > 5:
            err.print(f"  ... and {len(problems) - 5} more", highlight=False, markup=False)


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    return obj


@trace.command("info", cls=OneLineCommand)
@click.argument("name")
@click.option("--skip-invalid", is_flag=True, help="Drop malformed rows (and report how many and why).")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
def info_cmd(name: str, skip_invalid: bool, as_json: bool) -> None:
    """Describe a trace NAME (a name from `kant trace list` or a file path)."""
    from kant.traces.info import render_info, trace_info

    try:
        obj, problems = _load(name, skip_invalid)
        info = trace_info(obj)
    except KantError as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps(_json_safe({"trace": name, **info.as_dict()}), indent=2))
    else:
        Console().print(render_info(info, title=name))
    _report_dropped(problems, skip_invalid)


@trace.command("convert", cls=OneLineCommand)
@click.argument("name")
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--skip-invalid", is_flag=True, help="Drop malformed rows (and report how many and why).")
@click.option("--window", "window_", default=None, help="Keep jobs submitted in START:END (e.g. 0:7d, 2h:), "
              "re-based to start at 0.")
@click.option("--scale-load", type=FiniteFloat(min=0, min_open=True), default=None,
              help="Divide submit times by this factor (2 = twice the load).")
@click.option("--sample", "sample_", type=FiniteFloat(min=0, max=1, min_open=True), default=None,
              help="Keep this fraction of the jobs (seeded).")
@click.option("--resize-mean", type=FiniteFloat(min=1), default=None,
              help="Re-size gangs toward this mean GPUs per job (e.g. 5.68 Seren, 26.77 Kalos).")
@click.option("--preserve-gpu-time", is_flag=True,
              help="With --resize-mean: shorten or lengthen re-sized jobs so each keeps its GPU-time.")
@click.option("--tenants-top", type=int, default=None, help="Keep the N largest tenants, merge the rest into 'other'.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed for --sample and --resize-mean.")
def convert_cmd(name: str, out: Path, skip_invalid: bool, window_: str | None, scale_load: float | None,
                sample_: float | None, resize_mean: float | None, preserve_gpu_time: bool, tenants_top: int | None,
                seed: int) -> None:
    """Read trace NAME into kant's schema and write it to OUT as Parquet, applying transforms in the
    order window, sample, scale-load, tenants-top, resize-mean."""
    from kant.model.cluster import Cluster
    from kant.model.job import JobTable
    from kant.traces import transforms as tf
    from kant.traces.parquet import write_parquet

    try:
        obj, problems = _load(name, skip_invalid)
        wants = any(v is not None for v in (window_, scale_load, sample_, resize_mean, tenants_top))
        if wants and not isinstance(obj, JobTable):
            raise ConfigError("command line", "convert", "transforms apply to job traces only")
        if isinstance(obj, JobTable):
            if window_ is not None:
                lo, hi = _window(window_)
                obj = tf.window(obj, lo, hi)
            if sample_ is not None:
                obj = tf.sample(obj, fraction=sample_, seed=seed)
            if scale_load is not None:
                obj = tf.scale_load(obj, scale_load)
            if tenants_top is not None:
                obj = tf.tenants_from_vcs(obj, top=tenants_top)
            if resize_mean is not None:
                obj = tf.resize_gangs(obj, resize_mean, seed=seed, preserve_gpu_time=preserve_gpu_time)
        path = write_parquet(obj, out)
    except KantError as exc:
        fail(str(exc))
    from kant.traces.registry import trace_kind

    kind = trace_kind(obj)
    count = obj.n_nodes if isinstance(obj, Cluster) else len(obj)
    noun = {"jobs": "jobs", "nodes": "nodes", "load": "load rows"}[kind]
    Console(stderr=True).print(f"wrote {count:,} {noun} to {path}", highlight=False, markup=False)
    _report_dropped(problems, skip_invalid)
