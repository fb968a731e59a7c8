"""Compaction: finished jobs leave the live scheduler's memory.

The scheduler's job store grows by one row per arrival. Once the finished rows dominate, the scheduler
is rebuilt on a store of the active jobs only, so memory stays bounded by the active jobs however long
the history. Rows keep their relative order, so the queue order and every tie-break are unchanged.
"""

from __future__ import annotations

import logging

import numpy as np

from kant.model.store import JobStore
from kant.scheduler import Scheduler, SchedulerSnapshot
from kant.service.live.state import LiveState

__all__ = ["compact", "COLUMNS"]

log = logging.getLogger("kant.serve")

#: the store's columns copied as they are (names, planning estimates and user estimates apart)
COLUMNS = ("submit", "workers", "gpus_per_worker", "gpu_milli", "cpu_milli", "memory_mib", "gpu_type", "priority",
           "tenant", "user", "kind")


def compact(live: LiveState, now: float, *, minimum: int, force: bool = False) -> bool:
    """Rebuild ``live``'s scheduler on the active jobs once the store holds at least ``minimum`` rows
    and more than twice the active ones (or always, with ``force``); returns whether it did."""
    store = live.sched.jobs
    if not force and len(store) < max(minimum, 2 * len(live.active) + 1):
        return False
    old = live.sched
    snap = old.snapshot(now)
    keep = sorted(live.active.values(), key=lambda a: a.row)
    new_row = {a.row: k for k, a in enumerate(keep)}
    new_store = JobStore(gpu_type_names=store.gpu_type_names, tenant_names=store.tenant_names,
                         user_names=store.user_names)
    old_rows = np.asarray([a.row for a in keep], dtype=np.int64)
    new_store.extend([store.names[r] for r in old_rows.tolist()], planning=store.estimate[old_rows],
                     user_estimate=store.user_estimate[old_rows], time_limit=store.time_limit[old_rows],
                     **{c: getattr(store, c)[old_rows] for c in COLUMNS})
    snap = SchedulerSnapshot(
        now=now, pending=tuple(new_row[r] for r in snap.pending),
        running={new_row[r]: rec for r, rec in snap.running.items()}, node_flags=snap.node_flags,
        bind_failures={new_row[r]: w for r, w in snap.bind_failures.items() if r in new_row})
    new = Scheduler.from_snapshot(old.policy, old.cluster, new_store, snap, seed=live.seed)
    new.binder = live
    new.cycles = old.cycles
    live.sched = new
    live.ids = [a.id for a in keep]
    for a in keep:
        a.row = new_row[a.row]
    log.info("compacted the job store: %d rows -> %d", len(store), len(new_store))
    return True
