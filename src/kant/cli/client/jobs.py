"""``kant submit``, ``queue``, ``jobs``, ``show``, ``cancel``, ``why`` and ``logs``: jobs in the service."""

from __future__ import annotations

import functools
import os
import re
import shlex
import time
from collections.abc import Iterable, Sequence
from typing import Any

import click
from rich.console import Group
from rich.table import Table
from rich.text import Text

from kant.cli._common import Duration, FiniteFloat, console, fail
from kant.cli.client.common import (
    Cell,
    Clock,
    Rows,
    client_command,
    emit,
    job_id_arg,
    or_dash,
    print_json,
    table,
    time_limit_option,
)
from kant.cli.client.http import ApiError, Client
from kant.service.jobenv import TIME_FORMS, parse_export, resolve_export, submitter_environment
from kant.text import format_duration

__all__ = ["cancel", "jobs", "logs", "queue", "show", "submit", "why"]

PAGE = 1000  # the API's largest page
QUEUE_STATES = ("pending", "running")
JOB_STATES = ("pending", "running", "finished", "failed", "cancelled", "timeout", "unschedulable")
STATE_STYLE = {"pending": "yellow", "running": "green", "finished": "blue", "failed": "red",
               "cancelled": "magenta", "timeout": "red", "unschedulable": "red"}
#: the submit body's fields and the options that set them (a 422 naming a field names the option too)
SUBMIT_OPTIONS = {"name": "--name", "workers": "--workers", "gpus_per_worker": "--gpus", "gpu_type": "--gpu-type",
                  "cpu_milli": "--cpu", "memory_mib": "--memory", "priority": "--priority", "estimate_s": "--estimate",
                  "duration_s": "--duration", "tenant": "--tenant", "user": "--user", "labels": "--label",
                  "command": "COMMAND", "idempotency_key": "--idempotency-key", "chdir": "--chdir",
                  "environment": "--export", "time_limit_s": "--time", "dependency": "--dependency",
                  "array": "--array", "min_workers": "--min-workers", "max_workers": "--max-workers"}


