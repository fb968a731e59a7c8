"""``kant tenants create|list|set-quota`` and ``kant tokens create|list|revoke``: tenants, their quotas
and the tokens of ``kant serve``, through its API (``/v1/tenants``, ``/v1/tokens``; admins, but
``tenants list``, which a tenant token may run for its own tenant)."""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from kant.cli._common import Duration
from kant.cli.client.common import Rows, client_command, emit, or_dash, print_json
from kant.cli.client.http import ApiError, Client
from kant.service.jobenv import TIME_FORMS, parse_time
from kant.text import format_duration

__all__ = ["tenants", "tokens"]

#: the tenant fields the options set, and the options (a 422 naming a field names the option too)
QUOTA_OPTIONS = {
    "guaranteed_gpus": "--guaranteed",
    "max_gpus": "--max",
    "default_time_limit_s": "--default-time",
    "max_time_limit_s": "--max-time",
}


class _OrNone(click.ParamType):  # type: ignore[type-arg]
    """A value of ``inner``, or ``none`` (null: the limit is cleared)."""

    def __init__(self, inner: Any, what: str) -> None:
        self.inner = inner
        self.name = f"{what}|none"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.strip().lower() == "none":
            return _NONE
        return self.inner(value, param, ctx)


class _Clear:
    """``none`` given to an option: send null."""


_NONE = _Clear()


