"""The ``nodes`` table: the inventory, in registration order, with each node's state."""

from __future__ import annotations

import builtins
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from kant.service.db.base import Backend
from kant.service.db.schema import nodes

__all__ = ["NodeRepo", "NodeRow", "NodeUpdate"]


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One node of the inventory (``position``: registration order)."""

    name: str
    position: int
    gpu_type: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    leaf: str | None
    spine: str | None
    state: str
    reason: str | None
    updated_wall: float


@dataclass(frozen=True, slots=True)
class NodeUpdate:
    """A node's new state and reason (``wall``: updated_wall; ``None`` = now)."""

    name: str
    state: str
    reason: str | None
    wall: float | None = None


class NodeRepo:
    """The node inventory (``db.nodes``)."""

    def __init__(self, backend: Backend) -> None:
        self._db = backend

    def upsert(self, rows: Sequence[NodeRow]) -> None:
        """Insert new nodes and update known ones (by name; the last row of a name wins).

        A known node keeps its position; new nodes take the positions after the largest stored one,
        in input order (the ``position`` field of the rows is not used).
        """
        if not rows:
            return
        latest = {r.name: r for r in rows}
        with self._db.tx(write=True) as conn:
            known = set(conn.execute(sa.select(nodes.c.name).where(nodes.c.name.in_(list(latest)))).scalars())
            nxt = int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(nodes.c.position), -1))).scalar_one()) + 1
            new: list[dict[str, Any]] = []
            old: list[dict[str, Any]] = []
            for r in latest.values():
                vals = {"name": r.name, "gpu_type": r.gpu_type, "gpus": r.gpus, "cpu_milli": r.cpu_milli,
                        "memory_mib": r.memory_mib, "leaf": r.leaf, "spine": r.spine, "state": r.state,
                        "reason": r.reason, "updated_wall": r.updated_wall}
                if r.name in known:
                    old.append(vals)
                else:
                    new.append({**vals, "position": nxt})
                    nxt += 1
            self._db.insert_many(conn, nodes, new)
            self._db.update_many(conn, nodes, old)

    def write_states(self, conn: Connection, updates: Sequence[NodeUpdate]) -> None:
        """Set the nodes' states in the caller's transaction (the last update of a name wins)."""
        now = time.time()
        self._db.update_many(conn, nodes, list({
            n.name: {"name": n.name, "state": n.state, "reason": n.reason,
                     "updated_wall": now if n.wall is None else n.wall} for n in updates
        }.values()))

    def get(self, name: str) -> NodeRow | None:
        """The node ``name``, or None."""
        with self._db.tx() as conn:
            r = conn.execute(sa.select(nodes).where(nodes.c.name == name)).first()
        return None if r is None else NodeRow(*r)

    def list(self) -> builtins.list[NodeRow]:
        """Every node, by position."""
        with self._db.tx() as conn:
            return [NodeRow(*r) for r in conn.execute(sa.select(nodes).order_by(nodes.c.position))]
