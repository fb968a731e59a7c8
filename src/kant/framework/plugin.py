"""The contract for policy authors: one small base class per extension point, one verb each.

A plugin is a class with a ``NAME``, a pydantic ``Args`` model for its typed arguments, and one or
more of the extension-point bases below. The runner (:class:`kant.framework.runner.Framework`)
owns the cycle and calls plugins in the order the policy file lists them; plugins never call each
other. Scores are on the fixed scale ``0..MAX_SCORE``; the runner applies the configured weights.

Filters and scores work on whole arrays of nodes at once (NumPy), never one node per call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from kant.framework.status import SUCCESS, Status
from kant.model.state import Placement

if TYPE_CHECKING:
    from kant.framework.context import CycleContext, SchedulerEnv
    from kant.model.classes import ClassGroups, NodeClasses

__all__ = [
    "MAX_SCORE",
    "NoArgs",
    "Plugin",
    "QueueSort",
    "Admit",
    "Filter",
    "Score",
    "ClassScore",
    "Place",
    "JobListener",
    "Rank",
    "Guarantee",
    "QueueGuarantee",
    "CoScheduling",
    "Placer",
    "PluginLookup",
]

MAX_SCORE = 100.0

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class NoArgs(BaseModel):
    """Arguments of a plugin that takes none; unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Plugin:
    """Base of every plugin. Subclasses set ``NAME`` and, if they take arguments, ``Args``."""

    NAME: ClassVar[str] = ""
    Args: ClassVar[type[BaseModel]] = NoArgs

    def __init__(self, args: BaseModel | None = None, weight: float = 1.0) -> None:
        self.args = args if args is not None else self.Args()
        self.weight = weight

    def setup(self, env: SchedulerEnv) -> None:
        """Called once before the first cycle, with the cluster and the jobs known so far."""

    def jobs_added(self, env: SchedulerEnv, start: int) -> None:
        """Jobs ``start .. len(env.jobs) - 1`` were added to the store (a live submit): grow any
        per-job (or per-tenant: the store's vocabularies may have grown too) state kept since
        :meth:`setup`. Called before any of them is queued."""

    def saved_state(self, now: float) -> Any:
        """State at ``now`` that the running jobs do not give back (fair share's usage of jobs that
        ended), JSON-safe, for a scheduler rebuilt or restarted from a snapshot; None: nothing."""
        return None

    def load_state(self, state: Any) -> None:
        """Take back what :meth:`saved_state` gave (on a fresh plugin, before the snapshot's running
        jobs are started again)."""


class QueueSort(Plugin):
    """Orders the pending queue: lower keys go first. Keys of several plugins are compared in the
    order the policy lists them; the runner always ends with (submit time, job row) as tie-break.

    A plugin whose key never changes while a job waits keeps ``DYNAMIC = False``; then the queue is
    kept sorted incrementally. A dynamic key (attained service, fair share) is recomputed every cycle.

    ``SHAPE_KEYED``: a dynamic key that depends only on what a job's shape holds (tenant, resource
    request, priority, kind; :class:`~kant.framework.queue.ShapeIndex`), so that every job of a shape
    has the same key at any instant (a queue's fair share, whether its leaf is within its guarantee).
    When every dynamic sorter of a policy is shape-keyed and shapes hold the tenant, a walk computes
    the keys once per shape and merges the shapes' lists (kept in the static keys' order) instead of
    sorting every pending job: the same order, at the cost of the shapes.
    """

    DYNAMIC: ClassVar[bool] = False
    SHAPE_KEYED: ClassVar[bool] = False
    #: a dynamic key that, while a job waits, changes only at times known in advance (see
    #: :meth:`waiting_key`): when every dynamic sorter of a policy has it, the pending order is kept
    #: across cycles (:class:`~kant.framework.kept_order.KeptOrder`) instead of sorted at each walk
    WAITING_KEYS: ClassVar[bool] = False

    def key(self, env: SchedulerEnv, job: int, now: float) -> float:
        raise NotImplementedError

    def waiting_key(self, env: SchedulerEnv, job: int, now: float) -> tuple[float, float]:
        """For a job that waits from ``now`` on: its :meth:`key` at ``now``, and a time up to which
        that stays its key while it waits (``math.inf``: for good; earlier than the true time is
        allowed, the key is asked again then). Only for ``WAITING_KEYS``."""
        raise NotImplementedError

    def keys(self, env: SchedulerEnv, jobs: IntArray, now: float) -> FloatArray:
        """``key`` of many jobs at once; a dynamic re-sort calls it once per cycle with every pending
        job. The default calls ``key`` per job; a ``DYNAMIC`` plugin should override it with NumPy."""
        return np.fromiter((self.key(env, j, now) for j in jobs.tolist()), dtype=np.float64, count=len(jobs))


