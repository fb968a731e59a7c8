"""``kant nodes``, ``drain``, ``cordon`` and ``uncordon``: the service's nodes."""

from __future__ import annotations

import click
from rich.text import Text

from kant.cli.client.common import client_command, emit, or_dash, print_json, table
from kant.cli.client.http import Client

__all__ = ["cordon", "drain", "nodes", "uncordon"]


@client_command("nodes")
def nodes(api: Client, as_json: bool) -> None:
    """Every node: GPU type and count, GPUs in use, state, leaf and spine switch."""
    data = api.get("/v1/nodes")
    if as_json:
        print_json(data)
        return
    with_reason = any(n.get("reason") for n in data)
    listing = table("NAME", "TYPE", "GPUS", "USED", "STATE", "LEAF", "SPINE", *(["REASON"] if with_reason else []))
    for n in data:
        style = {"up": "green", "cordoned": "yellow", "draining": "yellow", "drained": "yellow", "down": "red"}
        row: list[str | Text] = [Text(n["name"]), Text(n["gpu_type"]), str(n["gpus"]), or_dash(n.get("used_gpus")),
                                 Text(n["state"], style=style.get(n["state"], "")), Text(n.get("leaf") or "-"),
                                 Text(n.get("spine") or "-")]
        if with_reason:
            row.append(Text(n.get("reason") or ""))
        listing.add_row(*row)
    emit(listing)


def _node_op(api: Client, node: str, op: str, reason: str | None, as_json: bool) -> None:
    from urllib.parse import quote

    body = {"reason": reason} if reason is not None else None
    data = api.post(f"/v1/nodes/{quote(node, safe='')}/{op}", body)
    if as_json:
        print_json(data)
        return
    used = data.get("used_gpus")
    tail = f", {used} of {data['gpus']} GPUs in use" if used is not None else ""
    click.echo(f"{data['name']}: {data['state']}" + (f" ({data['reason']})" if data.get("reason") else "") + tail)


@client_command("drain")
@click.argument("node")
@click.option("--reason", default=None, help="Why (shown by `kant nodes`).")
def drain(api: Client, node: str, reason: str | None, as_json: bool) -> None:
    """Drain a node (admins): no new work; 'drained' once its jobs are done."""
    _node_op(api, node, "drain", reason, as_json)


@client_command("cordon")
@click.argument("node")
@click.option("--reason", default=None, help="Why (shown by `kant nodes`).")
def cordon(api: Client, node: str, reason: str | None, as_json: bool) -> None:
    """Cordon a node (admins): no new work; running jobs stay."""
    _node_op(api, node, "cordon", reason, as_json)


@client_command("uncordon")
@click.argument("node")
def uncordon(api: Client, node: str, as_json: bool) -> None:
    """Uncordon a cordoned or drained node (admins): it takes work again."""
    _node_op(api, node, "uncordon", None, as_json)
