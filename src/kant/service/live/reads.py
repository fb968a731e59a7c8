"""Reads of the live state for the API, answered on the loop's thread (through ``ServiceLoop.call``):
why a job waits and its place in the queue, the reasons of a page of jobs, the nodes as listed, and
the twin's snapshot.

The first pending job (asked once per job on a page of reasons) is remembered until the state changes
(:class:`~kant.stamp.Stamped`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kant.framework.status import Status
from kant.service.errors import NotFound
from kant.service.live.state import Active, LiveState, describe_nodes
from kant.service.live.view import NodeView
from kant.stamp import Stamped
from kant.twin.arrivals import ARRIVAL_COLUMNS
from kant.twin.snapshot import TwinSnapshot

__all__ = ["Reads"]


def held_reason(info: Active) -> str:
    """Why a job a user holds waits."""
    return f"JobHeld: held by {info.held} (kant release {info.id})"


class Reads:
    """The API's reads of ``live`` (see the module docstring)."""

    def __init__(self, live: LiveState) -> None:
        self.live = live
        self._head: Stamped[int | None] = Stamped(None)  # the first pending job (see first_pending)

    def queue_stamp(self) -> tuple[int, int, int]:
        """What the queue's order and its reasons were read at: the state's version, the scheduler's
        cycles and the queue's length (with the scheduler, by identity: a rebuild makes a new one).
        Plain reads of counters, so another thread may take it to check a copy is still fresh."""
        sched = self.live.sched
        return (self.live.state_version, sched.cycles, len(sched.queue))

    def first_pending(self, now: float) -> int | None:
        """The first pending job's row in queue order, remembered until the state changes."""
        sched = self.live.sched
        stamp = self.queue_stamp()
        head = self._head
        if not head.fresh(sched, stamp):
            head.keep(sched, stamp, sched.queue.head(sched.framework.dynamic_key(now)))
        return head.value

    def why_pending(self, info: Active, now: float) -> str:
        """Why the pending job ``info`` waits, in words."""
        live = self.live
        sched = live.sched
        if sched.cycles <= info.queued_cycle:  # a reason of its shape would be older than the job
            why = "waiting for the next scheduling cycle"
        elif (head := self.behind(info, now)) is not None:
            # the policy's walk stopped before it (a blocking head, a backfill depth): say behind what
            status = sched.pending_status(head)
            why = (f"waits behind job {live.ids[head]}, first in the queue, where the last cycle stopped: "
                   f"{status if status is not None else 'not yet considered'}")
        else:
            why = sched.why_pending(info.row)
        return why if info.requeued is None else f"{why}; back in the queue after: {info.requeued}"

    def behind(self, info: Active, now: float) -> int | None:
        """The row of the job first in the queue, if the last cycle stopped there without reaching the
        pending job ``info`` (None otherwise)."""
        sched = self.live.sched
        if sched.cycles <= info.queued_cycle or sched.pending_status(info.row) is not None:
            return None
        head = self.first_pending(now)
        return head if head is not None and head != info.row else None

    def why(self, job_id: int, now: float) -> dict[str, Any]:
        """A pending or running job's state, the reason, and (pending) its place in the queue."""
        info = self.live.active.get(job_id)
        if info is None:
            held = self.live.deps.held.get(job_id)
            if held is not None:  # waits for its dependency, outside the queue
                return {"state": "pending", "reason": held.reason(), "plugin": "dependency", "position": None,
                        "queue_len": len(self.live.sched.queue)}
            parked = self.live.parked_task(job_id) if self.live.arrays else None
            if parked is not None:  # waits for a place in its array (%N)
                return {"state": "pending", "reason": parked[1].reason(parked[0]), "plugin": "array",
                        "position": None, "queue_len": len(self.live.sched.queue)}
            raise NotFound(f"job {job_id} is not pending or running")
        sched = self.live.sched
        if info.row in sched.running:
            names = sched.cluster.names
            nodes = describe_nodes([names[n] for n in sched.state.allocations[info.row].nodes])
            return {"state": "running", "reason": f"running since {info.start:g} on {nodes}", "position": None}
        if info.held is not None:
            return {"state": "pending", "reason": held_reason(info), "plugin": "hold", "position": None,
                    "queue_len": len(sched.queue)}
        status: Status | None = sched.pending_status(info.row)
        return {
            "state": "pending",
            "reason": self.why_pending(info, now),
            "plugin": status.plugin if status is not None else None,
            "position": sched.queue.position(info.row, sched.framework.dynamic_key(now)),
            "queue_len": len(sched.queue),
            "behind": None if (head := self.behind(info, now)) is None else self.live.ids[head],
        }

    def reasons(self, job_ids: Sequence[int], now: float) -> dict[int, str]:
        """Why each of ``job_ids`` that is pending waits (the others are left out)."""
        live = self.live
        out = {}
        for job_id in job_ids:
            info = live.active.get(job_id)
            if info is not None and info.row in live.sched.queue:
                out[job_id] = self.why_pending(info, now)
            elif info is None and (held := live.deps.held.get(job_id)) is not None:
                out[job_id] = held.reason()
            elif info is not None and info.held is not None:
                out[job_id] = held_reason(info)
            elif info is None and live.arrays and (parked := live.parked_task(job_id)) is not None:
                out[job_id] = parked[1].reason(parked[0])
        return out

    def twin_snapshot(self, now: float, resolution_s: float = 1.0) -> TwinSnapshot:
        """The live state for the digital twin (``resolution_s``: how late a start can be on the
        service clock, kept in its info: the band is at least that wide)."""
        live = self.live
        cols = list(zip(*live.arrival_log, strict=True)) if live.arrival_log else []
        arrivals = dict(zip(ARRIVAL_COLUMNS, cols, strict=True)) if cols else {}
        return TwinSnapshot.capture(live.sched, now, ids=live.ids, ratios=[r for _, r, _ in live.ratios],
                                    planned=[p for p, _, _ in live.ratios], ended=[e for _, _, e in live.ratios],
                                    ratios_from=live.ratios_from, arrivals=arrivals,
                                    info={"state_version": live.state_version, "resolution_s": resolution_s})

    def node_views(self) -> list[NodeView]:
        """Every node as the API lists it (a draining node with nothing left on it shows as drained)."""
        live = self.live
        cluster = live.sched.cluster
        used = live.sched.state.used_gpus().tolist()
        out = []
        for i, name in enumerate(cluster.names):
            row = live.nodes[name]
            st = "drained" if row.state == "draining" and used[i] == 0 else row.state
            out.append(NodeView(name, row.gpu_type, int(cluster.gpus[i]), used[i], st,
                                cluster.leaf_names[int(cluster.leaf[i])], cluster.spine_names[int(cluster.spine[i])],
                                int(cluster.cpu_milli[i]), int(cluster.memory_mib[i])))
        return out
