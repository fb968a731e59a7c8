"""The commands other threads put in the scheduling loop's inbox (:class:`kant.service.loop.ServiceLoop`
applies them in order, one turn at a time; a command with a ``reply`` is answered after the turn's
changes are written)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from kant.model.cluster import NodeSpec
from kant.service.live.state import Arrival

__all__ = ["AddNode", "Advance", "Arrivals", "Call", "Cancel", "Command", "NodeOp", "Reload", "Scale", "Stop"]


@dataclass
class Command:
    reply: Future[Any] | None = field(default=None, kw_only=True)


@dataclass
class Arrivals(Command):
    arrivals: Sequence[Arrival]
    posted: bool = False  # by submit_arrivals (counted: ServiceLoop.queue_stamp)


@dataclass
class Cancel(Command):
    job_id: int
    tenant: str | None  # the caller's tenant (None: admin)
    by: str


@dataclass
class NodeOp(Command):
    name: str
    op: str  # cordon, uncordon, drain, fail, repair, remove
    reason: str | None = None
    force: bool = False


@dataclass
class AddNode(Command):
    spec: NodeSpec


@dataclass
class Reload(Command):
    """Tenants or their quotas changed in the database: rebuild the policy."""


@dataclass
class Scale(Command):
    service_id: int
    replicas: int


@dataclass
class Advance(Command):
    to: float
    hold: bool = False


@dataclass
class Call(Command):
    fn: Callable[[Any], Any]  # called with the ServiceLoop, on its thread (ServiceLoop.call)


@dataclass
class Stop(Command):
    pass
