"""The command-line client of ``kant serve`` (docs/cli.md): ``submit``, ``queue``, ``jobs``, ``show``,
``cancel``, ``why``, ``nodes``, ``drain``, ``cordon``, ``uncordon`` and ``top``.

Each command makes a few requests to the REST API (``/v1``) with httpx and prints a rich table, or
the API's JSON with ``--json``. The service is ``KANT_URL`` (default http://127.0.0.1:8787) or
``--url``; the token is ``--token-file``, else ``KANT_TOKEN``, else ``./kant-admin.token`` (the file
``kant serve`` writes when no token was configured). Every failure, local or remote, is one line
``error: ...`` on stderr and exit status 2; the token is never printed.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import re
import shlex
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from kant.cli._common import Duration, FiniteFloat, OneLineCommand, console, fail, out
from kant.text import format_duration

if TYPE_CHECKING:
    import httpx

__all__ = ["ApiError", "Client", "commands"]

DEFAULT_URL = "http://127.0.0.1:8787"
TOKEN_FILE = "kant-admin.token"
TIMEOUT_S = 30.0
PAGE = 1000  # the API's largest page
QUEUE_STATES = ("pending", "running")
JOB_STATES = ("pending", "running", "finished", "failed", "cancelled", "unschedulable")
STATE_STYLE = {"pending": "yellow", "running": "green", "finished": "blue", "failed": "red",
               "cancelled": "magenta", "unschedulable": "red"}
#: the submit body's fields and the options that set them (a 422 naming a field names the option too)
SUBMIT_OPTIONS = {"name": "--name", "workers": "--workers", "gpus_per_worker": "--gpus", "gpu_type": "--gpu-type",
                  "cpu_milli": "--cpu", "memory_mib": "--memory", "priority": "--priority", "estimate_s": "--estimate",
                  "duration_s": "--duration", "tenant": "--tenant", "user": "--user", "labels": "--label",
                  "command": "COMMAND", "idempotency_key": "--idempotency-key"}
_TOKEN_CHARS = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII, no spaces: what a header can carry

F = TypeVar("F", bound=Callable[..., Any])


# --- talking to the service ------------------------------------------------------------------------
class ApiError(Exception):
    """A request that did not succeed; the message is what ``error:`` prints."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Target:
    """Where the service is and which token to send (``source`` names where the token came from)."""

    url: str
    url_source: str
    token: str | None
    source: str | None


def resolve_target(url: str | None, token_file: Path | None) -> Target:
    """``--url`` / ``KANT_URL`` / the default; ``--token-file`` / ``KANT_TOKEN`` / ./kant-admin.token."""
    if url is not None:
        url_source = "--url"
    elif os.environ.get("KANT_URL"):
        url, url_source = os.environ["KANT_URL"], "KANT_URL"
    else:
        url, url_source = DEFAULT_URL, "the default URL"
    url = url.strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ApiError(f"{url_source} {url!r} is not an http:// or https:// URL")
    token: str | None
    if token_file is not None:
        token, source = _read_token(token_file, f"--token-file {token_file}"), f"--token-file {token_file}"
    elif os.environ.get("KANT_TOKEN", "").strip():
        token, source = os.environ["KANT_TOKEN"].strip(), "KANT_TOKEN"
    elif Path(TOKEN_FILE).is_file():
        token, source = _read_token(Path(TOKEN_FILE), f"./{TOKEN_FILE}"), f"./{TOKEN_FILE}"
    else:
        token, source = None, None
    if token is not None and not _TOKEN_CHARS.match(token):
        raise ApiError(f"the token of {source} is not a token: it holds spaces or characters outside printable ASCII")
    return Target(url, url_source, token, source)