class Admit(Plugin):
    """Admission (quotas, limits) before placement."""

    def admit(self, ctx: CycleContext, job: int) -> Status:
        return SUCCESS

    def feasible(self, env: SchedulerEnv, job: int) -> Status:
        """Could this job ever be admitted (e.g. its size within the tenant's maximum)?"""
        return SUCCESS


class Filter(Plugin):
    """Narrows the nodes a worker may use. ``mask`` already holds the nodes where the worker fits;
    return a (new or same) mask with more nodes set to False.

    ``REQUEST_ONLY``: the filter's answer depends only on the job's resource request (workers, GPUs,
    CPU, memory, GPU type, kind) and the cluster state. Set it to False if it looks at anything else
    (tenant, priority, the job row): the scheduler then remembers placement failures per shape
    (request + tenant + priority + kind) instead of per request.
    """

    REQUEST_ONLY: ClassVar[bool] = True

    def filter(self, ctx: CycleContext, job: int, mask: BoolArray) -> BoolArray:
        raise NotImplementedError


class Score(Plugin):
    """Scores candidate nodes for one worker of ``job`` on ``0..MAX_SCORE`` (higher is better)."""

    def score(self, ctx: CycleContext, job: int, nodes: IntArray) -> FloatArray:
        raise NotImplementedError


class ClassScore(Score):
    """A score that depends only on a node's GPU capacity and its free GPUs (its *class*), so that it
    can be computed once per class instead of once per node: :meth:`score_classes` must give, for a
    worker of ``gpus`` GPUs, the same floats as :meth:`Score.score` gives every node of that class. A
    policy whose scores are all class scores and that has no filter places workers from the node-class
    index without scanning nodes (:meth:`kant.framework.runner.Framework.place_workers`)."""

    def score_classes(self, env: SchedulerEnv, gpus: int, capacity: IntArray, free: IntArray) -> FloatArray:
        raise NotImplementedError


class Placer(Protocol):
    """What a :class:`Place` plugin may use of the runner that calls it (the runner,
    :class:`kant.framework.runner.Framework`, is one; plugins sit below it and see only this)."""

    #: the policy's Filter plugins, in policy order
    filters: list[Filter]
    #: per-job request columns (the store's lists, read one at a time): GPUs per worker, workers,
    #: GPU type code, CPU milli, memory MiB, milli-GPU per worker
    job_gpus: list[int]
    job_workers: list[int]
    job_type: list[int]
    job_cpu: list[int]
    job_mem: list[int]
    job_milli: list[int]
    #: no node models CPU / memory
    cpu_all_unmodelled: bool
    mem_all_unmodelled: bool

    def place_workers(self, ctx: CycleContext, job: int, restrict: BoolArray | None = None) -> Placement | Status:
        """The standard greedy filter+score placement of every worker, within ``restrict``."""
        ...

    def candidate_mask(self, ctx: CycleContext, job: int, restrict: BoolArray | None = None) -> BoolArray:
        """Nodes where one worker fits now, within ``restrict``, narrowed by the Filter plugins."""
        ...

    def is_share(self, job: int) -> bool:
        """Does ``job`` ask for a share of one GPU per worker?"""
        ...

    def class_groups(self, classes: NodeClasses, gpus: int, gpu_type: int) -> ClassGroups | None:
        """The node classes a worker fits, grouped by equal weighted score, best group first."""
        ...

    def best_of_classes(self, classes: NodeClasses, groups: ClassGroups) -> int:
        """Lowest-index node of the best non-empty group of classes, or -1."""
        ...


class Place(Plugin):
    """Places a whole gang (topology-aware and packing strategies). Return a placement, or a
    :class:`Status` saying why not. ``fw.place_workers`` offers the standard filter+score greedy
    placement restricted to a node mask, for strategies that first choose a group of nodes; ``fw``
    is the runner as a :class:`Placer`.
    ``REQUEST_ONLY`` as for :class:`Filter`."""

    REQUEST_ONLY: ClassVar[bool] = True
    #: the plugin places GPU-share requests too; else the runner places them by filter+score
    SHARES: ClassVar[bool] = False
    #: for a one-worker job of whole GPUs (``gpu_milli`` 1000) that no node has room for (the runner's
    #: :meth:`~kant.framework.runner.Framework.room_for` is 0), :meth:`place` returns the runner's no-fit
    #: status for no room (``needs ...; room now for 0 worker(s)``, plugin ``node-resources-fit``): the
    #: runner then asks it for such a job without testing ``room_for`` first (its search is the test)
    one_worker_by_room: bool = False

    def place(self, ctx: CycleContext, job: int, fw: Placer) -> Placement | Status:
        raise NotImplementedError

    def feasible(self, env: SchedulerEnv, job: int) -> Status:
        """Could this gang ever be placed by this strategy on the empty cluster?"""
        return SUCCESS


