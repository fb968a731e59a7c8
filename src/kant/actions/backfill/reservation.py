"""The EASY head's reservation: its shadow time, what it reserves and what it leaves.

* :class:`EasyReservation`: the head's shadow time, what it reserves, what it leaves.
* :class:`ReservationKeeper`: keeps the reservation across cycles while recomputing it would give
  the same one; :func:`compute_reservation` computes a new one (searching the release times with
  :func:`earliest`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from kant.actions.backfill.fit import IntArray, first_enough
from kant.actions.backfill.host import Host
from kant.actions.backfill.releases import events
from kant.framework.context import CycleContext
from kant.framework.runner import Framework
from kant.model.fit import FULL_GPU_MILLI, is_share
from kant.model.state import Placement

__all__ = ["EasyReservation", "ReservationKeeper", "compute_reservation", "earliest"]

_T = TypeVar("_T")


def earliest(n: int, probe: Callable[[int], _T | None], budget: int) -> tuple[int, _T | None, bool]:
    """The smallest ``i`` in ``[0, n)`` at which ``probe(i)`` gives a value (not None), with at most
    ``budget`` (>= 1) probes, for a probe that is *monotone*: once it gives a value it gives one at
    every later index. Galloping (``0, 2, 6, 14, ...`` past the last miss) brackets the first hit,
    then bisection narrows the bracket: about ``2 log2 n`` probes. The last probe left, while nothing
    has been hit, goes to ``n - 1``.

    Returns ``(i, value, exact)``: ``exact`` is whether ``i`` is proven the smallest (by monotonicity);
    when the budget ran out first, ``i`` is the smallest index hit so far (later than the true one) or
    ``n`` with None when none was hit. With nothing hit at ``n - 1``, no index hits (``exact``)."""
    bad, good = -1, n  # largest index known to miss, smallest known to hit
    value: _T | None = None
    step, calls = 1, 0
    while bad + 1 < good and calls < budget:
        if good == n:  # nothing hit yet: gallop, the last probe goes to the end
            i = n - 1 if calls == budget - 1 else min(bad + step, n - 1)
            step *= 2
        else:
            i = (bad + good) // 2
        got = probe(i)
        calls += 1
        if got is None:
            bad = i
        else:
            good, value = i, got
    return good, value, bad + 1 == good



@dataclass
class EasyReservation:
    head: int
    shadow: float
    free_at_shadow: IntArray  # resources x nodes free at the shadow time, less long backfilled jobs
    reserved: IntArray  # resources x nodes the head holds from the shadow time
    down_gpus: int
    release_count: int  # state.release_count when it was last checked
    accounted: set[int] = field(default_factory=set)  # long jobs already taken off free_at_shadow
    serial: int = 0  # tells reservations apart (a new one gets a new number)
    pinned: bool = False  # short shares' GPUs were taken off (see pin)
    spare: IntArray = field(init=False)  # free_at_shadow - reserved: what the reservation leaves

    def __post_init__(self) -> None:
        self.spare = self.free_at_shadow - self.reserved

    def pin(self, gpus_taken: IntArray) -> None:
        """A short GPU share started and took ``gpus_taken`` completely free GPUs per node: it ends by
        the shadow time, but long shares may join its GPUs and hold them past it, so those GPUs no
        longer count as free then. Every GPU opened since the reservation was computed is thus taken
        off (GPUs open when it was computed never counted: a running share gives back no GPU), and
        a long share may start only while that leaves the reservation whole (``spare >= 0``)."""
        self.free_at_shadow[0] -= gpus_taken
        self.spare[0] -= gpus_taken
        self.pinned = True

    def take(self, placement: Placement, modelled: list[tuple[int, list[int]]],
             gpus_taken: IntArray | None = None) -> None:
        """A long job was backfilled on ``placement``: it still holds that capacity at the shadow time.
        ``gpus_taken`` (a GPU share): the completely free GPUs its start took, per node (its workers
        on open GPU slots took none). ``modelled``: :attr:`Capacity.modelled_rows`."""
        fas, spare = self.free_at_shadow, self.spare
        req = (placement.gpus, placement.cpu_milli, placement.memory_mib)
        for node, count in placement.per_node.items():
            for r, (f, m) in enumerate(modelled):
                use = req[f] * count * m[node] if r or gpus_taken is None else int(gpus_taken[node])
                if use:
                    fas[r, node] -= use
                    spare[r, node] -= use


class ReservationKeeper:
    """The EASY reservation kept across cycles while recomputing it would give the same one (same
    head, no job left before its estimated end, no job that ends after the shadow time started other
    than those backfilled against it, no node failure, ``now <= shadow``); property-tested."""

    def __init__(self) -> None:
        self.res: EasyReservation | None = None
        self.checked = 0  # hand-over lists already checked against the reservation
        self.serial = 0  # reservations computed so far (their serial numbers)

    def after_sync(self, early: bool, added: list[tuple[int, float]], release_count: int) -> None:
        """The release mirror caught up: drop the reservation if what changed could change it (a job
        left before its estimated end, or a job that ends after the shadow time started without
        being accounted for)."""
        self.checked = 0
        res = self.res
        if res is None:
            return
        if early:
            self.res = None
            return
        s, accounted = res.shadow, res.accounted
        for job, end in added:
            if end > s and job not in accounted:
                self.res = None
                return
        res.release_count = release_count

    def get(self, bf: Host, ctx: CycleContext, fw: Framework, head: int) -> EasyReservation | None:
        """The head's reservation: the one kept from earlier cycles while recomputing it would give
        the same, else a new one."""
        state, now = ctx.state, ctx.now
        res = self.res
        if res is not None and (res.head != head or now > res.shadow or state.down_gpus != res.down_gpus):
            res = self.res = None
        unsynced = bf.releases.unsynced
        if res is not None and state.release_count == res.release_count:
            # nothing has left since the last check: only the jobs started since need a look
            s, running, accounted = res.shadow, ctx.running, res.accounted
            fresh = True
            for _, lst in unsynced[self.checked :]:
                for job, _ in lst:
                    run = running.get(job)
                    if run is not None and run.expected_end > s and job not in accounted:
                        fresh = False
            if fresh:
                self.checked = len(unsynced)
        else:
            fresh = False
        if not fresh:
            bf.sync(ctx)
            res = self.res
        if res is not None and (not ctx.started or all(
            job in res.accounted or now + ctx.env.estimate(job) <= res.shadow for job, _ in ctx.started
        )):
            return res
        if bf.releases.unsynced:
            bf.sync(ctx)  # the mirror must be complete to compute a new one
        self.res = res = compute_reservation(bf, ctx, fw, head)
        if res is not None:
            self.serial += 1
            res.serial = self.serial
        return res


def compute_reservation(bf: Host, ctx: CycleContext, fw: Framework, job: int) -> EasyReservation | None:
    """The head's shadow time and reserved capacity, or None when it cannot have one (its serial
    number is the keeper's to give)."""
    bf.computed += 1
    env, now, cap = ctx.env, ctx.now, bf.capacity
    t, node, amt = events(bf.releases, cap, ctx)
    free_now = cap.free_now(ctx.state)
    g, w, milli = bf.job_gpus[job], bf.job_workers[job], bf.job_milli[job]
    tmask = bf.type_mask(env, job)
    n_nodes = cap.n_nodes
    # a GPU share counts the open GPU slots now; at a release time only completely free GPUs (the
    # view below leaves the open slots out; see kant.actions.backfill.fit)
    share = milli < FULL_GPU_MILLI and is_share(g, milli)
    if g > 0:
        sel = slice(None) if tmask is None else tmask[node]
        e_t = t[sel]
        first = first_enough(free_now[0], node[sel], amt[sel, 0], g, w, tmask, milli,
                             ctx.state.shares.workers(milli) if share else None)
        if first < 0:
            return None
        pool = e_t[first:] if len(e_t) else t
    else:
        pool = t
    pool = pool[np.isfinite(pool)]
    if len(pool) == 0:
        return None
    cand = pool[np.concatenate(([True], pool[1:] != pool[:-1]))]
    cand = cand[cand <= now + bf.args.window_s]
    times = cand.tolist()

    def place_at(i: int) -> tuple[IntArray, Placement] | None:
        upto = int(np.searchsorted(t, times[i], side="right"))
        free_s = np.array(free_now, dtype=np.int64)
        for r in range(free_s.shape[0]):
            free_s[r] += np.bincount(node[:upto], weights=amt[:upto, r], minlength=n_nodes).astype(np.int64)
        result = fw.place(cap.view(ctx, free_s, shares=not share), job)
        return (free_s, result) if isinstance(result, Placement) else None

    i, found, exact = earliest(len(times), place_at, bf.args.max_place_tries)
    if not exact:
        bf.approximated += 1
    if found is None:
        return None
    shadow = times[i]
    free_s, placement = found
    bf.record(job, shadow, head=True)
    res = EasyReservation(job, shadow, free_s, cap.usage(placement), ctx.state.down_gpus, ctx.state.release_count)
    res.accounted.update(j for j, _ in ctx.started)  # already in the release profile
    return res
