"""Node operations of the live cluster: cordon, drain, uncordon, fail, repair, remove and add, from an
operator (``kant nodes ...``, the API) or from the executor (a node that joined or was lost).

Each changes the scheduler's node flags (or rebuilds it on the new set of nodes), the node's row (a
node update and an event in the turn's changes), and, for a failed node, the jobs that ran there: they
go back to the queue. A node the executor reported lost is repaired when the executor reports it back;
one an operator failed stays down until an operator repairs it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from kant.errors import KantError
from kant.model.cluster import Cluster, NodeSpec
from kant.scheduler import CORDONED, DOWN
from kant.service.db.database import Database
from kant.service.db.nodes import NodeRow
from kant.service.errors import Conflict, Invalid, NotFound
from kant.service.executors.base import NODE_LOST_PREFIX, NodeEvent
from kant.service.live.state import LiveState

__all__ = ["NodeOps", "flags_of", "register"]

log = logging.getLogger("kant.serve")

def flags_of(state: str) -> int:
    """The scheduler's node flags of a node state as the database stores it."""
    return {"cordoned": CORDONED, "draining": CORDONED, "down": DOWN}.get(state, 0)


def register(db: Database, cluster: Cluster) -> list[NodeRow]:
    """Write a first start's cluster to the database (every node up); returns the stored rows."""
    wall = time.time()
    rows = [NodeRow(name, i, cluster.gpu_type_names[int(cluster.gpu_type[i])], int(cluster.gpus[i]),
                    int(cluster.cpu_milli[i]), int(cluster.memory_mib[i]), cluster.leaf_names[int(cluster.leaf[i])],
                    cluster.spine_names[int(cluster.spine[i])], "up", None, wall)
            for i, name in enumerate(cluster.names)]
    db.nodes.upsert(rows)
    return db.nodes.list()


class NodeOps:
    """The node operations, on the loop's live state (see the module docstring)."""

    def __init__(self, live: LiveState, db: Database) -> None:
        self.live = live
        self.db = db

    def _index(self, name: str) -> int:
        try:
            return self.live.sched.cluster.names.index(name)
        except ValueError:
            raise NotFound(f"no node {name!r}") from None

    def _set_state(self, name: str, state: str, reason: str | None, now: float, kind: str) -> None:
        live = self.live
        live.nodes[name] = replace(live.nodes[name], state=state, reason=reason)
        live.changes.node(name, state, reason)
        live.changes.event(now, kind, None, name, None, reason or kind)

    def apply(self, name: str, op: str, now: float, *, reason: str | None = None, force: bool = False) -> str:
        """Operation ``op`` (cordon, drain, uncordon, fail, repair, remove) on node ``name``; returns the
        node's new state."""
        live = self.live
        sched = live.sched
        node = self._index(name)
        state = live.nodes[name].state
        if op == "cordon":
            sched.cordon(node)
            new = "cordoned" if state != "down" else state
        elif op == "drain":
            sched.cordon(node)
            new = "draining" if state != "down" else state
        elif op == "uncordon":
            sched.uncordon(node)
            new = "up" if state != "down" else state
        elif op == "fail":
            for row, _ in sched.fail_node(node, now):
                info = live.active[live.ids[row]]
                live.ran(info)
                live.changes.stop(info.id)
                live.requeue(info, now, f"node {name} failed", "requeued", name)
            new = "down"
        elif op == "repair":
            sched.uncordon(node)
            sched.repair_node(node)
            new = "up"
        elif op == "remove":
            return self._remove(name, node, now, reason, force)
        else:
            raise Invalid(f"unknown node operation {op!r}")
        if state == "down" and new == "down" and op != "fail":
            # a failed node stays down until repaired: cordon, drain or uncordon keeps why it failed
            live.changes.event(now, f"node-{op}", None, name, None, reason or f"node-{op}")
            live.instant.changed = True
            return new
        self._set_state(name, new, reason, now, f"node-{op}")
        live.instant.changed = True
        return new

    def _remove(self, name: str, node: int, now: float, reason: str | None, force: bool) -> str:
        """Remove the node: the scheduler is rebuilt without it first, and only once that succeeded is
        the removal recorded (a rebuild the policy refuses, such as a pending gang that would no longer
        fit, leaves the node where it was, in memory and in the database)."""
        live = self.live
        if live.sched.state.jobs_on(node):
            if not force:
                raise Invalid(f"node {name} still runs jobs: drain it first, or remove with force")
            self.apply(name, "fail", now, reason="removed")
        row = live.nodes.pop(name)
        try:
            live.rebuild(now)
        except KantError as exc:
            live.nodes[name] = row
            raise Invalid(f"node {name} cannot be removed: {exc}") from None
        live.changes.node(name, "removed", reason)
        live.changes.event(now, "node-remove", None, name, None, reason or "node-remove")
        return "removed"

    def add(self, spec: NodeSpec, now: float) -> str:
        """A new node (a name removed before comes back at its old position); the scheduler is rebuilt."""
        live, db = self.live, self.db
        if spec.name in live.nodes:
            raise Conflict(f"node {spec.name!r} exists")
        position = max((n.position for n in db.nodes.list()), default=-1) + 1
        existing = db.nodes.get(spec.name)
        if existing is not None:
            position = existing.position
        row = NodeRow(spec.name, position, spec.gpu_type, spec.gpus, spec.cpu_milli, spec.memory_mib, spec.leaf,
                      spec.spine, "up", None, time.time())
        db.nodes.upsert([row])
        live.nodes[spec.name] = row
        live.changes.event(now, "node-add", None, spec.name, None, f"{spec.gpus} x {spec.gpu_type}")
        try:
            live.rebuild(now)
        except KantError:
            del live.nodes[spec.name]
            db.nodes.upsert([replace(row, state="removed")])
            raise
        return "up"

    def executor_event(self, ev: NodeEvent, now: float) -> None:
        """A node joined or left the executor's cluster: add a new node, repair one the executor had
        reported lost, fail one it lost (its jobs go back to the queue)."""
        row = self.live.nodes.get(ev.name)
        try:
            if ev.kind == "up":
                if row is None and ev.spec is not None:
                    self.add(ev.spec, now)
                elif row is not None and row.state == "down" and (row.reason or "").startswith(NODE_LOST_PREFIX):
                    self.apply(ev.name, "repair", now, reason=f"{NODE_LOST_PREFIX}{ev.reason or 'back'}")
            elif row is not None and row.state != "down":
                self.apply(ev.name, "fail", now, reason=ev.reason or f"{NODE_LOST_PREFIX}lost")
        except KantError as exc:
            log.warning("node %s (%s from the executor): %s", ev.name, ev.kind, exc)
