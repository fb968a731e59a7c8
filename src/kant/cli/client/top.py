"""``kant top``: the cluster now (GAR, SOR, GFR, GPUs, the queue, each tenant against its quota),
refreshed until Ctrl-C."""

from __future__ import annotations

import json
import time
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from kant.cli._common import FiniteFloat, out
from kant.cli.client.common import Clock, client_command, emit, or_dash, percent, table
from kant.cli.client.http import ApiError, Client
from kant.text import plural

__all__ = ["top"]


#: the live metrics the lines above the GPUs' name (any other is listed by its key)
_SHOWN = frozenset({"gar", "sor", "gfr_nodes", "gfr_gpus"})


def _frame(data: dict[str, Any], clock: Clock, url: str, problem: str | None = None) -> RenderableType:
    head = Text.assemble(("kant", "bold"), f" at {url} · policy {data['policy']} · ",
                         f"{clock.reading(data['now'])} ({clock.kind} clock) · cycle {data['cycles']}")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    grid.add_row("GAR", f"{percent(data['gar'])} of all GPUs allocated")
    grid.add_row("SOR", f"{percent(data['sor'])} of what could be allocated")
    grid.add_row("GFR", f"{percent(data['gfr_nodes'])} of up nodes partly used; "
                        f"{percent(data['gfr_gpus'])} of free GPUs on them")
    for key, value in data.get("metrics", {}).items():  # a metric added to the registry with a live value
        if key not in _SHOWN:
            grid.add_row(key, or_dash(None if value is None else f"{value:.4g}"))
    grid.add_row("GPUs", f"{data['total_gpus']}: {data['allocated_gpus']} allocated, {data['free_gpus']} free, "
                         f"{data['down_gpus']} down, {data['cordoned_gpus']} idle on cordoned nodes")
    grid.add_row("queue", f"{plural(data['queue_len'], 'job')} pending for {plural(data['pending_gpus'], 'GPU')}; "
                          f"{plural(data['running_jobs'], 'job')} running")
    tenants = table("TENANT", "RUNNING GPUS", "GUARANTEED", "MAX", "PENDING JOBS")
    for name, use in data["tenants"].items():
        tenants.add_row(Text(name), str(use["running_gpus"]), or_dash(use.get("guaranteed_gpus")),
                        or_dash(use.get("max_gpus")), str(use["pending_jobs"]))
    others = data.get("others")
    if others is not None:
        tenants.add_row(Text("others", style="dim"), str(others["running_gpus"]), "-", "-",
                        str(others["pending_jobs"]))
    parts: list[RenderableType] = [head, grid, Text(""), tenants]
    if data.get("queues"):
        parts += [Text(""), _queues(data["queues"])]
    if not data["quota_enforced"]:
        parts.append(Text(f"(policy {data['policy']} does not enforce quotas: they are shown, not applied)",
                          style="dim"))
    if problem is not None:
        parts.append(Text.assemble(("error:", "bold red"), f" {problem} (retrying)"))
    return Group(*parts)


def _queues(rows: list[dict[str, Any]]) -> Table:
    """The tree of queues: each queue indented under its parent, GPUs and its fair share, and, with
    per-GPU-type limits, GPUs in use / guaranteed per type (``V100 16/8``)."""
    by_type = any(row.get("per_type") for row in rows)
    out = table("QUEUE", "IN USE", "GUARANTEED", "BORROWED", "CAPACITY", "SHARE", "USAGE", "FACTOR",
                *(["BY TYPE"] if by_type else []))
    depth: dict[str, int] = {}
    for row in rows:  # (parents come before their children)
        d = depth[row["name"]] = 0 if row["parent"] is None else depth.get(row["parent"], 0) + 1
        fair = ["-" if row.get(k) is None else f"{row[k]:.3f}" for k in ("share", "usage", "factor")]
        types = [" ".join(f"{t} {c['in_use']:g}/{c['guaranteed']:g}" for t, c in (row.get("per_type") or {}).items())]
        out.add_row(Text("  " * d + row["name"]), f"{row['in_use']:g}", f"{row['guaranteed']:g}",
                    f"{row['borrowed']:g}", f"{row['capacity']:g}", *fair, *(types if by_type else []))
    return out


@client_command("top")
@click.option("--interval", type=FiniteFloat(min=0.1), default=2.0, show_default=True, metavar="S",
              help="Seconds between refreshes.")
@click.option("--once", is_flag=True, help="Print one frame and exit.")
def top(api: Client, interval: float, once: bool, as_json: bool) -> None:
    """The cluster now: GAR, SOR, GFR, GPUs, the queue and each tenant's use against its quota, refreshed
    every --interval seconds until Ctrl-C (or once, with --once)."""
    def fetch() -> tuple[dict[str, Any], Clock]:
        data = api.get("/v1/cluster")
        return data, Clock(float(data["now"]), str(data["clock"]))

    def frame(problem: str | None = None) -> RenderableType:
        return _frame(data, clock, api.target.url, problem)

    data, clock = fetch()
    if as_json:
        click.echo(json.dumps(data))
    elif once or not out.is_terminal:
        emit(frame())
    if once:
        return
    try:
        if as_json or not out.is_terminal:
            while True:
                time.sleep(interval)
                data, clock = fetch()
                if as_json:
                    click.echo(json.dumps(data))
                else:
                    click.echo("")
                    emit(frame())
        from rich.live import Live

        with Live(frame(), console=out, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                try:
                    data, clock = fetch()
                    live.update(frame(), refresh=True)
                except ApiError as exc:
                    live.update(frame(str(exc)), refresh=True)
    except KeyboardInterrupt:
        return
