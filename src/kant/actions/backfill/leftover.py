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

__all__ = ["KeptX", "Leftover", "LongBlocked", "ShortOfSlots"]


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
        #: X kept across walks; what it reports moved since the last look stands for the old bound
        self.kept = KeptX()
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
        slot without freeing a GPU). The bound is the X of the last look (:meth:`note` or here):
        :class:`KeptX` reports the nodes where X moved since, with their X then."""
        if res is None:  # no long jobs this pass: the set is not looked at
            return
        shares = int(state.shares.version.sum()) if state.shares.slots else 0
        if res.serial != self._serial or shares != self._shares:
            self._serial = res.serial
            self._shares = shares
            self._clear()  # filled again only after a note()
        elif self.requests:
            kept = self.kept
            x = kept.update(state, free_now, res)
            moved = kept.take_moved()
            if moved is None:  # X was recomputed everywhere: where it grew is not known
                self._clear()
                return
            grew = False
            grown: list[tuple[int, int, int]] = []
            for node, was in moved.items():
                now = x[:, node].tolist()
                if now != was and any(a > b for a, b in zip(now, was, strict=True)):
                    grew = True
                    if now[0] > was[0]:
                        grown.append((node, max(now[0], 0), max(was[0], 0)))
            if grew:
                self._grown(grown)

    def _grown(self, grown: list[tuple[int, int, int]]) -> None:
        """X grew somewhere, on the GPUs of the nodes in ``grown`` as ``(node, now, was)`` (clamped at
        0; CPU and memory, which worker slots do not count, may have grown too): keep the requests
        whose slots still fall short, drop the rest."""
        short = self._short
        if not short:
            self._clear()
            return
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

    def note(self) -> None:
        """The walk took X from :attr:`kept` (no larger than any X before it in this pass): the new
        bound."""
        self.kept.take_moved()

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
    node and resource, taken from :class:`KeptX` when first needed and dropped when a job starts."""

    def __init__(self, capacity: Capacity, long_blocked: LongBlocked) -> None:
        self._capacity = capacity
        self._long_blocked = long_blocked
        self._kept = long_blocked.kept
        self.free: IntArray | None = None  # KeptX's own array: valid until the next start
        self.whole = False  # X is all that is free now (the reservation needs nothing free now)
        self._view: CycleContext | None = None  # the cycle as if X were all that is free
        self._slots: dict[tuple[int, int], int] = {}  # (-milli, GPU type) -> a share's worker slots in X
        self._state: ClusterState | None = None

    def reset(self) -> None:
        self.free = None
        self._view = None
        self._slots.clear()

    def get(self, ctx: CycleContext, res: EasyReservation) -> IntArray:
        x_free = self.free
        if x_free is None:
            kept = self._kept
            x_free = self.free = kept.update(ctx.state, self._capacity.free_now(ctx.state), res)
            self.whole = kept.whole
            self._state = ctx.state
            self._long_blocked.note()
        return x_free

    def slots(self, g: int, type_code: int, tmask: BoolArray | None, milli: int = FULL_GPU_MILLI) -> int:
        """Workers of ``g`` GPUs at ``milli`` that X holds on the nodes of ``tmask`` (those of GPU
        type ``type_code``; after :meth:`get`). A GPU share counts the open GPU slots too: the
        reservation holds completely free GPUs only."""
        assert self.free is not None
        if milli < FULL_GPU_MILLI and is_share(g, milli):
            key = (-milli, type_code)
            n = self._slots.get(key)
            if n is None:
                assert self._state is not None
                n = self._slots[key] = self._capacity.gpu_slots(self.free[0], g, tmask, milli,
                                                                self._state.shares.workers(milli))
            return n
        return self._kept.slots(g, type_code, tmask)

    def view(self, ctx: CycleContext) -> CycleContext:
        """The cycle as if X were all that is free (after :meth:`get`; built once per X)."""
        assert self.free is not None
        if self._view is None:
            self._view = self._capacity.view(ctx, self.free, changed=self._kept.over)
        return self._view