def _read_token(path: Path, what: str) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ApiError(f"{what}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ApiError(f"{what}: not a text file") from None
    if not text:
        raise ApiError(f"{what}: the file is empty")
    return text.splitlines()[0].strip()


class Client:
    """A synchronous client of the API; every failure is an :class:`ApiError`."""

    def __init__(self, target: Target, timeout: float = TIMEOUT_S) -> None:
        import httpx

        self.target = target
        self.timeout = timeout
        headers = {"Accept": "application/json", "User-Agent": "kant-cli"}
        if target.token is not None:
            headers["Authorization"] = f"Bearer {target.token}"
        try:
            self._http = httpx.Client(base_url=target.url, headers=headers,
                                      timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)))
        except (httpx.InvalidURL, ValueError) as exc:
            raise ApiError(f"{target.url_source} {target.url!r} is not a URL: {exc}") from None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, path: str, params: Any = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        return self.request("POST", path, json=body, headers=headers)

    def request(self, method: str, path: str, *, params: Any = None, json: Any = None,
                headers: dict[str, str] | None = None, timeout: float | None = None, text: bool = False) -> Any:
        """The answer's JSON (its text with ``text``); ``timeout`` overrides the client's."""
        import httpx

        url = self.target.url
        wait = self.timeout if timeout is None else timeout
        try:
            r = self._http.request(method, path, params=params, json=json, headers=headers,
                                   timeout=httpx.Timeout(wait, connect=min(wait, 10.0)))
        except httpx.TimeoutException:
            raise ApiError(f"cannot reach kant serve at {url}: no answer within {wait:g} s") from None
        except httpx.UnsupportedProtocol:
            raise ApiError(f"{self.target.url_source} {url!r} is not an http:// or https:// URL") from None
        except httpx.HTTPError as exc:
            raise ApiError(f"cannot reach kant serve at {url}: {self._scrub(_reason(exc))}") from None
        if r.status_code >= 400:
            raise ApiError(f"{r.status_code}: {self._scrub(self._detail(r))}", r.status_code)
        if text:
            return r.text
        try:
            return r.json()
        except ValueError:
            raise ApiError(f"{url} answered {method} {path} with something that is not JSON: is it kant serve?") \
                from None

    def _detail(self, r: httpx.Response) -> str:
        try:
            body = r.json()
        except ValueError:
            body = None
        if isinstance(body, dict):
            message, detail = body.get("message"), body.get("detail")
            if isinstance(message, str) and message:
                text = message
            elif isinstance(detail, str) and detail:
                text = detail
            elif detail is not None:
                text = json.dumps(detail, separators=(",", ":"))[:500]
            else:
                text = r.reason_phrase or "error"
        else:
            text = r.reason_phrase or (r.text.strip()[:200] or "error")
        if r.status_code == 401:
            text += (f" (the token of {self.target.source})" if self.target.source is not None
                     else " (give one with KANT_TOKEN or --token-file)")
        return text

    def _scrub(self, text: str) -> str:
        token = self.target.token
        return text.replace(token, "<token>") if token else text


def _reason(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", text)
    return text[:1].lower() + text[1:]


# --- option helpers ----------------------------------------------------------------------------------
_Command = OneLineCommand


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


def _job_id(text: str) -> int:
    if not re.fullmatch(r"\d{1,18}", text.strip()):
        fail(f"JOB: {text!r} is not a job id (a number)")
    return int(text)


def _client_command(name: str, json_option: bool = True) -> Callable[[F], click.Command]:
    """``@cli.command`` for a client command: adds ``--url`` and ``--token-file`` (and ``--json``), opens a
    :class:`Client`, passes it as the first argument and turns an :class:`ApiError` into ``error:``."""

    def decorate(f: F) -> click.Command:
        @functools.wraps(f)
        def run(*args: Any, url: str | None, token_file: Path | None, **kw: Any) -> None:
            try:
                with Client(resolve_target(url, token_file)) as api:
                    f(api, *args, **kw)
            except ApiError as exc:
                fail(str(exc))

        options = [
            click.option("--url", default=None, metavar="URL",
                         help=f"The service (default: $KANT_URL, else {DEFAULT_URL})."),
            click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                         help=f"A file holding the token (default: $KANT_TOKEN, else ./{TOKEN_FILE})."),
        ]
        if json_option:
            options.append(click.option("--json", "as_json", is_flag=True, help="Print the API's JSON instead."))
        wrapped: Callable[..., Any] = run
        for option in reversed(options):
            wrapped = option(wrapped)
        command = click.command(name, cls=_Command)(wrapped)
        shared = {"url", "token_file", "as_json"}  # listed after the command's own options in --help
        command.params = ([p for p in command.params if p.name not in shared] +
                          [p for p in command.params if p.name in shared])
        return command

    return decorate


