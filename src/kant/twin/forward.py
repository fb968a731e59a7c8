"""Run a snapshot forward: the simulator, started from a live state instead of an empty cluster.

:func:`run_forward` builds a :class:`~kant.sim.Simulator` over the snapshot's active jobs (none of
them arrives: all are *held*), restores the scheduler's state into it (running jobs on their nodes,
the queue, node flags), gives every running job its end (its start plus the run time it is given,
never before the snapshot's time), and runs it, from the snapshot's time, until the queue drains or
the horizon. Jobs that arrive later are not known and not simulated: a prediction is "if nothing
else arrives" (docs/whatif.md says what that costs in accuracy).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from kant.config.policy import Policy
from kant.errors import SchedulingError
from kant.metrics.recorder import SimResult
from kant.model.cluster import Cluster
from kant.scheduler import SchedulerSnapshot
from kant.sim.simulator import Simulator
from kant.twin.snapshot import SnapshotError, TwinSnapshot

__all__ = ["run_forward"]


def run_forward(snap: TwinSnapshot, duration: Sequence[float] | npt.NDArray[np.float64] | None = None, *,
                policy: Policy | None = None, cluster: Cluster | None = None,
                sched: SchedulerSnapshot | None = None, horizon_s: float | None = None) -> SimResult:
    """Simulate ``snap`` forward with each job's true run time from ``duration`` (default: its
    estimate), under ``policy`` on ``cluster`` from scheduler state ``sched`` (defaults: the
    snapshot's), for ``horizon_s`` seconds (None: until nothing more can start). Rows are the
    snapshot's; ``first_start`` is NaN for a job that did not start within the run."""
    table = snap.table(duration)
    state = sched or snap.sched
    sim = Simulator(cluster or snap.cluster(), table, policy or snap.policy, seed=snap.seed,
                    held=np.arange(len(table), dtype=np.int64))
    try:
        sim.resume(state)
    except SchedulingError as exc:
        raise SnapshotError(f"the snapshot cannot be loaded here: {exc}") from None
    return sim.run(until=None if horizon_s is None else state.now + horizon_s)
