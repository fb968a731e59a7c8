"""``kant acct``: accounting, like Slurm's ``sacct`` (per job) and ``sreport`` (``--report tenant|user``:
GPU-hours, jobs and waits per tenant or user), over a window of the service clock, as a table, CSV,
JSON or Parquet (``GET /v1/accounting/jobs|usage``; a tenant token sees its own)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import click

from kant.cli.client.common import Clock, Rows, client_command, emit, or_dash
from kant.cli.client.http import ApiError, Client
from kant.text import format_duration, parse_duration

__all__ = ["acct", "parse_when"]

FORMATS = ("table", "csv", "json", "parquet")


def parse_when(text: str, clock: Clock) -> float:
    """A time of ``--since`` / ``--until`` on the service clock: a number (the clock's seconds), a
    duration before now (``7d``, ``12h``, ``30m``: a number with a unit), ``now``, or on a wall clock
    a date and time (``2026-12-01``, ``2026-12-01T08:00``, local time)."""
    t = text.strip()
    if t.lower() == "now":
        return clock.now
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2})?)?", t):
        if clock.kind != "wall":
            raise ApiError(
                f"{text!r}: a date is a time on a wall clock; this service's clock is {clock.kind} "
                "(give its seconds, or a duration before now such as 12h)"
            )
        return dt.datetime.fromisoformat(t).timestamp()
    try:
        ago = parse_duration(t)
    except ValueError:
        raise ApiError(
            f"{text!r} is not a time: give the clock's seconds (3600), a duration before now (12h, 7d), "
            "now, or on a wall clock a date (2026-12-01, 2026-12-01T08:00)"
        ) from None
    return clock.now - ago


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f}"


def _span(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds, "compact")


def _job_table(data: dict[str, Any], clock: Clock) -> Rows:
    rows = Rows(
        "JOBID", "NAME", "TENANT", "USER", "STATE", "SUBMITTED", "WAIT", "RUNS", "GPUS", "GPU_HOURS", "EXIT", "NODES"
    )
    for j in data["jobs"]:
        gpus = f"{j['gpus'] * j['gpu_milli'] / 1000:g}"
        rows.add(
            str(j["id"]),
            j["name"] or "-",
            j["tenant"],
            j["user"],
            j["state"],
            clock.reading(j["submit_time"]),
            _span(j["wait_s"]),
            str(j["runs"]),
            gpus,
            _hours(j["gpu_seconds"]),
            or_dash(j["exit_code"]),
            j["nodes"] or "-",
        )
    return rows


def _usage_table(data: dict[str, Any]) -> Rows:
    per_user = data["by"] == "user"
    rows = Rows(
        "TENANT",
        *(["USER"] if per_user else []),
        "GPU_HOURS",
        "RUNS",
        "SUBMITTED",
        "STARTED",
        "WAIT_MEAN",
        "WAIT_P50",
        "WAIT_P90",
        "WAIT_MAX",
        "FINISHED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
    )
    for u in data["usage"]:
        rows.add(
            u["tenant"],
            *([u["user"]] if per_user else []),
            f"{u['gpu_hours']:.2f}",
            str(u["runs"]),
            str(u["jobs_submitted"]),
            str(u["jobs_started"]),
            _span(u["wait_mean_s"]),
            _span(u["wait_p50_s"]),
            _span(u["wait_p90_s"]),
            _span(u["wait_max_s"]),
            str(u["finished"]),
            str(u["failed"]),
            str(u["cancelled"]),
            str(u["timeout"]),
        )
    return rows


def _write(records: list[dict[str, Any]], columns: list[str], fmt: str, out: Path | None) -> None:
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        if out is None:
            raise ApiError("--format parquet writes a file: give --out FILE")
        table = pa.Table.from_pylist(records, schema=None) if records else pa.table({c: [] for c in columns})
        pq.write_table(table.select(columns), out)
        click.echo(f"wrote {len(records)} rows to {out}", err=True)
        return
    if fmt == "json":
        text = json.dumps(records, indent=2) + "\n"
    else:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)
        text = buf.getvalue()
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text, encoding="utf-8")
        click.echo(f"wrote {len(records)} rows to {out}", err=True)


@client_command("acct", json_option=False)
@click.option(
    "--since",
    default=None,
    metavar="WHEN",
    help="Window start: the clock's seconds, a duration before now (7d, 12h), or a date on a wall "
    "clock (2026-12-01). Default: the beginning.",
)
@click.option("--until", default=None, metavar="WHEN", help="Window end, as --since (default: now).")
@click.option(
    "--report",
    type=click.Choice(["jobs", "tenant", "user"]),
    default="jobs",
    show_default=True,
    help="jobs: one row per job (sacct); tenant, user: GPU-hours, jobs and waits per tenant or user (sreport).",
)
@click.option("--tenant", default=None, help="Only this tenant (admins; a tenant token sees its own).")
@click.option("--user", default=None, help="Only this user's jobs (--report jobs).")
@click.option("--state", "states", multiple=True, help="Only jobs in this state; repeat for more (--report jobs).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="A table, or the API's rows as CSV, JSON or Parquet.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the rows to this file (needed for parquet).",
)
def acct(
    api: Client,
    since: str | None,
    until: str | None,
    report: str,
    tenant: str | None,
    user: str | None,
    states: tuple[str, ...],
    fmt: str,
    out: Path | None,
) -> None:
    """Accounting over a window: per job (like sacct), or per tenant or user (like sreport)."""
    clock_data = api.get("/v1/clock")
    clock = Clock(float(clock_data["now"]), str(clock_data["kind"]))
    params: dict[str, Any] = {}
    if since is not None:
        params["since"] = max(parse_when(since, clock), 0.0)
    if until is not None:
        params["until"] = max(parse_when(until, clock), 0.0)
    if tenant is not None:
        params["tenant"] = tenant
    if report == "jobs":
        if user is not None:
            params["user"] = user
        if states:
            params["state"] = list(states)
        data = api.get("/v1/accounting/jobs", params=params)
        records, columns = data["jobs"], data["columns"]
    else:
        if user is not None or states:
            raise ApiError("--user and --state go with --report jobs")
        data = api.get("/v1/accounting/usage", params={**params, "by": report})
        records, columns = data["usage"], data["columns"]
        if report == "tenant":
            columns = [c for c in columns if c != "user"]
            records = [{k: v for k, v in r.items() if k != "user"} for r in records]
    if fmt != "table":
        _write(records, columns, fmt, out)
        return
    rows = _job_table(data, clock) if report == "jobs" else _usage_table(data)
    if out is not None:
        out.write_text("\n".join(rows.plain()) + "\n", encoding="utf-8")
        return
    emit(rows)