# --- formatting ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Clock:
    """The service's clock: ``now`` (service seconds) and its kind (wall, accelerated, manual)."""

    now: float
    kind: str

    def at(self, t: float | None, absolute: bool = False) -> str:
        """A service time: ``3m20s ago`` or (``absolute``) the clock reading."""
        if t is None:
            return "-"
        if absolute:
            return self.reading(t)
        return f"{format_duration(self.now - t, 'compact')} ago"

    def reading(self, t: float) -> str:
        if self.kind == "wall":
            return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")
        s = max(0, round(t))
        days, rest = divmod(s, 86400)
        clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
        return f"{days}d {clock}" if days else clock


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


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _n(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _opt(x: Any) -> str:
    return "-" if x is None else str(x)


def _table(*columns: str, title: str | None = None) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold", title=title, title_justify="left",
                  title_style="bold")
    for name in columns:
        table.add_column(name, no_wrap=name in ("JOBID", "STATE", "GANG", "NAME", "TYPE"))
    return table


def _emit(renderable: RenderableType) -> None:
    """Print a table: on a terminal as rich lays it out; into a pipe or file unwrapped, plain, without
    trailing blanks (``kant queue | grep`` sees one line per job)."""
    if out.is_terminal:
        out.print(renderable)
        return
    wide = Console(width=100_000, color_system=None, force_terminal=False, highlight=False)
    with wide.capture() as cap:
        wide.print(renderable)
    click.echo("\n".join(line.rstrip() for line in cap.get().splitlines()))


def _print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2))


# --- jobs ------------------------------------------------------------------------------------------
@_client_command("submit")
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
@click.option("--tenant", default=None, help="Whose job (admins; a tenant token submits its own).")
@click.option("--user", default=None, help="The user within the tenant (default: the tenant).")
@click.option("--label", "labels", multiple=True, callback=_label_option, metavar="KEY=VALUE",
              help="A label; repeat for more.")
@click.option("--idempotency-key", default=None, metavar="KEY",
              help="A retried submit with the same key makes no second job.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def submit(api: Client, name: str | None, workers: int, gpus: int, gpu_type: str | None, cpu: int, memory: int,
           priority: int, estimate: float | None, duration: float | None, tenant: str | None, user: str | None,
           labels: dict[str, str], idempotency_key: str | None, command: tuple[str, ...], as_json: bool) -> None:
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
                            "memory_mib": memory, "priority": priority, "labels": labels}
    for key, value in (("gpu_type", gpu_type), ("estimate_s", estimate), ("duration_s", duration),
                       ("tenant", tenant), ("user", user), ("command", cmd)):
        if value is not None:
            body[key] = value
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
    try:
        answer = api.post("/v1/jobs", body, headers=headers)
    except ApiError as exc:
        if exc.status == 422 and tenant is None and "names the tenant" in str(exc):
            raise ApiError(f"{exc} (an admin token submits with --tenant)", exc.status) from None
        field = re.match(r"^\d+: (?:body\.)?([a-z_]+)\b", str(exc))
        if exc.status == 422 and field is not None and field.group(1) in SUBMIT_OPTIONS:
            raise ApiError(f"{exc} ({SUBMIT_OPTIONS[field.group(1)]})", exc.status) from None
        raise
    if as_json:
        _print_json(answer)
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


def _job_table(jobs: Iterable[dict[str, Any]], clock: Clock, absolute: bool, history: bool) -> Table:
    columns = ["JOBID", "NAME", "TENANT", "STATE", "GANG", "SUBMITTED", "STARTED"]
    if history:
        columns += ["END", "EXIT"]
    table = _table(*columns, "NODES/REASON")
    for job in jobs:
        if job["state"] == "pending":
            where = Text(job.get("reason") or "", style="dim")
        else:
            where = Text(_nodes(job.get("placement")) or (job.get("reason") or ""))
        row: list[str | Text] = [str(job["id"]), Text(job["name"] or "-"), Text(job["tenant"]), _state(job["state"]),
                                 _gang(job), clock.at(job["submit_time"], absolute),
                                 clock.at(job["start_time"], absolute)]
        if history:
            row += [clock.at(job["end_time"], absolute), _opt(job["exit_code"])]
        table.add_row(*row, where)
    return table