class JobListener(Plugin):
    """Plugins that keep their own state (quota usage, attained service) hear about starts/stops."""

    def job_started(self, env: SchedulerEnv, job: int, now: float, placement: Placement) -> None:
        pass

    def job_stopped(self, env: SchedulerEnv, job: int, now: float, placement: Placement, finished: bool) -> None:
        pass


class Rank(Plugin):
    """Ranks jobs for eviction: the ``preempt`` action's ``rank_by: <plugin name>`` (higher = more
    important; a running job is only evicted for a pending job of strictly higher rank)."""

    #: the plugin is also a :class:`QueueSort` and a pending job's rank is minus its queue key at any
    #: time (Tiresias: rank ``-level``, key ``level``): where the plugin is the policy's first sorter
    #: and the pending order is kept (:class:`~kant.framework.kept_order.KeptOrder`), the ``preempt``
    #: action reads the pending jobs' ranks and their queue order from it
    RANK_IS_MINUS_KEY: ClassVar[bool] = False

    def rank(self, env: SchedulerEnv, jobs: IntArray, now: float) -> FloatArray:
        raise NotImplementedError

    def lowest(self) -> float:
        """A rank no job ever has less than (-inf: none known). A pending job of this rank cannot
        preempt anything (the ``preempt`` action skips its round when every pending job has it)."""
        return -math.inf


class Guarantee(Plugin):
    """Keeps each tenant's guaranteed GPUs, its usage, and what each running job borrows above its
    tenant's guarantee: what the ``reclaim`` action needs to give a tenant its guarantee back.

    Column 0 of the per-tenant and per-job arrays is the GPU total (further columns, if any, are per
    GPU type); ``borrow_version`` changes whenever any job's borrowing does."""

    usage: FloatArray  # tenants x columns: GPUs in use
    guaranteed: FloatArray  # tenants x columns
    borrowed: FloatArray  # tenants x columns: GPUs in use above the guarantee
    job_borrowed: FloatArray  # jobs x columns: GPUs each running job borrows
    borrow_version: int

    def borrowing_total(self) -> IntArray:
        """Running jobs that borrow GPUs (column 0), ascending."""
        raise NotImplementedError

    def within_guarantee(self, job: int) -> bool:
        """Would the job's tenant stay within its guarantee with the job started?"""
        raise NotImplementedError

    def reclaimed(self, job: int, victims: Sequence[int]) -> None:
        """``job`` is about to start by evicting ``victims`` (for the plugin's counters)."""


class QueueGuarantee(Plugin):
    """A tree of queues with guarantees, borrowing and lending limits (the ``queues`` plugin, see
    :mod:`kant.model.queues`): what the ``reclaim`` action needs to give a queue its guarantee back by
    evicting borrowers in the tree's order. ``version`` changes whenever any queue's usage does."""

    version: int

    def any_borrowing(self) -> bool:
        """Does some queue hold more than its guarantee (else there is nothing to reclaim)?"""
        raise NotImplementedError

    def entitled(self, tenants: IntArray, gpus: IntArray, types: IntArray | None = None) -> BoolArray:
        """Would a job of each (tenant code, GPUs, job GPU type code if given) stay within its leaf
        queue's guarantee if started?"""
        raise NotImplementedError

    def reclaim_order(self, env: SchedulerEnv, job: int, running: IntArray, start: FloatArray) -> IntArray:
        """Indices into ``running`` (started at ``start``) that ``job`` may evict, in eviction order."""
        raise NotImplementedError

    def admits_without(self, env: SchedulerEnv, job: int, victims: Sequence[int]) -> bool:
        """Would the queues admit ``job`` once ``victims`` (running jobs) are gone?"""
        raise NotImplementedError

    def reclaimed(self, job: int, victims: Sequence[int]) -> None:
        """``job`` is about to start by evicting ``victims`` (for the plugin's counters)."""


class CoScheduling(Plugin):
    """Decides whether training and inference share GPUs: the ``inference-reclaim`` action only
    takes GPUs back from training when :meth:`shares_gpus` is true."""

    def shares_gpus(self) -> bool:
        return True


P = TypeVar("P", bound=Plugin)


class PluginLookup(Protocol):
    """Anything that finds a policy's plugins by kind: a :class:`~kant.framework.runner.Framework`,
    a :class:`~kant.scheduler.Scheduler` or a :class:`~kant.sim.simulator.Simulator`."""

    def plugin(self, kind: type[P], name: str | None = None) -> P | None: ...
