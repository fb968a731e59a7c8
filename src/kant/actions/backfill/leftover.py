"""What the EASY reservation leaves for long jobs (those that end after its shadow time).

* :class:`LongBlocked`: requests whose long jobs cannot start in what the reservation leaves.
* :class:`Leftover`: one cycle's capacity the reservation leaves free now (and what is derived from it).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kant.actions.backfill.fit import BoolArray, Capacity, IntArray
from kant.actions.backfill.reservation import EasyReservation
from kant.framework.context import CycleContext
from kant.model.fit import FULL_GPU_MILLI, is_share
from kant.model.state import ClusterState

__all__ = ["Leftover", "LongBlocked", "ShortOfSlots"]


class LongBlocked:
    """Requests whose *long* jobs (ending after the shadow time) cannot start in the capacity the
    reservation leaves free now, ``X = min(free_now, spare)`` per node and resource.

    A placement that fails on some capacity fails on any that is nowhere larger (the placers'
    monotonicity that the shadow-time search relies on too), so the set stays valid while the
    reservation is the same and X has grown nowhere since the set was filled: starts and long jobs
    backfilled against the reservation only shrink X, and a capacity return that does not reach X
    (it lands where the reservation needs it) changes nothing. ``bound`` is the last X the walk
    computed (X only shrinks within a pass); :meth:`renew` compares the next pass's X with it.

    Where X grew, a request that failed on its worker slots alone (whole GPUs: fewer slots in X's GPU
    row than workers, :meth:`Leftover.slots`) stays while its slots still fall short: each such
    request's ``(GPUs per worker, GPU type)`` keeps an upper bound on the slots in ``max(bound, 0)``
    (exact when a request was added, as X then is ``bound``; a smaller X only lowers it), raised by
    what the grown nodes add (a return usually lands on one node). Other requests go."""

    def __init__(self) -> None:
        self.requests: set[int] = set()  # read directly by the walk (a membership test)
        self._serial = -1  # the reservation the set was filled under
        self._shares = 0  # the GPU-share books' version when it was filled (0: no shares)
        self._bound: IntArray | None = None  # X when the last request was added, or later
        #: bumped whenever the set changes
        self.changes = 0
        #: the requests in the set on their worker slots alone: request -> (slot key, workers)
        self._short: dict[int, tuple[tuple[int, int], int]] = {}
        #: per slot key (GPUs per worker, GPU type): an upper bound on the worker slots in
        #: ``max(bound, 0)`` on the nodes of its type mask, and that mask
        self._slots: dict[tuple[int, int], tuple[int, BoolArray | None]] = {}

    def renew(self, res: EasyReservation | None, free_now: IntArray, state: ClusterState) -> None:
        """A pass planned its head with ``res``: forget everything unless the set still holds (the
        GPU-share books count as grown whenever they changed: a share that left opens room on a GPU
        slot without freeing a GPU)."""
        if res is None:  # no long jobs this pass: the set is not looked at
            return
        shares = int(state.shares.version.sum()) if state.shares.slots else 0
        if res.serial != self._serial or shares != self._shares:
            self._serial = res.serial
            self._shares = shares
            self._bound = None
            self._clear()
        elif self.requests:
            x = np.minimum(free_now, res.spare)
            bound = self._bound
            if bound is None:
                self._clear()
            else:
                grew = x > bound
                if bool(grew.any()):
                    self._grown(x[0], bound[0], grew[0])
            self._bound = x

    def _grown(self, x0: IntArray, bound0: IntArray, grew0: BoolArray) -> None:
        """X grew somewhere, on the GPUs where ``grew0`` (CPU and memory, which worker slots do not
        count, may have grown too): keep the requests whose slots still fall short, drop the rest."""
        short = self._short
        if not short:
            self._clear()
            return
        nodes = np.flatnonzero(grew0)
        grown = [(node, max(now, 0), max(was, 0))
                 for node, now, was in zip(nodes.tolist(), x0[nodes].tolist(), bound0[nodes].tolist(), strict=True)]
        slots = self._slots
        for key, (n, mask) in slots.items():
            g = key[0]
            slots[key] = (n + sum(now // g - was // g for node, now, was in grown if mask is None or mask[node]), mask)
        kept = {r: v for r, v in short.items() if slots[v[0]][0] < v[1]}
        if len(kept) == len(self.requests):
            return
        self.requests.intersection_update(kept)
        self._short = kept
        used = {v[0] for v in kept.values()}
        for key in [k for k in slots if k not in used]:
            del slots[key]
        self.changes += 1

    def note(self, x: IntArray) -> None:
        """The walk computed X (no larger than any X before it in this pass)."""
        self._bound = x.copy()  # X may be a view of the live free capacity

    def _clear(self) -> None:
        self._short.clear()
        self._slots.clear()
        if self.requests:
            self.requests.clear()
            self.changes += 1

    def add(self, request: int, short: ShortOfSlots | None = None) -> None:
        """``request``'s long jobs cannot start in X; ``short``: they fail on worker slots alone (whole
        GPUs), kept while X grows too little to give them the slots."""
        self.requests.add(request)
        self.changes += 1
        if short is not None:
            g, type_code, mask, n, w = short
            self._short[request] = ((g, type_code), w)
            self._slots[(g, type_code)] = (n, mask)  # exact: X is the bound now (Leftover.get noted it)


class ShortOfSlots(NamedTuple):
    """A request whose long jobs fail in X on worker slots alone (:meth:`LongBlocked.add`)."""

    gpus: int  # per worker (whole GPUs)
    type_code: int  # the GPU type asked
    mask: BoolArray | None  # the nodes of that type (None: every node)
    slots: int  # the worker slots in X on those nodes
    workers: int  # the workers asked (more than ``slots``)


class Leftover:
    """One cycle's capacity that the reservation leaves free now: ``X = min(free_now, spare)`` per
    node and resource, computed when first needed and dropped when a job starts."""

    def __init__(self, capacity: Capacity, long_blocked: LongBlocked) -> None:
        self._capacity = capacity
        self._long_blocked = long_blocked
        self.free: IntArray | None = None
        self.whole = False  # X is all that is free now (the reservation needs nothing free now)
        self._view: CycleContext | None = None  # the cycle as if X were all that is free
        self._slots: dict[tuple[int, int], int] = {}  # (GPUs per worker, GPU type) -> worker slots in X
        self._state: ClusterState | None = None

    def reset(self) -> None:
        self.free = None
        self._view = None
        self._slots.clear()

    def get(self, ctx: CycleContext, res: EasyReservation) -> IntArray:
        x_free = self.free
        if x_free is None:
            free_now = self._capacity.free_now(ctx.state)
            self._state = ctx.state
            self.whole = bool((free_now <= res.spare).all())
            x_free = self.free = free_now if self.whole else np.minimum(free_now, res.spare)
            if res.pinned:  # spare may be below 0 on a node (see EasyReservation.pin)
                x_free = self.free = np.maximum(x_free, 0)
            self._long_blocked.note(x_free)
        return x_free

    def slots(self, g: int, type_code: int, tmask: BoolArray | None, milli: int = FULL_GPU_MILLI) -> int:
        """Workers of ``g`` GPUs at ``milli`` that X holds on the nodes of ``tmask`` (those of GPU
        type ``type_code``; after :meth:`get`). A GPU share counts the open GPU slots too: the
        reservation holds completely free GPUs only."""
        assert self.free is not None
        if milli < FULL_GPU_MILLI and is_share(g, milli):
            key = (-milli, type_code)  # cannot clash with a whole-GPU key
            n = self._slots.get(key)
            if n is None:
                assert self._state is not None
                n = self._slots[key] = self._capacity.gpu_slots(self.free[0], g, tmask, milli,
                                                                self._state.shares.workers(milli))
            return n
        n = self._slots.get((g, type_code))
        if n is None:
            n = self._slots[(g, type_code)] = self._capacity.gpu_slots(self.free[0], g, tmask)
        return n

    def view(self, ctx: CycleContext) -> CycleContext:
        """The cycle as if X were all that is free (after :meth:`get`; built once per X)."""
        assert self.free is not None
        if self._view is None:
            self._view = self._capacity.view(ctx, self.free)
        return self._view
