"""This turn's changes: what the loop's rooms decide during one turn of the loop.

Every room (the job transitions of :mod:`kant.service.live.state`, the node operations, scaling) writes
here instead of into the loop's lists. At the end of the turn the loop takes the writes (job updates,
events, node updates) and commits them in one transaction; only then does it take the actions (stops,
launches) to the executor and answer the commands that wait (replies).
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

from kant.service.db.events import NewEvent
from kant.service.db.jobs import JobUpdate
from kant.service.db.nodes import NodeUpdate
from kant.service.executors.base import Launch, StopWhy

__all__ = ["TurnChanges"]


class TurnChanges:
    """The changes of the current turn, in the order they were made (see the module docstring)."""

    __slots__ = ("events", "launches", "node_updates", "replies", "stops", "updates")

    def __init__(self) -> None:
        self.updates: list[JobUpdate] = []
        self.events: list[NewEvent] = []
        self.node_updates: list[NodeUpdate] = []
        self.launches: list[Launch] = []
        self.stops: list[tuple[int, StopWhy]] = []
        self.replies: list[tuple[Future[Any], Any]] = []

    # --- written by the rooms ---------------------------------------------------------------------
    def job(self, update: JobUpdate) -> None:
        """A job's new state (written to the database)."""
        self.updates.append(update)

    def event(self, now: float, kind: str, job_id: int | None, node: str | None, tenant: str | None,
              message: str) -> None:
        """An event of the log (service time ``now``; wall time now)."""
        self.events.append(NewEvent(now, time.time(), kind, job_id, node, tenant, message))

    def node(self, name: str, state: str, reason: str | None) -> None:
        """A node's new state (written to the database)."""
        self.node_updates.append(NodeUpdate(name, state, reason))

    def launch(self, launch: Launch) -> None:
        """A run to start on the executor once the turn is committed."""
        self.launches.append(launch)

    def stop(self, job_id: int, why: StopWhy = "cancel") -> None:
        """A job's run to stop on the executor once the turn is committed."""
        self.stops.append((job_id, why))

    def reply(self, future: Future[Any] | None, result: Any) -> None:
        """The answer (or the error) for a command that waits, given once the turn is committed."""
        if future is not None:
            self.replies.append((future, result))

    # --- taken by the loop at the end of the turn ---------------------------------------------------
    def take_writes(self) -> tuple[list[JobUpdate], list[NewEvent], list[NodeUpdate]] | None:
        """The writes of the turn (None if there are none), for one transaction; they are cleared."""
        if not (self.updates or self.events or self.node_updates):
            return None
        writes = self.updates, self.events, self.node_updates
        self.updates, self.events, self.node_updates = [], [], []
        return writes

    def take_actions(self) -> tuple[list[tuple[int, StopWhy]], list[Launch]]:
        """The stops and the launches of the turn, in that order of use; they are cleared."""
        actions = self.stops, self.launches
        self.stops, self.launches = [], []
        return actions

    def take_replies(self) -> list[tuple[Future[Any], Any]]:
        replies, self.replies = self.replies, []
        return replies
