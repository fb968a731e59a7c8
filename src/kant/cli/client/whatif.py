"""``kant whatif``: the cluster now run forward under other policies or changes, side by side (the
service's digital twin, or a saved snapshot run here)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.text import Text

from kant.cli._common import Duration, fail
from kant.cli.client.common import client_command, emit, percent, print_json, table
from kant.cli.client.http import Client
from kant.text import format_duration

__all__ = ["whatif"]


def _quota_option(ctx: click.Context, param: click.Parameter, value: Sequence[str]) -> dict[str, dict[str, Any]]:
    quotas: dict[str, dict[str, Any]] = {}
    for item in value:
        tenant, eq, spec = item.partition("=")
        guaranteed, colon, most = spec.partition(":")
        try:
            g = None if guaranteed.strip() in ("", "-") else int(guaranteed)
            m = None if not colon or most.strip() in ("", "-") else int(most)
        except ValueError:
            g = m = -1
        if not eq or not tenant.strip() or (g is not None and g < 0) or (m is not None and m < 0):
            raise click.BadParameter(f"{item!r} is not TENANT=GUARANTEED:MAX (GPUs; - for none)", ctx, param)
        quotas[tenant.strip()] = {"guaranteed": g, "max": m}
    return quotas


def _policy_arg(text: str) -> str | dict[str, Any]:
    """A bundled policy's name as is; a policy file read here (the service never reads local files)."""
    path = Path(text)
    if path.is_file():
        from kant.config.yaml_file import read_yaml
        from kant.errors import KantError

        try:
            data = read_yaml(path)
        except KantError as exc:
            fail(str(exc))
        if not isinstance(data, dict):
            fail(f"{path}: a policy file is a mapping with name, actions and plugins")
        return data
    return text


@client_command("whatif")
@click.option("--policy", "policies", multiple=True, metavar="POLICY",
              help="Compare under this policy (a bundled name or a policy file); repeat for more.")
@click.option("--add-nodes", "add_nodes", type=click.IntRange(0, 100_000), multiple=True,
              help="Add N nodes like the most common one; repeat for one scenario per N (side by side).")
@click.option("--drain", "drain", multiple=True, metavar="NODE", help="Drain this node; repeat for more.")
@click.option("--quota", "quotas", multiple=True, metavar="TENANT=G:M", callback=_quota_option,
              help="Give a tenant GUARANTEED:MAX GPUs (- for none); repeat for more.")
@click.option("--horizon", type=Duration(), default="24h", show_default=True,
              help="How far to run forward (90m, 24h, 7d).")
@click.option("--runs", type=click.IntRange(1, 100), default=10, show_default=True,
              help="Sampled runs per scenario (run times drawn from the estimator's error).")
@click.option("--arrivals", type=click.Choice(["history", "none"]), default="history", show_default=True,
              help="history: each run also gets future arrivals sampled from the service's own (the twin's arrival "
                   "model, docs/whatif.md); none: only the jobs there now.")