class KeptX:
    """``X = min(free_now, spare)`` per resource and node (clamped at 0 where the reservation is
    pinned, :meth:`EasyReservation.pin`), kept across walks, with what is derived from it: whether X
    is all that is free now (:attr:`whole`), the nodes where it is not (:attr:`over`), and the
    whole-GPU worker slots in X's GPU row per ``(GPUs per worker, GPU type)`` (:meth:`slots`).

    X changes between walks only where the state's free capacity changed (its ``change_log``: a
    start, an end, a node failure or repair) or where the reservation's ``spare`` did: a new
    reservation (a new ``serial``) or a pin recomputes everything; a long job backfilled against it
    (:meth:`EasyReservation.take`) or a short share pinned takes spare only on the nodes its start
    changed, which the log holds. So :meth:`update` recomputes the nodes the log names since the last
    update, O(changed nodes), and everything where it cannot follow (another state or reservation,
    a log trimmed past where it read). Property-tested against the fresh computation at each step.

    :meth:`take_moved` tells the one reader (:class:`LongBlocked`) the nodes where X changed since
    it last asked, with X there then (None: changed everywhere)."""

    def __init__(self) -> None:
        self.x: IntArray | None = None
        self.whole = False
        self.over: set[int] = set()  # nodes where free now exceeds spare in some resource
        self._state: ClusterState | None = None
        self._key: tuple[int, bool] = (-1, False)  # the reservation's serial and pinned when computed
        self._cursor = 0  # the change log's position read up to
        #: (GPUs per worker, GPU type) -> (worker slots in X's GPU row on the type's nodes, its node mask)
        self._slots: dict[tuple[int, int], tuple[int, BoolArray | None]] = {}
        self._moved: dict[int, list[int]] | None = None

    def update(self, state: ClusterState, free_now: IntArray, res: EasyReservation) -> IntArray:
        """X now (this object's array, changed in place by later updates)."""
        log, start = state.change_log, state.change_log_start
        end = start + len(log)
        x = self.x
        if (x is None or state is not self._state or (res.serial, res.pinned) != self._key
                or self._cursor < start or x.shape != free_now.shape):
            self._full(state, free_now, res)
        elif self._cursor < end:
            self._patch(set(log[self._cursor - start:]), x, free_now, res)
        self._cursor = end
        assert self.x is not None
        return self.x

    def _full(self, state: ClusterState, free_now: IntArray, res: EasyReservation) -> None:
        spare = res.spare
        x = np.minimum(free_now, spare)
        if res.pinned:  # spare may be below 0 on a node
            np.maximum(x, 0, out=x)
        self.x = x
        self.over = set(np.flatnonzero((free_now > spare).any(axis=0)).tolist())
        self.whole = not self.over
        self._state = state
        self._key = (res.serial, res.pinned)
        self._slots.clear()
        self._moved = None

    def _patch(self, nodes: set[int], x: IntArray, free_now: IntArray, res: EasyReservation) -> None:
        spare, pinned, over, moved = res.spare, res.pinned, self.over, self._moved
        one = len(x) == 1  # GPUs only: plain ints (the common case), else a column per node
        for node in nodes:
            if one:
                f, s = free_now.item(node), spare.item(node)
                if f > s:  # X is less than is free here
                    over.add(node)
                    v = max(s, 0) if pinned else s
                else:  # X is what is free (never below 0)
                    over.discard(node)
                    v = f
                w = x.item(node)
                if v != w:
                    if moved is not None and node not in moved:
                        moved[node] = [w]
                    x[0, node] = v
                    self._moved_gpus(node, v, w)
                continue
            free, room = free_now[:, node].tolist(), spare[:, node].tolist()
            if any(f > s for f, s in zip(free, room, strict=True)):
                over.add(node)
                now = [min(f, s) for f, s in zip(free, room, strict=True)]
                if pinned:
                    now = [max(v, 0) for v in now]
            else:
                over.discard(node)
                now = free
            was = x[:, node].tolist()
            if now != was:
                if moved is not None and node not in moved:
                    moved[node] = was
                x[:, node] = now
                self._moved_gpus(node, now[0], was[0])
        self.whole = not over

    def _moved_gpus(self, node: int, now: int, was: int) -> None:
        """X's GPUs on ``node`` went from ``was`` to ``now``: the slot counts follow."""
        slots = self._slots
        for key, (n, mask) in slots.items():
            if mask is None or mask[node]:
                g = key[0]
                slots[key] = (n + now // g - was // g, mask)

    def slots(self, g: int, type_code: int, tmask: BoolArray | None) -> int:
        """Workers of ``g`` whole GPUs that X holds on the nodes of ``tmask`` (those of GPU type
        ``type_code``; after :meth:`update`)."""
        got = self._slots.get((g, type_code))
        if got is None:
            assert self.x is not None
            got = self._slots[(g, type_code)] = (Capacity.gpu_slots(self.x[0], g, tmask), tmask)
        return got[0]

    def take_moved(self) -> dict[int, list[int]] | None:
        """The nodes where X changed since the last call, with X there then (None: everywhere)."""
        moved, self._moved = self._moved, {}
        return moved
