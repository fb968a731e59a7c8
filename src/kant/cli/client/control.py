"""``kant hold``, ``release``, ``update`` and ``requeue``: a user's controls of a job, as Slurm's
``scontrol hold|release|update|requeue`` (docs/cli.md)."""

from __future__ import annotations

from typing import Any

import click

from kant.cli._common import Duration
from kant.cli.client.common import client_command, job_id_arg, print_json, time_limit_option
from kant.cli.client.http import Client
from kant.service.jobenv import TIME_FORMS

__all__ = ["hold", "release", "requeue", "update"]


def _control(api: Client, job: str, verb: str, as_json: bool) -> None:
    answer = api.post(f"/v1/jobs/{job_id_arg(job)}/{verb}")
    if as_json:
        print_json(answer)
        return
    click.echo(f"job {answer['id']}: {answer['state']}" + (f" ({answer['reason']})" if answer.get("reason") else ""))


@client_command("hold")
@click.argument("job")
def hold(api: Client, job: str, as_json: bool) -> None:
    """Hold a pending job: it leaves the queue until `kant release`."""
    _control(api, job, "hold", as_json)


@client_command("release")
@click.argument("job")
def release(api: Client, job: str, as_json: bool) -> None:
    """Release a held job: it joins the queue again, with its submit time."""
    _control(api, job, "release", as_json)


@client_command("requeue")
@click.argument("job")
def requeue(api: Client, job: str, as_json: bool) -> None:
    """Requeue a running job: stopped as a preemption stops it (a checkpointing job resumes from its
    checkpoint), then pending again."""
    _control(api, job, "requeue", as_json)


@client_command("update")
@click.argument("job")
@click.option("--name", default=None, help="A new name.")
@click.option("--priority", type=int, default=None, help="A new priority (higher runs first).")
@click.option(
    "--estimate",
    type=Duration(positive=True),
    default=None,
    metavar="DUR",
    help="A new run-time estimate (90, 15m, 2h, 1d).",
)
@click.option(
    "--time",
    "-t",
    "time_limit",
    default=None,
    callback=time_limit_option,
    metavar="TIME",
    help=f"A new time limit ({TIME_FORMS}); the tenant's maximum holds.",
)
def update(
    api: Client,
    job: str,
    name: str | None,
    priority: int | None,
    estimate: float | None,
    time_limit: float | None,
    as_json: bool,
) -> None:
    """Change a pending job's name, priority, estimate or time limit."""
    body: dict[str, Any] = {
        k: v
        for k, v in (("name", name), ("priority", priority), ("estimate_s", estimate), ("time_limit_s", time_limit))
        if v is not None
    }
    if not body:
        raise click.UsageError("nothing to change: give --name, --priority, --estimate or --time")
    answer = api.request("PATCH", f"/v1/jobs/{job_id_arg(job)}", json=body)
    if as_json:
        print_json(answer)
        return
    click.echo(f"job {answer['id']}: updated")
