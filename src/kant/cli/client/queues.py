"""``kant queues show|set|reset``: the tree of queues of ``kant serve`` (admins), through its API
(``GET``/``PUT``/``DELETE /v1/queues/config``). ``set FILE`` reads a queues file (the format of
``kant serve --queues``; checked here first, so a mistake names the file and key) and puts it in
force from the next scheduling cycle; the service keeps it over a restart. ``reset`` goes back to
the tree of ``--queues FILE`` (or none)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import yaml

from kant.cli.client.common import client_command, print_json
from kant.cli.client.http import ApiError, Client
from kant.config.yaml_file import read_yaml
from kant.errors import ConfigError

__all__ = ["queues"]


@click.group("queues")
def queues() -> None:
    """The tree of queues of the service (admins): show, set, reset."""


def _echo(doc: dict[str, Any]) -> None:
    source = {"api": "set through the API", "file": "kant serve --queues FILE", None: "none"}.get(
        doc.get("source"), str(doc.get("source")))
    click.echo(f"# queues in force: {source}")
    if doc.get("queues"):
        body = {"queues": doc["queues"], **({"fair_share": doc["fair_share"]} if doc.get("fair_share") else {})}
        click.echo(yaml.safe_dump(body, sort_keys=False, default_flow_style=None).rstrip())


@client_command("show")
def queues_show(api: Client, as_json: bool) -> None:
    """The tree in force, as a queues file (with where it comes from)."""
    data = api.get("/v1/queues/config")
    if as_json:
        print_json(data)
        return
    _echo(data)


@client_command("set")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def queues_set(api: Client, file: Path, as_json: bool) -> None:
    """Put the tree of queues FILE in force (from the next scheduling cycle; kept over a restart)."""
    from kant.plugins.queues import load_queues

    try:
        load_queues(file)  # (a mistake names the file and key before anything is sent)
        body = read_yaml(file)
    except ConfigError as exc:
        raise ApiError(str(exc)) from None
    try:
        data = api.request("PUT", "/v1/queues/config", json=body)
    except ApiError as exc:
        raise ApiError(f"{file}: {exc}", exc.status) from None
    if as_json:
        print_json(data)
        return
    _echo(data)


@client_command("reset")
def queues_reset(api: Client, as_json: bool) -> None:
    """Forget the tree set through the API: back to kant serve's --queues FILE (or no queues)."""
    data = api.request("DELETE", "/v1/queues/config")
    if as_json:
        print_json(data)
        return
    _echo(data)


for _command in (queues_show, queues_set, queues_reset):
    queues.add_command(_command)
