"""Run a snapshot forward: the simulator, started from a live state instead of an empty cluster.

:func:`run_forward` builds a :class:`~kant.sim.Simulator` over the snapshot's active jobs (none of
them arrives: all are *held*), restores the scheduler's state into it (running jobs on their nodes,
the queue, node flags), gives every running job its end (its start plus the run time it is given,
never before the snapshot's time), and runs it, from the snapshot's time, until the queue drains or
the horizon. Jobs that arrive later are not known; with ``arrivals`` (a draw of the arrival model,
:mod:`kant.twin.arrivals`) the run also gets those sampled jobs, which arrive at their sampled times
(rows after the snapshot's: ``first_start[:len(snap)]`` are the snapshot's jobs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kant.config.policy import Policy
from kant.errors import SchedulingError
from kant.metrics.recorder import SimResult
from kant.model.cluster import Cluster
from kant.scheduler import SchedulerSnapshot
from kant.sim.simulator import Simulator
from kant.twin.snapshot import SnapshotError, TwinSnapshot

if TYPE_CHECKING:
    from kant.twin.arrivals import ArrivalModel, Arrivals

__all__ = ["run_forward", "with_arrivals"]


def with_arrivals(snap: TwinSnapshot, model: ArrivalModel, arr: Arrivals) -> TwinSnapshot:
    """``snap`` with the sampled arrivals ``arr`` (copies of ``model``'s history rows) as more jobs
    after its own (id -1, name ``arrival-<i>``); the scheduler's state names only the snapshot's."""
    hist = model.history
    rows = arr.rows.tolist()
    cols = dict(snap.jobs)
    for col in cols:
        if col == "name":
            extra: tuple[object, ...] = tuple(f"arrival-{i}" for i in range(len(rows)))
        elif col == "submit":
            extra = tuple(arr.submit.tolist())
        else:
            extra = tuple(hist[col][r] for r in rows)
        cols[col] = (*cols[col], *extra)
    return replace(snap, jobs=cols, ids=(*snap.ids, *([-1] * len(rows))))


def run_forward(snap: TwinSnapshot, duration: Sequence[float] | npt.NDArray[np.float64] | None = None, *,
                policy: Policy | None = None, cluster: Cluster | None = None,
                sched: SchedulerSnapshot | None = None, horizon_s: float | None = None,
                arrivals: tuple[ArrivalModel, Arrivals, npt.NDArray[np.float64]] | None = None,
                until_started: bool = False) -> SimResult:
    """Simulate ``snap`` forward with each job's true run time from ``duration`` (default: its
    estimate), under ``policy`` on ``cluster`` from scheduler state ``sched`` (defaults: the
    snapshot's), for ``horizon_s`` seconds (None: until nothing more can start). Rows are the
    snapshot's, then ``arrivals``' (model, draw, their run times) if given; ``first_start`` is NaN
    for a job that did not start within the run. ``until_started``: stop once every job pending in
    the snapshot has started (a prediction needs no more; the run's cluster series then end there)."""
    n = len(snap)
    dur = np.asarray(snap.jobs["estimate"] if duration is None else duration, dtype=np.float64)
    if arrivals is not None and len(arrivals[1]):
        model, arr, extra = arrivals
        table = with_arrivals(snap, model, arr).table(np.concatenate([dur, np.asarray(extra, dtype=np.float64)]))
    else:
        table = snap.table(dur)
    state = sched or snap.sched
    sim = Simulator(cluster or snap.cluster(), table, policy or snap.policy, seed=snap.seed,
                    held=np.arange(n, dtype=np.int64))
    try:
        sim.resume(state)
    except SchedulingError as exc:
        raise SnapshotError(f"the snapshot cannot be loaded here: {exc}") from None
    return sim.run(until=None if horizon_s is None else state.now + horizon_s,
                   watch=np.asarray(state.pending, dtype=np.int64) if until_started else None)