def _list_jobs(api: Client, *, states: Sequence[str], tenant: str | None, limit: int, desc: bool, absolute: bool,
               as_json: bool, history: bool) -> None:
    params: dict[str, Any] = {"order": "desc" if desc else "asc"}
    if states:
        params["state"] = list(states)
    if tenant is not None:
        params["tenant"] = tenant
    items, more = _pages(api, params, limit)
    if as_json:
        _print_json({"items": items, "next": more})
        return
    clock = _clock(api)
    _emit(_job_table(items, clock, absolute, history))
    if more is not None:
        console.print(f"(the first {len(items)} jobs; more with --limit)", highlight=False)


_limit = functools.partial(click.option, "--limit", type=click.IntRange(min=1), show_default=True)
_absolute = click.option("--absolute", is_flag=True,
                         help="Times as the service clock reads them instead of 'ago'.")


@_client_command("queue")
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


@_client_command("jobs")
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
    return text


@_client_command("show")
@click.argument("job")
@_absolute
def show(api: Client, job: str, absolute: bool, as_json: bool) -> None:
    """One job: its fields and its events."""
    data = api.get(f"/v1/jobs/{_job_id(job)}")
    if as_json:
        _print_json(data)
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
        ("priority", str(data["priority"])),
        ("estimate", format_duration(data["estimate_s"], "compact") if data.get("estimate_s") is not None else "-"),
        ("duration", format_duration(data["duration_s"], "compact") if data.get("duration_s") is not None else "-"),
        ("command", Text(data.get("command") or "-")),
        ("labels", Text(", ".join(f"{k}={v}" for k, v in data["labels"].items()) or "-")),
        ("submitted", clock.at(data["submit_time"], absolute)),
        ("first started", clock.at(data["first_start_time"], absolute)),
        ("started", clock.at(data["start_time"], absolute)),
        ("ended", clock.at(data["end_time"], absolute)),
        ("nodes", Text(_nodes(data.get("placement")) or "-")),
        ("runs", str(data["runs"])),
        ("exit code", _opt(data["exit_code"])),
    ]
    for label, value in rows:
        fields.add_row(label, value)
    events = _table("TIME", "EVENT", "NODE", "MESSAGE", title="events")
    for ev in data["events"]:
        events.add_row(clock.at(ev["time"], absolute), ev["kind"], Text(ev.get("node") or ""), Text(ev["message"]))
    _emit(Group(fields, Text(""), events))


@_client_command("cancel", json_option=False)
@click.argument("job_ids", metavar="JOB...", nargs=-1, required=True)
def cancel(api: Client, job_ids: tuple[str, ...]) -> None:
    """Cancel jobs (pending or running; every worker stops). Tries every job; exits 2 if any failed."""
    ids = [_job_id(j) for j in job_ids]
    failed = 0
    for job_id in ids:
        try:
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


@_client_command("why")
@click.argument("job")
def why(api: Client, job: str, as_json: bool) -> None:
    """Why a job waits (the scheduler's reason) and how many jobs are ahead of it."""
    data = api.get(f"/v1/jobs/{_job_id(job)}/why")
    if as_json:
        _print_json(data)
    else:
        click.echo(_why_text(data))


@_client_command("logs", json_option=False)
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