@click.option("--html", "html", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the comparison as an HTML page here (admins, or with --snapshot).")
@click.option("--snapshot", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Run on a saved snapshot here instead of asking the service.")
@click.option("--save-snapshot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Save the service's live state to this file (admins) and exit.")
def whatif(api: Client, policies: tuple[str, ...], add_nodes: tuple[int, ...], drain: tuple[str, ...],
           quotas: dict[str, dict[str, Any]], horizon: float | None, runs: int, arrivals: str, html: Path | None,
           snapshot: Path | None, save_snapshot: Path | None, as_json: bool) -> None:
    """What if: the cluster now, run forward for --horizon under other policies or changes, side by
    side (GAR, GFR, predicted waits of the pending jobs, each one's predicted start)."""
    if save_snapshot is not None:
        data = api.get("/v1/snapshot")
        save_snapshot.write_text(json.dumps(data), encoding="utf-8")
        click.echo(f"saved the live state ({len(data['jobs']['id']):,} active jobs, {len(data['nodes']):,} nodes) "
                   f"to {save_snapshot}")
        return
    scenarios: list[dict[str, Any]] = []
    for pol in policies:
        spec = _policy_arg(pol)
        name = pol if isinstance(spec, str) else str(spec.get("name") or Path(pol).stem)
        scenarios.append({"name": re.sub(r"[^A-Za-z0-9._-]", "-", name)[:64] or "policy", "policy": spec})
    if len(add_nodes) > 1:  # one scenario per count, each with the drains and quotas
        for n in add_nodes:
            scenarios.append({"name": f"add-{n}", "add_nodes": n, "drain": list(drain), "quotas": quotas})
    elif any(add_nodes) or drain or quotas:
        scenarios.append({"name": "changes", "add_nodes": add_nodes[0] if add_nodes else 0, "drain": list(drain),
                          "quotas": quotas})
    body = {"horizon_h": (horizon or 86400.0) / 3600.0, "runs": runs, "arrivals": arrivals, "scenarios": scenarios}
    if snapshot is not None:
        from kant.errors import KantError
        from kant.twin.local import whatif_on_file

        try:
            data = whatif_on_file(snapshot, body, html)
        except KantError as exc:
            fail(str(exc))
    else:
        if html is not None:
            page = api.request("POST", "/v1/whatif", params={"format": "html"}, json=body, timeout=600.0, text=True)
            html.write_text(page, encoding="utf-8")
        data = api.request("POST", "/v1/whatif", json=body, timeout=600.0)
    if as_json:
        print_json(data)
        return
    emit(_whatif_tables(data))
    if html is not None:
        click.echo(f"wrote {html}")


def _whatif_tables(data: dict[str, Any]) -> Group:
    scs = data["scenarios"]
    now = float(data["as_of"])
    ahead = format_duration(data["horizon_s"], "compact")
    covers = data.get("band_covers") or (scs[0].get("band_covers") if scs else "")
    head = table("", *(sc["name"] for sc in scs),
                 title=f"what if, {ahead} ahead ({data['runs']} sampled run(s) each; times from now)")
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("changes", lambda sc: str(sc.get("changes_text") or "-")),
        ("policy", lambda sc: str(sc["policy"])),
        ("GAR", lambda sc: percent(sc["gar"])),
        ("GFR (nodes)", lambda sc: percent(sc["gfr_nodes"])),
        ("pending now", lambda sc: f"{sc['waits']['pending']:,}"),
        ("start in horizon", lambda sc: f"{sc['waits']['started']:,}"),
        ("start P50 from now", lambda sc: _opt_span(sc["waits"].get("from_now_p50"))),
        ("start P90 from now", lambda sc: _opt_span(sc["waits"].get("from_now_p90"))),
        ("last start from now", lambda sc: _opt_span(sc["waits"].get("from_now_max"))),
    ]
    if any("queue_mean" in sc for sc in scs):
        rows += [
            ("arrivals sampled", lambda sc: f"{sc.get('arrivals_sampled', 0):,.0f}"),
            ("their planned GPU-hours", lambda sc: f"{sc.get('arrivals_gpu_hours', 0):,.0f}"),
            ("queue (mean)", lambda sc: _opt_num(sc.get("queue_mean"))),
            ("queue (at the end)", lambda sc: _opt_num(sc.get("queue_end"))),
            ("wait P50 (all jobs)", lambda sc: _wait(sc.get("wait_all", {}), "p50")),
            ("wait P90 (all jobs)", lambda sc: _wait(sc.get("wait_all", {}), "p90")),
        ]
        gangs = [g["gang"] for g in next((sc.get("wait_by_gang") or [] for sc in scs), [])]
        for gang in gangs:
            for q in ("p50", "p90"):
                rows.append((f"wait {q.upper()}, {gang} GPU{'s' if gang != '1' else ''}", _gang_cell(gang, q)))
    for label, cell in rows:
        head.add_row(label, *(cell(sc) for sc in scs))
    jobs = table("JOB", *(sc["name"] for sc in scs), title="predicted start from now: P50 (P10 - P90)")
    by_id = [{j["id"]: j for j in sc["jobs"]} for sc in scs]
    ids = [j["id"] for j in scs[0]["jobs"]] if scs else []
    for job_id in ids[:20]:
        jobs.add_row(str(job_id), *(_job_cell(m[job_id], now) if job_id in m else "-" for m in by_id))
    parts: list[RenderableType] = [head, Text("")]
    if covers:
        parts += [Text(f"the band covers: {covers}"), Text("")]
    if ids:
        parts.append(jobs)
        if len(ids) > 20:
            parts.append(Text(f"and {len(ids) - 20:,} more pending jobs (--json lists every one)"))
    return Group(*parts)


def _gang_cell(gang: str, q: str) -> Callable[[dict[str, Any]], str]:
    def cell(sc: dict[str, Any]) -> str:
        return _wait(next((x for x in sc.get("wait_by_gang", []) if x["gang"] == gang), {}), q)
    return cell


def _job_cell(job: dict[str, Any], now: float) -> str:
    """A job's predicted start from now, with its band: ``1h20m (40m - 2h)``."""
    if job["p50"] is None:
        return "-"
    mid = format_duration(job["p50"] - now, "compact")
    lo = "?" if job.get("p10") is None else format_duration(max(job["p10"] - now, 0.0), "compact")
    hi = "later" if job.get("p90") is None else format_duration(job["p90"] - now, "compact")
    return mid if lo == hi == mid else f"{mid} ({lo} - {hi})"


def _wait(cell: dict[str, Any], q: str) -> str:
    if not cell or cell.get("jobs", 0) == 0:
        return "-"
    return "> horizon" if cell.get(q) is None else format_duration(cell[q], "compact")


def _opt_num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _opt_span(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds, "compact")
