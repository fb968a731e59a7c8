"""The operation log of a cycle, and an undo log for trials on the cluster state.

A :class:`Statement` is Volcano's name, but not a full transaction. What it is, exactly:

* every :meth:`Statement.allocate` / :meth:`Statement.evict` is applied to the
  :class:`~kant.model.state.ClusterState` at once (later decisions in the same cycle see it) and
  logged;
* :meth:`Statement.discard` undoes the logged operations on the **cluster state only**, in reverse
  order, leaving the free capacity, the aggregates, the node classes and the live placements as they
  were. It does not undo anything else: the pending queue, ``ctx.started`` / ``ctx.evicted``, what
  listeners (quota usage, attained service) heard, and the state's change counters (``version``,
  the release log: a discarded trial counts as changes there). So discard is for side-effect-free
  *trials* that touch nothing but the state, such as the preempt action's plan simulation
  (:func:`kant.actions.victims.choose_victims`): evict candidates, try to place, discard;
* :meth:`Statement.commit` ends the log and is where binds happen: a driver that runs work (the
  live service) passes a :class:`Binder`, which hears every start and eviction in order;
* :meth:`Statement.resize` changes a running elastic job's placement (:mod:`kant.actions.elastic`):
  logged with the old placement, undone by putting it back, and heard by a binder as ``resize``
  (a binder without one hears an eviction then a bind).

A cycle's own statement (``ctx.statement``) is only ever committed: ``start_job`` and ``evict_job``
(:mod:`kant.actions.common`) change the queue and tell the listeners along with it, and a gang gets
all of its workers or none because the runner places the whole gang *before* allocating it, not
because anything is rolled back.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from kant.model.state import ClusterState, Placement, slot_setters

__all__ = ["Binder", "Op", "Operation", "ResizeBinder", "Statement"]


class Op(Enum):
    ALLOCATE = "allocate"
    EVICT = "evict"
    RESIZE = "resize"


@dataclass(frozen=True, slots=True, init=False)
class Operation:
    op: Op
    job: int
    placement: Placement
    #: RESIZE only: the placement before the resize
    before: Placement | None = None

    # the generated __init__'s arguments; the slots' setters instead of object.__setattr__ per field
    # (one operation per start: see Placement.__init__)
    def __init__(self, op: Op, job: int, placement: Placement, before: Placement | None = None) -> None:
        _set_op(self, op)
        _set_job(self, job)
        _set_placement(self, placement)
        _set_before(self, before)


_set_op, _set_job, _set_placement, _set_before = slot_setters(Operation, "op", "job", "placement", "before")


class Binder(Protocol):
    """Where committed decisions go (Kubernetes' Binding API): a live executor starts a job's workers
    on the nodes of its placement, and stops an evicted job's. A start that fails later comes back
    through :meth:`kant.scheduler.Scheduler.bind_failed`."""

    def bind(self, job: int, placement: Placement) -> None: ...

    def evict(self, job: int, placement: Placement) -> None: ...


class ResizeBinder(Binder, Protocol):
    """A binder that resizes a running elastic job in place (a restart from its checkpoint on the
    new placement, with the new world size)."""

    def resize(self, job: int, before: Placement, after: Placement) -> None: ...


class Statement:
    """An operation log over one cluster state; see the module notes for what :meth:`discard` does
    and does not undo."""

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

    def resize(self, job: int, placement: Placement) -> Placement:
        """Move running ``job`` to ``placement`` (its old one is released first); returns the old. A job
        this statement allocated (it starts in this cycle) simply starts on the new placement: its
        allocation in the log is replaced, and no resize is logged (nothing ran yet); a job resized
        again in the same statement is one resize from its first placement."""
        before = self.state.release(job)
        try:
            self.state.allocate(job, placement)
        except Exception:
            self.state.allocate(job, before)
            raise
        ops = self.operations
        for k in range(len(ops) - 1, -1, -1):
            if ops[k].job == job:
                if ops[k].op is Op.ALLOCATE:
                    ops[k] = Operation(Op.ALLOCATE, job, placement)
                    return before
                if ops[k].op is Op.RESIZE:  # resized twice in one cycle: one resize from the first size
                    ops[k] = Operation(Op.RESIZE, job, placement, ops[k].before)
                    return before
                break
        ops.append(Operation(Op.RESIZE, job, placement, before))
        return before

    def discard(self) -> None:
        """Undo the logged operations on the cluster state, newest first, and empty the log."""
        for operation in reversed(self.operations):
            if operation.op is Op.ALLOCATE:
                self.state.release(operation.job)
            elif operation.op is Op.EVICT:
                self.state.allocate(operation.job, operation.placement)
            else:
                assert operation.before is not None
                self.state.release(operation.job)
                self.state.allocate(operation.job, operation.before)
        self.operations.clear()

    def commit(self, binder: Binder | None = None) -> list[Operation]:
        """Make the operations final; ``binder`` (if any) hears each one, in order."""
        done = self.operations
        self.operations = []
        if binder is not None:
            # a resize of a job evicted later in the same statement is not heard (the eviction is)
            evicted_at = {op.job: k for k, op in enumerate(done) if op.op is Op.EVICT}
            for k, operation in enumerate(done):
                if operation.op is Op.RESIZE and evicted_at.get(operation.job, -1) > k:
                    continue
                if operation.op is Op.ALLOCATE:
                    binder.bind(operation.job, operation.placement)
                elif operation.op is Op.EVICT:
                    binder.evict(operation.job, operation.placement)
                else:
                    assert operation.before is not None
                    resize = getattr(binder, "resize", None)
                    if resize is not None:
                        resize(operation.job, operation.before, operation.placement)
                    else:
                        binder.evict(operation.job, operation.before)
                        binder.bind(operation.job, operation.placement)
        return done