def _label_option(ctx: click.Context, param: click.Parameter, value: Sequence[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in value:
        key, eq, val = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise click.BadParameter(f"{item!r} is not key=value", ctx, param)
        if key in labels:
            raise click.BadParameter(f"the key {key!r} is given twice", ctx, param)
        labels[key] = val
    return labels


def _time_option(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    return time_limit_option(ctx, param, value)


def _export_option(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        parse_export(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r}: {exc}", ctx, param) from None
    return value


def _job_id(text: str) -> int:
    return job_id_arg(text)


def _clock(api: Client) -> Clock:
    data = api.get("/v1/clock")
    return Clock(float(data["now"]), str(data["kind"]))


def _gang(job: dict[str, Any]) -> str:
    gpus = job["gpus_per_worker"]
    per = f"{job['gpu_milli'] / 1000:g}" if gpus == 1 and job.get("gpu_milli", 1000) < 1000 else str(gpus)
    text = f"{job['workers']}x{per}"
    return f"{text}:{job['gpu_type']}" if job.get("gpu_type") else text


def _nodes(placement: Sequence[str] | None) -> str:
    """``v100-0,v100-1``; a node holding several workers is ``v100-0(2)``."""
    if not placement:
        return ""
    counts: dict[str, int] = {}
    for node in placement:
        counts[node] = counts.get(node, 0) + 1
    return ",".join(n if c == 1 else f"{n}({c})" for n, c in counts.items())


def _state(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


@client_command("submit")
@click.option("--name", default=None, help="Job name (default: the command's program).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Workers of the gang (all start together or none).")
@click.option("--gpus", type=click.IntRange(min=0), default=1, show_default=True, help="GPUs per worker.")
@click.option("--gpu-type", default=None, help="GPU type (e.g. V100, or 'A100|H100' for either).")
@click.option("--cpu", type=click.IntRange(min=0), default=0, metavar="MILLI",
              help="CPU per worker in milli-cores (0: not asked).")
@click.option("--memory", type=click.IntRange(min=0), default=0, metavar="MIB",
              help="Memory per worker in MiB (0: not asked).")
@click.option("--priority", type=int, default=0, show_default=True, help="Higher runs first (policy permitting).")
@click.option("--estimate", type=Duration(positive=True), default=None, metavar="DUR",
              help="Your run-time estimate (90, 90s, 15m, 2h, 1d); backfill plans with it.")
@click.option("--duration", type=Duration(), default=None, metavar="DUR",
              help="How long the simulated executor runs the job.")
@click.option("--tenant", default=None,
              help="Whose job (admins; default: the tenant 'default', made on first use; a tenant token submits "
                   "its own).")
@click.option("--user", default=None, help="The user within the tenant (default: the tenant).")
@click.option("--label", "labels", multiple=True, callback=_label_option, metavar="KEY=VALUE",
              help="A label; repeat for more.")
@click.option("--idempotency-key", default=None, metavar="KEY",
              help="A retried submit with the same key makes no second job.")
@click.option("--chdir", "-D", default=None, metavar="DIR",
              help="The job's working directory on its nodes (default: this one; one missing on a node fails "
                   "the start).")
@click.option("--export", "export", default="ALL", show_default=True, callback=_export_option,
              metavar="ALL|NONE|VAR[=value],...",
              help="The environment the job gets, as Slurm's: ALL (this one), NONE (only what kant sets), or "
                   "the variables listed (NAME from this environment, NAME=value; ALL,... adds to all of it).")
@click.option("--time", "-t", "time_limit", default=None, callback=_time_option, metavar="TIME",
              help=f"Time limit ({TIME_FORMS}): past it the job gets SIGTERM, then SIGKILL after the grace "
                   "period, and ends 'timeout' (default: the tenant's default time limit).")
@click.option("--dependency", "-d", default=None, metavar="TYPE:ID[:ID...][,...]",
              help="Wait for other jobs, as Slurm's: after (started), afterok (finished), afternotok (failed, "
                   "cancelled or timed out), afterany (ended); e.g. afterok:41:42,afterany:7.")
@click.option("--kill-on-invalid-dep", is_flag=True, default=False,
              help="Cancel the job if its dependency can never be met (default: it waits, "
                   "DependencyNeverSatisfied).")
@click.option("--array", "-a", default=None, metavar="INDEXES[%N]",
              help="A job array, as Slurm's: 0-99%10 (100 tasks, at most 10 at once), 1,3,5-7, 0-15:4; one job "
                   "per task, with KANT_ARRAY_TASK_ID and KANT_ARRAY_JOB_ID; prints the array's id.")
@click.option("--min-workers", type=int, default=None, metavar="N",
              help="An elastic gang (docs/elastic.md): it may shrink to N workers (give --max-workers too).")
@click.option("--max-workers", type=int, default=None, metavar="N",
              help="An elastic gang: it may grow to N workers; a resize restarts it from its checkpoint.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def submit(api: Client, name: str | None, workers: int, gpus: int, gpu_type: str | None, cpu: int, memory: int,
           priority: int, estimate: float | None, duration: float | None, tenant: str | None, user: str | None,
           labels: dict[str, str], idempotency_key: str | None, chdir: str | None, export: str,
           time_limit: float | None, dependency: str | None, kill_on_invalid_dep: bool, array: str | None,
           min_workers: int | None, max_workers: int | None, command: tuple[str, ...], as_json: bool) -> None:
    """Submit a job (a gang of WORKERS x GPUS); prints its id. The command goes after '--':

    \b
        kant submit --workers 2 --gpus 8 --duration 2h -- python train.py --lr 0.1
    """
    cmd = None
    if command:
        cmd = command[0] if len(command) == 1 else shlex.join(command)
    if name is None:
        words = shlex.split(cmd) if cmd else []
        name = os.path.basename(words[0]) if words else ""
    body: dict[str, Any] = {"name": name, "workers": workers, "gpus_per_worker": gpus, "cpu_milli": cpu,
                            "memory_mib": memory, "priority": priority, "labels": labels,
                            "chdir": os.path.abspath(chdir if chdir is not None else os.getcwd()),
                            "environment": resolve_export(export, submitter_environment(os.environ))}
    for key, value in (("gpu_type", gpu_type), ("estimate_s", estimate), ("duration_s", duration),
                       ("tenant", tenant), ("user", user), ("command", cmd), ("time_limit_s", time_limit)):
        if value is not None:
            body[key] = value
    if dependency is not None:
        body["dependency"] = dependency
    if kill_on_invalid_dep:
        body["kill_on_invalid_dep"] = True
    if array is not None:
        body["array"] = array
    if min_workers is not None:
        body["min_workers"] = min_workers
    if max_workers is not None:
        body["max_workers"] = max_workers
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
    try:
        answer = api.post("/v1/jobs", body, headers=headers)
    except ApiError as exc:
        field = re.match(r"^\d+: (?:body\.)?([a-z_]+)\b", str(exc))
        if exc.status == 422 and field is not None and field.group(1) in SUBMIT_OPTIONS:
            raise ApiError(f"{exc} ({SUBMIT_OPTIONS[field.group(1)]})", exc.status) from None
        raise
    if as_json:
        print_json(answer)
        return
    click.echo(str(answer["id"]))
    if not answer.get("created", True):
        console.print(f"already submitted as job {answer['id']} (idempotency key {idempotency_key!r})",
                      highlight=False, markup=False)


def _pages(api: Client, params: dict[str, Any], limit: int) -> tuple[list[dict[str, Any]], int | None]:
    """Up to ``limit`` jobs, following ``next`` -> ``after``; and the last ``next`` (None: no more)."""
    items: list[dict[str, Any]] = []
    after: int | None = None
    while True:
        page = api.get("/v1/jobs", params={**params, "limit": min(PAGE, limit - len(items)),
                                           **({"after": after} if after is not None else {})})
        items.extend(page["items"])
        after = page["next"]
        if after is None or len(items) >= limit:
            return items, after


def _job_table(jobs: Iterable[dict[str, Any]], clock: Clock, absolute: bool, history: bool) -> Rows:
    columns = ["JOBID", "NAME", "TENANT", "STATE", "GANG", "SUBMITTED", "STARTED"]
    if history:
        columns += ["END", "EXIT"]
    listing = Rows(*columns, "NODES/REASON")
    at = clock.at
    for job in jobs:
        state = job["state"]
        where: Cell = ((job.get("reason") or "", "dim") if state == "pending" else
                       _nodes(job.get("placement")) or (job.get("reason") or ""))
        shown: Cell = (job["counts"], "") if "counts" in job else (state, STATE_STYLE.get(state, ""))
        row: list[Cell] = [str(job["id"]), job["name"] or "-", job["tenant"], shown,
                           _gang(job), at(job["submit_time"], absolute), at(job["start_time"], absolute)]
        if history:
            row += [at(job["end_time"], absolute), or_dash(job["exit_code"])]
        listing.add(*row, where)
    return listing


_STATE_ORDER = {s: k for k, s in enumerate(JOB_STATES)}


def fold_arrays(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The jobs with each job array's tasks folded into one line (at its first task's place): its id
    ``41_[0-99%10]`` (the tasks listed), the count of tasks in each state, the first task's times and
    the first pending task's reason (as squeue folds an array's pending tasks)."""
    from kant.service.arrays import format_array

    tasks: dict[int, list[dict[str, Any]]] = {}
    for job in items:
        if job.get("array_job_id") is not None:
            tasks.setdefault(job["array_job_id"], []).append(job)
    if not tasks:
        return items
    out: list[dict[str, Any]] = []
    for job in items:
        array_id = job.get("array_job_id")
        if array_id is None:
            out.append(job)
            continue
        group = tasks.pop(array_id, None)
        if group is None:
            continue  # (folded at its first task)
        counts: dict[str, int] = {}
        for t in group:
            counts[t["state"]] = counts.get(t["state"], 0) + 1
        pending = next((t for t in group if t["state"] == "pending"), None)
        first = group[0]
        indexes = format_array([t["array_task_id"] for t in group], first.get("array_throttle"))
        order = sorted(counts, key=lambda s: _STATE_ORDER.get(s, 99))
        out.append({**first, "id": f"{array_id}_[{indexes}]", "counts": ", ".join(f"{counts[s]} {s}" for s in order),
                    "state": "pending" if pending is not None else first["state"],
                    "reason": (pending or first).get("reason"), "start_time": first.get("start_time")})
    return out


def _list_jobs(api: Client, *, states: Sequence[str], tenant: str | None, limit: int, desc: bool, absolute: bool,
               as_json: bool, history: bool) -> None:
    params: dict[str, Any] = {"order": "desc" if desc else "asc"}
    if states:
        params["state"] = list(states)
    if tenant is not None:
        params["tenant"] = tenant
    items, more = _pages(api, params, limit)
    if as_json:
        print_json({"items": items, "next": more})
        return
    clock = _clock(api)
    emit(_job_table(items if history else fold_arrays(items), clock, absolute, history))
    if more is not None:
        console.print(f"(the first {len(items)} jobs; more with --limit)", highlight=False)


_limit = functools.partial(click.option, "--limit", type=click.IntRange(min=1), show_default=True)
_absolute = click.option("--absolute", is_flag=True,
                         help="Times as the service clock reads them instead of 'ago'.")


@client_command("queue")
@click.option("--tenant", default=None, help="Only this tenant's jobs (admins).")
@click.option("--state", "states", type=click.Choice(QUEUE_STATES), multiple=True,
              help="Only jobs in this state; repeat for more (default: pending and running).")
@_limit(default=1000, help="At most this many jobs.")
@_absolute
def queue(api: Client, tenant: str | None, states: tuple[str, ...], limit: int, absolute: bool, as_json: bool) -> None:
    """The pending and running jobs, in id order (like squeue): pending ones say why they wait,
    running ones where they run."""
    _list_jobs(api, states=states or QUEUE_STATES, tenant=tenant, limit=limit, desc=False, absolute=absolute,
               as_json=as_json, history=False)


@client_command("jobs")
@click.option("--state", "states", type=click.Choice(JOB_STATES), multiple=True,
              help="Only jobs in this state; repeat for more (default: all).")
@click.option("--tenant", default=None, help="Only this tenant's jobs (admins).")
@_limit(default=100, help="At most this many jobs.")
@click.option("--desc", is_flag=True, help="Newest first.")
@_absolute
def jobs(api: Client, states: tuple[str, ...], tenant: str | None, limit: int, desc: bool, absolute: bool,
         as_json: bool) -> None:
    """Jobs in any state, finished ones included, oldest first (or newest with --desc)."""
    _list_jobs(api, states=states, tenant=tenant, limit=limit, desc=desc, absolute=absolute, as_json=as_json,
               history=True)


def _why_text(why: dict[str, Any]) -> str:
    """``job 42 is pending: [allocate] no free GPU in the cluster; 3 jobs ahead of it in a queue of 17;
    predicted start in ~2h10m (1h20m - 3h40m)``."""
    return f"job {why['id']} is {_state_text(why)}"


def _state_text(why: dict[str, Any]) -> str:
    state, reason = str(why["state"]), str(why.get("reason") or why["state"])
    text = state
    if reason != state:
        text += f": {reason}"
    position, queue_len = why.get("position"), why.get("queue_len")
    if state == "pending" and position is not None and queue_len is not None:
        ahead = ("no job ahead of it" if position == 0 else
                 "1 job ahead of it" if position == 1 else f"{position} jobs ahead of it")
        text += f"; {ahead} in a queue of {queue_len}"
    if state == "pending" and why.get("prediction_text"):
        text += f"; {why['prediction_text']}"
    if state == "pending" and why.get("behind_prediction_text"):
        text += f"; job {why['behind']} (ahead of it): {why['behind_prediction_text']}"
    return text


@client_command("show")
@click.argument("job")
@_absolute
def show(api: Client, job: str, absolute: bool, as_json: bool) -> None:
    """One job: its fields and its events."""
    data = api.get(f"/v1/jobs/{_job_id(job)}")
    if as_json:
        print_json(data)
        return
    clock = _clock(api)
    fields = Table(box=None, pad_edge=False, show_header=False, title=f"job {data['id']}", title_justify="left",
                   title_style="bold")
    fields.add_column("field", style="bold", no_wrap=True)
    fields.add_column("value")
    gang = f"{data['workers']} worker(s) x {data['gpus_per_worker']} GPU(s)"
    if data["gpus_per_worker"] == 1 and data["gpu_milli"] < 1000:
        gang = f"{data['workers']} worker(s) x {data['gpu_milli'] / 1000:g} GPU"
    if data.get("gpu_type"):
        gang += f" of {data['gpu_type']}"
    if data["cpu_milli"] or data["memory_mib"]:
        gang += f"; {data['cpu_milli']} milli-CPU, {data['memory_mib']} MiB each"
    why = data.get("why")
    rows: list[tuple[str, str | Text]] = [
        ("name", Text(data["name"] or "-")),
        ("tenant", Text(f"{data['tenant']} (user {data['user']})")),
        ("kind", data["kind"] + (f" (service {data['service_id']})" if data.get("service_id") is not None else "")),
        ("state", Text(_state_text(why) if why else
                       data["state"] + (f": {data['reason']}" if data.get("reason") else ""))),
        ("gang", gang),
        *([("elastic", f"{data['min_workers']} to {data['max_workers']} workers"
                       + (f" (running on {len(data['placement'])})" if data.get("placement")
                          and data["state"] == "running" else ""))]
          if data.get("min_workers") is not None else []),
        ("priority", str(data["priority"])),
        ("estimate", format_duration(data["estimate_s"], "compact") if data.get("estimate_s") is not None else "-"),
        ("duration", format_duration(data["duration_s"], "compact") if data.get("duration_s") is not None else "-"),
        ("time limit", format_duration(data["time_limit_s"], "compact") if data.get("time_limit_s") else "-"),
        ("array", "-" if data.get("array_job_id") is None else
         f"task {data['array_task_id']} of array {data['array_job_id']}"
         + (f" (at most {data['array_throttle']} at once)" if data.get("array_throttle") else "")),
        ("dependency", Text((data.get("dependency") or "-")
                            + (" (kill on invalid dependency)" if data.get("kill_on_invalid_dep") else ""))),
        ("directory", Text(data.get("chdir") or "-")),
        ("environment", "the node's" if data.get("environment") is None else
         f"{len(data['environment'])} variable(s) (--json shows them)"),
        ("command", Text(data.get("command") or "-")),
        ("labels", Text(", ".join(f"{k}={v}" for k, v in data["labels"].items()) or "-")),
        ("submitted", clock.at(data["submit_time"], absolute)),
        ("first started", clock.at(data["first_start_time"], absolute)),
        ("started", clock.at(data["start_time"], absolute)),
        ("ended", clock.at(data["end_time"], absolute)),
        ("nodes", Text(_nodes(data.get("placement")) or "-")),
        ("runs", str(data["runs"])),
        ("exit code", or_dash(data["exit_code"])),
    ]
    for label, value in rows:
        fields.add_row(label, value)
    events = table("TIME", "EVENT", "NODE", "MESSAGE", title="events")
    for ev in data["events"]:
        events.add_row(clock.at(ev["time"], absolute), ev["kind"], Text(ev.get("node") or ""), Text(ev["message"]))
    emit(Group(fields, Text(""), events))


def _array_task(api: Client, text: str) -> int:
    """The job id of task ``T`` of array ``A``, written ``A_T`` as Slurm writes it (a task's own job id
    works too); ``error: JOB ...`` when there is no such task."""
    array, _, task = text.strip().partition("_")
    first, index = job_id_arg(array), job_id_arg(task)
    # the tasks are consecutive jobs from the array's id (at most 1,000): one page holds them all
    page = api.get("/v1/jobs", params={"after": first - 1, "limit": 1000, "order": "asc"})
    for job in page["items"]:
        if job.get("array_job_id") == first and job.get("array_task_id") == index:
            return int(job["id"])
    fail(f"JOB: {text!r}: array {first} has no task {index}")


@client_command("cancel", json_option=False)
@click.argument("job_ids", metavar="JOB...", nargs=-1, required=True)
@click.option("--array", "arrays", is_flag=True,
              help="Each JOB is a job array's id: cancel every pending or running task of it.")
def cancel(api: Client, job_ids: tuple[str, ...], arrays: bool) -> None:
    """Cancel jobs (pending or running; every worker stops); ``41_3`` is task 3 of array 41, as in
    Slurm. Tries every job; exits 2 if any failed."""
    ids = [_array_task(api, j) if "_" in j and not arrays else _job_id(j) for j in job_ids]
    failed = 0
    for job_id in ids:
        try:
            if arrays:
                done = api.post(f"/v1/arrays/{job_id}/cancel")
                click.echo(f"array {job_id}: {done['cancelled']} task(s) cancelled")
                continue
            answer = api.post(f"/v1/jobs/{job_id}/cancel")
        except ApiError as exc:
            if exc.status is None:  # the service cannot be reached: no use trying the others
                raise
            failed += 1
            console.print(Text.assemble(("error:", "bold red"), f" job {job_id}: {exc}"), highlight=False,
                          soft_wrap=True)
            continue
        click.echo(f"job {job_id}: {answer['state']}")
    if failed:
        raise SystemExit(2)


@client_command("why")
@click.argument("job")
def why(api: Client, job: str, as_json: bool) -> None:
    """Why a job waits (the scheduler's reason) and how many jobs are ahead of it."""
    data = api.get(f"/v1/jobs/{_job_id(job)}/why")
    if as_json:
        print_json(data)
    else:
        click.echo(_why_text(data))


@client_command("logs", json_option=False)
@click.argument("job")
@click.option("--worker", type=click.IntRange(min=0), default=0, show_default=True, help="Which worker (its RANK).")
@click.option("--run", "run", type=click.IntRange(min=1), default=None,
              help="Which run of a job that was requeued (default: the latest).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new output until the job ends.")
@click.option("--interval", type=FiniteFloat(min=0.05), default=0.5, show_default=True, metavar="S",
              help="With --follow: seconds between two reads when nothing new came.")
def logs(api: Client, job: str, worker: int, run: int | None, follow: bool, interval: float) -> None:
    """Output (stdout and stderr) of one worker of a job (`kant serve --executor ray` keeps it)."""
    job_id = _job_id(job)
    offset, current = 0, run  # the run being read (None: the latest, until the first answer says which)
    while True:
        params: dict[str, Any] = {"worker": worker, "offset": offset}
        if current is not None:
            params["run"] = current
        data = api.get(f"/v1/jobs/{job_id}/logs", params=params)
        if not data["kept"]:
            fail("this service keeps no output: its executor runs nothing (kant serve --executor ray does)")
        click.echo(data["text"], nl=False)
        offset = int(data["next_offset"])
        current = current if current is not None or not data["run"] else int(data["run"])
        if offset < int(data["size"]):
            continue  # the rest did not fit in one answer
        if not follow or data["complete"]:
            return
        if run is None and current is not None:  # a requeued job started again: follow its new run
            latest = int(api.get(f"/v1/jobs/{job_id}/logs", params={"worker": worker, "limit": 1})["run"])
            if latest > current:
                current, offset = latest, 0
                click.echo(f"--- run {current} ---", err=True)
                continue
        time.sleep(interval)
