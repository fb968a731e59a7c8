"""Tentative changes to the cluster state that are committed or discarded as one.

A gang's allocation, or a preemption plan (evict victims, then place the preemptor), is made
through a :class:`Statement`: each operation is applied to the state at once, so later decisions in
the same cycle see it, and :meth:`Statement.discard` undoes them in reverse order.
:meth:`Statement.commit` makes them final and is where binds happen: a driver that runs work (the
live service) passes a :class:`Binder`, which hears every start and eviction in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from kant.model.state import ClusterState, Placement

__all__ = ["Binder", "Op", "Operation", "Statement"]


class Op(Enum):
    ALLOCATE = "allocate"
    EVICT = "evict"


@dataclass(frozen=True, slots=True)
class Operation:
    op: Op
    job: int
    placement: Placement


class Binder(Protocol):
    """Where committed decisions go (Kubernetes' Binding API): a live executor starts a job's workers
    on the nodes of its placement, and stops an evicted job's. A start that fails later comes back
    through :meth:`kant.scheduler.Scheduler.bind_failed`."""

    def bind(self, job: int, placement: Placement) -> None: ...

    def evict(self, job: int, placement: Placement) -> None: ...


class Statement:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.operations: list[Operation] = []

    def allocate(self, job: int, placement: Placement) -> None:
        self.state.allocate(job, placement)
        self.operations.append(Operation(Op.ALLOCATE, job, placement))

    def evict(self, job: int) -> Placement:
        placement = self.state.release(job)
        self.operations.append(Operation(Op.EVICT, job, placement))
        return placement

    def discard(self) -> None:
        for operation in reversed(self.operations):
            if operation.op is Op.ALLOCATE:
                self.state.release(operation.job)
            else:
                self.state.allocate(operation.job, operation.placement)
        self.operations.clear()

    def commit(self, binder: Binder | None = None) -> list[Operation]:
        """Make the operations final; ``binder`` (if any) hears each one, in order."""
        done = self.operations
        self.operations = []
        if binder is not None:
            for operation in done:
                if operation.op is Op.ALLOCATE:
                    binder.bind(operation.job, operation.placement)
                else:
                    binder.evict(operation.job, operation.placement)
        return done