# --- nodes -----------------------------------------------------------------------------------------
@_client_command("nodes")
def nodes(api: Client, as_json: bool) -> None:
    """Every node: GPU type and count, GPUs in use, state, leaf and spine switch."""
    data = api.get("/v1/nodes")
    if as_json:
        _print_json(data)
        return
    with_reason = any(n.get("reason") for n in data)
    table = _table("NAME", "TYPE", "GPUS", "USED", "STATE", "LEAF", "SPINE", *(["REASON"] if with_reason else []))
    for n in data:
        style = {"up": "green", "cordoned": "yellow", "draining": "yellow", "drained": "yellow", "down": "red"}
        row: list[str | Text] = [Text(n["name"]), Text(n["gpu_type"]), str(n["gpus"]), _opt(n.get("used_gpus")),
                                 Text(n["state"], style=style.get(n["state"], "")), Text(n.get("leaf") or "-"),
                                 Text(n.get("spine") or "-")]
        if with_reason:
            row.append(Text(n.get("reason") or ""))
        table.add_row(*row)
    _emit(table)


def _node_op(api: Client, node: str, op: str, reason: str | None, as_json: bool) -> None:
    from urllib.parse import quote

    body = {"reason": reason} if reason is not None else None
    data = api.post(f"/v1/nodes/{quote(node, safe='')}/{op}", body)
    if as_json:
        _print_json(data)
        return
    used = data.get("used_gpus")
    tail = f", {used} of {data['gpus']} GPUs in use" if used is not None else ""
    click.echo(f"{data['name']}: {data['state']}" + (f" ({data['reason']})" if data.get("reason") else "") + tail)


@_client_command("drain")
@click.argument("node")
@click.option("--reason", default=None, help="Why (shown by `kant nodes`).")
def drain(api: Client, node: str, reason: str | None, as_json: bool) -> None:
    """Drain a node (admins): no new work; 'drained' once its jobs are done."""
    _node_op(api, node, "drain", reason, as_json)


@_client_command("cordon")
@click.argument("node")
@click.option("--reason", default=None, help="Why (shown by `kant nodes`).")
def cordon(api: Client, node: str, reason: str | None, as_json: bool) -> None:
    """Cordon a node (admins): no new work; running jobs stay."""
    _node_op(api, node, "cordon", reason, as_json)


@_client_command("uncordon")
@click.argument("node")
def uncordon(api: Client, node: str, as_json: bool) -> None:
    """Uncordon a cordoned or drained node (admins): it takes work again."""
    _node_op(api, node, "uncordon", None, as_json)


# --- the cluster now -------------------------------------------------------------------------------
def _frame(data: dict[str, Any], clock: Clock, url: str, problem: str | None = None) -> RenderableType:
    head = Text.assemble(("kant", "bold"), f" at {url} · policy {data['policy']} · ",
                         f"{clock.reading(data['now'])} ({clock.kind} clock) · cycle {data['cycles']}")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    grid.add_row("GAR", f"{_pct(data['gar'])} of all GPUs allocated")
    grid.add_row("SOR", f"{_pct(data['sor'])} of what could be allocated")
    grid.add_row("GFR", f"{_pct(data['gfr_nodes'])} of up nodes partly used; "
                        f"{_pct(data['gfr_gpus'])} of free GPUs on them")
    grid.add_row("GPUs", f"{data['total_gpus']}: {data['allocated_gpus']} allocated, {data['free_gpus']} free, "
                         f"{data['down_gpus']} down, {data['cordoned_gpus']} idle on cordoned nodes")
    grid.add_row("queue", f"{_n(data['queue_len'], 'job')} pending for {_n(data['pending_gpus'], 'GPU')}; "
                          f"{_n(data['running_jobs'], 'job')} running")
    tenants = _table("TENANT", "RUNNING GPUS", "GUARANTEED", "MAX", "PENDING JOBS")
    for name, use in data["tenants"].items():
        tenants.add_row(Text(name), str(use["running_gpus"]), _opt(use.get("guaranteed_gpus")),
                        _opt(use.get("max_gpus")), str(use["pending_jobs"]))
    others = data.get("others")
    if others is not None:
        tenants.add_row(Text("others", style="dim"), str(others["running_gpus"]), "-", "-",
                        str(others["pending_jobs"]))
    parts: list[RenderableType] = [head, grid, Text(""), tenants]
    if not data["quota_enforced"]:
        parts.append(Text(f"(policy {data['policy']} does not enforce quotas: they are shown, not applied)",
                          style="dim"))
    if problem is not None:
        parts.append(Text.assemble(("error:", "bold red"), f" {problem} (retrying)"))
    return Group(*parts)