def _gpus(value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
    return int(click.IntRange(min=0).convert(value, param, ctx))


def _time(value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
    try:
        seconds = parse_time(str(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    return _NONE if seconds is None else seconds  # (UNLIMITED: no limit, as none)


_quota_options = [
    click.option(
        "--guaranteed",
        "guaranteed_gpus",
        type=_OrNone(_gpus, "GPUS"),
        default=None,
        help="GPUs the tenant is guaranteed (none: no guarantee).",
    ),
    click.option(
        "--max",
        "max_gpus",
        type=_OrNone(_gpus, "GPUS"),
        default=None,
        help="The most GPUs the tenant may hold (none: no cap).",
    ),
    click.option(
        "--default-time",
        "default_time_limit_s",
        type=_OrNone(_time, "TIME"),
        default=None,
        help=f"Time limit of the tenant's jobs that give none ({TIME_FORMS}).",
    ),
    click.option(
        "--max-time",
        "max_time_limit_s",
        type=_OrNone(_time, "TIME"),
        default=None,
        help="The longest time limit a job of the tenant may ask for.",
    ),
]


def _with_quota_options(f: Any) -> Any:
    for option in reversed(_quota_options):
        f = option(f)
    return f


def _quota_body(values: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if v is _NONE else v) for k, v in values.items() if v is not None}


def _named(exc: ApiError) -> ApiError:
    """A 422 naming a quota field names its option too."""
    m = re.match(r"^\d+: (?:body\.)?([a-z_]+):", str(exc))
    if exc.status == 422 and m is not None and m.group(1) in QUOTA_OPTIONS:
        return ApiError(f"{exc} ({QUOTA_OPTIONS[m.group(1)]})", exc.status)
    return exc


def _limit(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds, "compact")


def _tenant_rows(data: list[dict[str, Any]]) -> Rows:
    rows = Rows("TENANT", "GUARANTEED", "MAX", "RUNNING_GPUS", "PENDING", "DEFAULT_TIME", "MAX_TIME")
    for t in data:
        rows.add(
            t["name"],
            or_dash(t.get("guaranteed_gpus")),
            or_dash(t.get("max_gpus")),
            str(t.get("running_gpus", 0)),
            str(t.get("pending_jobs", 0)),
            _limit(t.get("default_time_limit_s")),
            _limit(t.get("max_time_limit_s")),
        )
    return rows


def _echo_tenant(t: dict[str, Any], verb: str) -> None:
    quota = (
        f"guaranteed {or_dash(t.get('guaranteed_gpus'))}, max {or_dash(t.get('max_gpus'))} GPUs; "
        f"default time {_limit(t.get('default_time_limit_s'))}, max time {_limit(t.get('max_time_limit_s'))}"
    )
    click.echo(f"tenant {t['name']} {verb}: {quota}")


@click.group("tenants")
def tenants() -> None:
    """Tenants and their quotas (admins): create, list, set-quota."""


@client_command("list")
def tenants_list(api: Client, as_json: bool) -> None:
    """Every tenant (a tenant token: its own) with its quota, the GPUs it runs and its pending jobs."""
    data = api.get("/v1/tenants")
    if as_json:
        print_json(data)
        return
    emit(_tenant_rows(data))


@client_command("create")
@click.argument("name")
@_with_quota_options
def tenants_create(api: Client, name: str, as_json: bool, **quota: Any) -> None:
    """Create tenant NAME (admins), with a quota if given."""
    try:
        data = api.post("/v1/tenants", {"name": name, **_quota_body(quota)})
    except ApiError as exc:
        raise _named(exc) from None
    if as_json:
        print_json(data)
        return
    _echo_tenant(data, "created")


@client_command("set-quota")
@click.argument("name")
@_with_quota_options
def tenants_set_quota(api: Client, name: str, as_json: bool, **quota: Any) -> None:
    """Set tenant NAME's quota (admins): only the limits given change; 'none' clears one. The
    scheduler applies it at once."""
    body = _quota_body(quota)
    if not body:
        raise ApiError("nothing to change: give --guaranteed, --max, --default-time or --max-time")
    try:
        data = api.request("PATCH", f"/v1/tenants/{quote(name, safe='')}", json=body)
    except ApiError as exc:
        raise _named(exc) from None
    if as_json:
        print_json(data)
        return
    _echo_tenant(data, "set")


for _command in (tenants_list, tenants_create, tenants_set_quota):
    tenants.add_command(_command)


@click.group("tokens")
def tokens() -> None:
    """Tokens of kant serve (admins): create, list, revoke."""


def _when(wall: float | None) -> str:
    return "-" if wall is None else dt.datetime.fromtimestamp(wall).strftime("%Y-%m-%d %H:%M:%S")


@client_command("create")
@click.option("--tenant", default=None, help="A token of this tenant (its jobs only).")
@click.option("--admin", "admin", is_flag=True, help="An admin token (everything) instead.")
@click.option("--name", default="", help="What the token is for (shown by `kant tokens list`).")
@click.option(
    "--ttl",
    type=Duration(positive=True),
    default=None,
    metavar="DUR",
    help="It expires after this long (90d, 12h, ...; default: never).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the token to this file (mode 600) instead of printing it.",
)
def tokens_create(
    api: Client, tenant: str | None, admin: bool, name: str, ttl: float | None, out: Path | None, as_json: bool
) -> None:
    """Make a token (admins): --tenant NAME or --admin. The token is shown this once (kant keeps its
    hash only): it is printed alone on stdout, or written to --out."""
    if (tenant is None) == (not admin):
        raise ApiError("give --tenant NAME (a tenant's token) or --admin (an admin token)")
    body: dict[str, Any] = {"name": name, **({"ttl_s": ttl} if ttl is not None else {})}
    path = "/v1/tokens" if admin else f"/v1/tenants/{quote(str(tenant), safe='')}/tokens"
    data = api.post(path, body)
    if out is not None:
        try:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise ApiError(
                f"--out {out}: {exc.strerror or exc} (token {data['id']} was made: revoke it with "
                f"kant tokens revoke {data['id']})"
            ) from None
        with os.fdopen(fd, "w") as fh:
            fh.write(str(data["token"]) + "\n")
    if as_json:
        print_json(data if out is None else {k: v for k, v in data.items() if k != "token"})
        return
    whose = "admin" if admin else f"tenant {tenant}"
    if out is None:
        click.echo(str(data["token"]))
        click.echo(f"token {data['id']} of {whose}: shown this once; use it with KANT_TOKEN or --token-file", err=True)
    else:
        click.echo(f"token {data['id']} of {whose} written to {out} (mode 600)")


@client_command("list")
@click.option("--tenant", default=None, help="Only this tenant's tokens.")
def tokens_list(api: Client, tenant: str | None, as_json: bool) -> None:
    """Every token (admins): id, role, tenant, name, made, expires, revoked (never the token)."""
    data = api.get("/v1/tokens", params={"tenant": tenant} if tenant is not None else None)
    if as_json:
        print_json(data)
        return
    rows = Rows("ID", "ROLE", "TENANT", "NAME", "CREATED", "EXPIRES", "REVOKED")
    for t in data:
        rows.add(
            str(t["id"]),
            t["role"],
            t.get("tenant") or "-",
            t.get("name") or "-",
            _when(t["created_wall"]),
            _when(t.get("expires_wall")),
            _when(t.get("revoked_wall")),
        )
    emit(rows)


@client_command("revoke")
@click.argument("token_id", metavar="ID", type=click.IntRange(min=0))
def tokens_revoke(api: Client, token_id: int, as_json: bool) -> None:
    """Revoke token ID (admins): it stops working at once."""
    data = api.request("DELETE", f"/v1/tokens/{token_id}")
    if as_json:
        print_json(data)
        return
    click.echo(f"token {token_id}: revoked")


for _command in (tokens_create, tokens_list, tokens_revoke):
    tokens.add_command(_command)
