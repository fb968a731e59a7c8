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
@click.option("--add-nodes", type=click.IntRange(0, 100_000), default=0, help="Add N nodes like the most common one.")
@click.option("--drain", "drain", multiple=True, metavar="NODE", help="Drain this node; repeat for more.")
@click.option("--quota", "quotas", multiple=True, metavar="TENANT=G:M", callback=_quota_option,
              help="Give a tenant GUARANTEED:MAX GPUs (- for none); repeat for more.")
@click.option("--horizon", type=Duration(), default="24h", show_default=True,
              help="How far to run forward (90m, 24h, 7d).")
@click.option("--runs", type=click.IntRange(1, 100), default=10, show_default=True,
              help="Sampled runs per scenario (run times drawn from the estimator's error).")
@click.option("--html", "html", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the comparison as an HTML page here (admins, or with --snapshot).")
@click.option("--snapshot", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Run on a saved snapshot here instead of asking the service.")
@click.option("--save-snapshot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Save the service's live state to this file (admins) and exit.")
def whatif(api: Client, policies: tuple[str, ...], add_nodes: int, drain: tuple[str, ...],
           quotas: dict[str, dict[str, Any]], horizon: float | None, runs: int, html: Path | None,
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
    if add_nodes or drain or quotas:
        scenarios.append({"name": "changes", "add_nodes": add_nodes, "drain": list(drain), "quotas": quotas})
    body = {"horizon_h": (horizon or 86400.0) / 3600.0, "runs": runs, "scenarios": scenarios}
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
    head = table("", *(sc["name"] for sc in scs), title=f"what if, {ahead} ahead ({data['runs']} sampled run(s) each)")
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("policy", lambda sc: str(sc["policy"])),
        ("GAR", lambda sc: percent(sc["gar"])),
        ("GFR (nodes)", lambda sc: percent(sc["gfr_nodes"])),
        ("pending now", lambda sc: f"{sc['waits']['pending']:,}"),
        ("start in horizon", lambda sc: f"{sc['waits']['started']:,}"),
        ("wait P50", lambda sc: _opt_span(sc["waits"]["p50"])),
        ("wait P90", lambda sc: _opt_span(sc["waits"]["p90"])),
        ("wait max", lambda sc: _opt_span(sc["waits"]["max"])),
    ]
    for label, cell in rows:
        head.add_row(label, *(cell(sc) for sc in scs))
    jobs = table("JOB", *(sc["name"] for sc in scs), title="predicted start from now (P50)")
    by_id = [{j["id"]: j for j in sc["jobs"]} for sc in scs]
    ids = [j["id"] for j in scs[0]["jobs"]] if scs else []
    for job_id in ids[:20]:
        jobs.add_row(str(job_id), *(_opt_span(None if m[job_id]["p50"] is None else m[job_id]["p50"] - now)
                                    if job_id in m else "-" for m in by_id))
    parts: list[RenderableType] = [head, Text("")]
    if ids:
        parts.append(jobs)
        if len(ids) > 20:
            parts.append(Text(f"and {len(ids) - 20:,} more pending jobs (--json lists every one)"))
    return Group(*parts)


def _opt_span(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds, "compact")
