"""The service database: the backend and one repository per table group, plus the loop turn's one
write across tables (:meth:`Database.apply`).

Every public method runs one transaction and returns plain frozen dataclasses, so rows can cross
threads.
"""

from __future__ import annotations

from collections.abc import Sequence

from kant.service.db.base import Backend
from kant.service.db.events import EventRepo, NewEvent
from kant.service.db.jobs import JobRepo, JobUpdate
from kant.service.db.meta import MetaRepo
from kant.service.db.nodes import NodeRepo, NodeUpdate
from kant.service.db.runs import RunRepo, RunRow
from kant.service.db.services import ServiceRepo
from kant.service.db.tenants import TenantRepo
from kant.service.db.tokens import TokenRepo

__all__ = ["Database"]


class Database(Backend):
    """The service database at ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``); thread-safe.

    Queries go through one repository per table group: ``db.jobs``, ``db.nodes``, ``db.tenants``,
    ``db.tokens``, ``db.services``, ``db.events``, ``db.meta`` and ``db.runs`` (ended runs).
    """

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.jobs = JobRepo(self)
        self.nodes = NodeRepo(self)
        self.tenants = TenantRepo(self)
        self.tokens = TokenRepo(self)
        self.services = ServiceRepo(self)
        self.events = EventRepo(self)
        self.meta = MetaRepo(self)
        self.runs = RunRepo(self)

    def apply(
        self, updates: Sequence[JobUpdate], events: Sequence[NewEvent], nodes: Sequence[NodeUpdate] = (), *,
        epoch: int | None = None,
    ) -> list[RunRow]:
        """Write job updates, events and node states in one transaction (a turn of the loop), and a
        ``job_runs`` row for every run the updates end (:mod:`kant.service.db.runs`); returns those.

        With ``epoch``, nothing is written and :class:`~kant.service.errors.Fenced` is raised unless
        meta['leader_epoch'] is ``str(epoch)``. Several updates of one job apply in order; updates of
        unknown ids and nodes change nothing.
        """
        with self.tx(write=True, ordered=True, epoch=epoch) as conn:
            ended = self.runs.record(conn, updates, events)
            self.jobs.write_updates(conn, updates)
            self.nodes.write_states(conn, nodes)
            self.events.append(conn, events)
        return ended