@_client_command("top")
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
        _emit(frame())
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
                    _emit(frame())
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


# --- what-if ----------------------------------------------------------------------------------------
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


def _whatif_local(snapshot: Path, body: dict[str, Any], html: Path | None) -> dict[str, Any]:
    """Run a what-if on a saved snapshot here (no service needed)."""
    from kant.config.policy import load_policy, parse_policy
    from kant.errors import KantError
    from kant.twin import TwinSnapshot
    from kant.twin.whatif import NodeTemplate, Scenario, compare

    try:
        data = json.loads(snapshot.read_text(encoding="utf-8"))
    except OSError as exc:
        fail(f"{snapshot}: {exc.strerror or exc}")
    except ValueError as exc:
        fail(f"{snapshot}: not JSON: {exc}")
    try:
        snap = TwinSnapshot.from_dict(data, str(snapshot))
        scenarios = []
        for sc in body["scenarios"]:
            pol = sc.get("policy")
            policy = (None if pol is None else load_policy(pol) if isinstance(pol, str)
                      else parse_policy(pol, str(sc["name"])))
            node = sc.get("node")
            scenarios.append(Scenario(sc["name"], policy, int(sc.get("add_nodes", 0)),
                                      None if node is None else NodeTemplate(**node), tuple(sc.get("drain", ())),
                                      {t: (q["guaranteed"], q["max"]) for t, q in sc.get("quotas", {}).items()}))
        t0 = time.perf_counter()
        results = compare(snap, scenarios, horizon_s=float(body["horizon_h"]) * 3600.0, runs=int(body["runs"]))
    except KantError as exc:
        fail(str(exc))
    if html is not None:
        from kant.twin.report import write_whatif_html

        write_whatif_html(html, snap, results)
    return {"as_of": snap.now, "horizon_s": float(body["horizon_h"]) * 3600.0,
            "runs": int(results[0].prediction.starts.shape[0]), "scenarios": [r.to_dict() for r in results],
            "seconds": time.perf_counter() - t0}


@_client_command("whatif")
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
        data = _whatif_local(snapshot, body, html)
    else:
        if html is not None:
            page = api.request("POST", "/v1/whatif", params={"format": "html"}, json=body, timeout=600.0, text=True)
            html.write_text(page, encoding="utf-8")
        data = api.request("POST", "/v1/whatif", json=body, timeout=600.0)
    if as_json:
        _print_json(data)
        return
    _emit(_whatif_tables(data))
    if html is not None:
        click.echo(f"wrote {html}")


def _whatif_tables(data: dict[str, Any]) -> Group:
    scs = data["scenarios"]
    now = float(data["as_of"])
    ahead = format_duration(data["horizon_s"], "compact")
    head = _table("", *(sc["name"] for sc in scs), title=f"what if, {ahead} ahead ({data['runs']} sampled run(s) each)")
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("policy", lambda sc: str(sc["policy"])),
        ("GAR", lambda sc: _pct(sc["gar"])),
        ("GFR (nodes)", lambda sc: _pct(sc["gfr_nodes"])),
        ("pending now", lambda sc: f"{sc['waits']['pending']:,}"),
        ("start in horizon", lambda sc: f"{sc['waits']['started']:,}"),
        ("wait P50", lambda sc: _opt_span(sc["waits"]["p50"])),
        ("wait P90", lambda sc: _opt_span(sc["waits"]["p90"])),
        ("wait max", lambda sc: _opt_span(sc["waits"]["max"])),
    ]
    for label, cell in rows:
        head.add_row(label, *(cell(sc) for sc in scs))
    jobs = _table("JOB", *(sc["name"] for sc in scs), title="predicted start from now (P50)")
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


#: every client command, for ``kant.cli.main``
commands: tuple[click.Command, ...] = (submit, queue, jobs, show, cancel, why, logs, nodes, drain, cordon, uncordon,
                                       top, whatif)
