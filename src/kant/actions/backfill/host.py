"""What a backfill pass (EASY or conservative) uses of the action that runs it: the action's
arguments (:class:`BackfillArgs`) and the :class:`Host` protocol.

The passes live below the action (:mod:`kant.actions.backfill.action` imports them, never the other
way round); :class:`~kant.actions.backfill.action.Backfill` is the one host.
"""

from __future__ import annotations

import math
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from kant.actions.backfill.fit import BoolArray, Capacity
from kant.actions.backfill.releases import Releases
from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.memo import FailedRequests
from kant.framework.runner import Framework
from kant.model.state import ClusterState, Placement

__all__ = ["MAX_JOBS_DEFAULT", "BackfillArgs", "Host"]

#: queued jobs looked at per cycle when ``max_jobs`` is not set, per mode. EASY: 300, chosen from the
#: full Philly trace (docs/policy-backfill.md, "Backfill depth"): against 100 it cuts the median wait
#: of both bundled EASY policies by about a quarter, leaves the big gangs' waits near where they were,
#: and costs a few per cent more CPU. Conservative: 100 (each job looked at may get a reservation).
MAX_JOBS_DEFAULT = {"easy": 300, "conservative": 100}


class BackfillArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    mode: Literal["easy", "conservative"] = "easy"
    max_jobs: int | None = Field(default=None, ge=1)  # None: MAX_JOBS_DEFAULT[mode]
    window_s: float = Field(default=math.inf, gt=0)
    max_place_tries: int = Field(default=32, ge=1)


class Host(Protocol):
    """The backfill action as its passes see it: the arguments, the state kept between cycles that
    every pass shares, the counters, and the few things a pass asks of the action."""

    @property
    def args(self) -> BackfillArgs: ...

    #: queued jobs looked at per pass (``args.max_jobs`` or :data:`MAX_JOBS_DEFAULT`)
    max_jobs: int
    capacity: Capacity
    #: the running jobs' release profile
    releases: Releases
    #: requests that do not fit the free capacity
    failed: FailedRequests
    #: per-job columns as lists: GPUs per worker, workers, GPU type code, milli-GPU per worker
    job_gpus: list[int]
    job_workers: list[int]
    job_type: list[int]
    job_milli: list[int]
    #: counters: jobs started, reservations computed, reservations approximated
    backfilled: int
    computed: int
    approximated: int

    def exhausted(self, state: ClusterState) -> bool:
        """Nothing more can start this cycle."""
        ...

    def type_mask(self, env: SchedulerEnv, job: int) -> BoolArray | None:
        """The nodes of the job's GPU type, or None for any type."""
        ...

    def record(self, job: int, when: float, head: bool) -> None:
        """``job`` got a reservation at ``when`` (as the head or not)."""
        ...

    def start(self, ctx: CycleContext, fw: Framework, job: int, placement: Placement) -> None:
        """Start ``job`` on ``placement`` now."""
        ...

    def sync(self, ctx: CycleContext) -> None:
        """Bring the release mirror up to date and tell the kept reservation and plan what changed."""
        ...
