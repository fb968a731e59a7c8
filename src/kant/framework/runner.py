"""The runner: owns the order of extension points and applies weights; plugins never call each other.

Placement of one worker is: built-in resource fit (free GPUs, GPU type, CPU, memory) as one NumPy
mask over all nodes, then the policy's filters narrow the mask, then its scores rank the remaining
nodes (weighted sum on the fixed 0..100 scale) and the best node wins; ties go to the lowest node
index, so results are deterministic. A gang places its workers one after another on tentatively
held capacity and gets all of them or none.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from operator import mul
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.kept_order import KeptOrder
from kant.framework.plugin import Admit, ClassScore, Filter, JobListener, Place, Plugin, QueueSort, Score
from kant.framework.queue import PendingQueue, QueueOrder
from kant.framework.status import SUCCESS, Status
from kant.model.classes import ClassGroups, NodeClasses
from kant.model.fit import FULL_GPU_MILLI, gpu_slots, worker_slots
from kant.model.state import ClusterState, Placement
from kant.stamp import Stamped

__all__ = ["Framework"]

BoolArray = npt.NDArray[np.bool_]
SortKey = tuple[float, ...]
P = TypeVar("P", bound=Plugin)


class Framework:
    def __init__(self, env: SchedulerEnv, plugins: Sequence[Plugin]) -> None:
        self.env = env
        self.plugins = list(plugins)
        self.sorters = [p for p in self.plugins if isinstance(p, QueueSort)]
        self.admitters = [p for p in self.plugins if isinstance(p, Admit)]
        self.filters = [p for p in self.plugins if isinstance(p, Filter)]
        self.scorers = [p for p in self.plugins if isinstance(p, Score)]
        placers = [p for p in self.plugins if isinstance(p, Place)]
        if len(placers) > 1:
            names = ", ".join(p.NAME for p in placers)
            raise ValueError(f"at most one gang placement plugin per policy, got {names}")
        self.placer: Place | None = placers[0] if placers else None
        self.listeners = [p for p in self.plugins if isinstance(p, JobListener)]
        self.dynamic = any(p.DYNAMIC for p in self.sorters)
        #: the sorters' places whose keys are shape-keyed (QueueSort.SHAPE_KEYED), when every dynamic
        #: sorter is; None otherwise. Their slots of the static key are 0: a shape's list is then in
        #: the order of the rest of the key, and a walk merges shapes (kant.framework.queue)
        dyn = [i for i, p in enumerate(self.sorters) if p.DYNAMIC]
        self.shape_slots: tuple[int, ...] | None = (
            tuple(dyn) if dyn and all(self.sorters[i].SHAPE_KEYED for i in dyn) else None)
        #: the pending order kept across cycles, when every dynamic sorter has QueueSort.WAITING_KEYS
        self.kept: KeptOrder | None = (
            KeptOrder(self._waiting_key) if dyn and self.shape_slots is None
            and all(self.sorters[i].WAITING_KEYS for i in dyn) else None)
        # do placement outcomes depend only on the request? (see Filter.REQUEST_ONLY)
        self.request_only = all(p.REQUEST_ONLY for p in self.filters) and (
            self.placer is None or self.placer.REQUEST_ONLY
        )
        self._feasible_cache: dict[int, Status] = {}
        # Class-based placement (see place_workers): with no filters and only ClassScore scores (their
        # score depends on the node's GPU capacity and free GPUs alone), the best node is the
        # lowest-index node of the best (GPU type, capacity, free) class.
        self.class_scorers = [p for p in self.scorers if isinstance(p, ClassScore)]
        self.class_scores = not self.filters and len(self.class_scorers) == len(self.scorers)
        self.cpu_all_unmodelled = bool(env.cpu_unmodelled.all())
        self.mem_all_unmodelled = bool(env.mem_unmodelled.all())
        self._class_plans: dict[tuple[int, int], ClassGroups | None] = {}
        self._no_fit_cache: dict[tuple[int, int, int, int, int], Status] = {}
        jobs = env.jobs
        # per-job columns read one at a time on the hot path: the store's lists (they grow with it)
        self.job_gpus: list[int] = jobs.list_of("gpus_per_worker")
        self.job_workers: list[int] = jobs.list_of("workers")
        self.job_type: list[int] = jobs.list_of("gpu_type")
        self.job_cpu: list[int] = jobs.list_of("cpu_milli")
        self.job_mem: list[int] = jobs.list_of("memory_mib")
        self.job_milli: list[int] = jobs.list_of("gpu_milli")
        self.job_submit: list[float] = jobs.list_of("submit")
        # room_for's results for one state at one version, by (GPUs per worker, GPU type)
        #: room_for's answers per (GPUs per worker, type), while the state's free capacity is unchanged
        self._room: Stamped[dict[tuple[int, int], int]] = Stamped({})
        self._slot_weights: dict[tuple[int, int, int], list[int]] = {}  # see _slot_counts
        for p in self.plugins:
            p.setup(env)

    # --- lookup ------------------------------------------------------------------------------
    def plugin(self, kind: type[P], name: str | None = None) -> P | None:
        """The policy's first plugin that is a ``kind`` (and is called ``name``, if given), or None.
        The one way actions and drivers find plugins; call it at setup (``Action.attach``), not per job."""
        for p in self.plugins:
            if isinstance(p, kind) and (name is None or name == p.NAME):
                return p
        return None

    # --- ordering ----------------------------------------------------------------------------
    def _key(self, job: int, now: float) -> SortKey:
        env = self.env
        return (*[p.key(env, job, now) for p in self.sorters], self.job_submit[job], float(job))

    def _waiting_key(self, job: int, now: float) -> tuple[SortKey, float]:
        """:meth:`_key` of a job that waits from ``now`` on, and a time up to which it holds."""
        env = self.env
        keys: list[float] = []
        until = math.inf
        for p in self.sorters:
            if p.DYNAMIC:
                k, at = p.waiting_key(env, job, now)
                until = min(until, at)
            else:
                k = p.key(env, job, now)
            keys.append(k)
        return (*keys, self.job_submit[job], job), until

    def static_key(self, job: int) -> SortKey:
        if self.shape_slots is not None:  # (the shape-keyed sorters' slots are 0: see shape_slots)
            env, now = self.env, self.job_submit[job]
            slots = self.shape_slots
            return (*[0.0 if i in slots else p.key(env, job, now) for i, p in enumerate(self.sorters)], now,
                    float(job))
        return self._key(job, self.job_submit[job])

    def static_key_function(self) -> Callable[[int], SortKey]:
        """:meth:`static_key` as the cheapest equal function, for the queue (one call per push): with
        one or two sorters and no shape-keyed slots, a closure over their bound ``key`` methods (the
        method's extra call and list comprehension cost about as much again as the keys); otherwise
        the method itself."""
        if self.shape_slots is not None or len(self.sorters) > 2:
            return self.static_key
        env, submit = self.env, self.job_submit  # (the store's list: it grows in place)
        if not self.sorters:
            return lambda job: (submit[job], float(job))
        if len(self.sorters) == 1:
            k0 = self.sorters[0].key

            def one(job: int) -> SortKey:
                now = submit[job]
                return (k0(env, job, now), now, float(job))

            return one
        k0, k1 = (p.key for p in self.sorters)

        def two(job: int) -> SortKey:
            now = submit[job]
            return (k0(env, job, now), k1(env, job, now), now, float(job))

        return two

    def dynamic_key(self, now: float) -> DynamicKey | None:
        if not self.dynamic:
            return None
        return DynamicKey(self, now)

    # --- admission ---------------------------------------------------------------------------
    def admit(self, ctx: CycleContext, job: int) -> Status:
        for p in self.admitters:
            status = p.admit(ctx, job)
            if not status.ok:
                return status if status.plugin else Status(status.code, status.reason, p.NAME)
        return SUCCESS

    def feasible(self, job: int, shape: int) -> Status:
        """Could ``job`` ever run on the empty cluster under this policy? Cached per shape."""
        cached = self._feasible_cache.get(shape)
        if cached is None:
            cached = self._feasible(job)
            self._feasible_cache[shape] = cached
        return cached

    def _feasible(self, job: int) -> Status:
        env = self.env
        jobs, cluster = env.jobs, env.cluster
        g = int(jobs.gpus_per_worker[job])
        w = int(jobs.workers[job])
        t = int(jobs.gpu_type[job])
        per_node = worker_slots(g, int(jobs.gpu_milli[job]), int(jobs.cpu_milli[job]), int(jobs.memory_mib[job]),
                                cluster.gpus, cluster.cpu_milli, cluster.memory_mib, env.cpu_unmodelled,
                                env.mem_unmodelled, limit=w, ok=env.nodes_of_type(t) if t >= 0 else None)
        slots = int(np.minimum(per_node, w).sum())
        if slots < w:
            type_txt = "" if t < 0 else f" of type {jobs.gpu_type_names[t]}"
            if t >= 0 and not env.nodes_of_type(t).any():
                why = f"no node has GPU type {jobs.gpu_type_names[t]}"
            else:
                why = f"the whole cluster has room for only {slots} worker(s) of {g} GPU(s){type_txt}"
            return Status.unresolvable(f"needs {jobs.describe_request(job)}; {why}", "node-resources-fit")
        for p in self.admitters:
            status = p.feasible(env, job)
            if not status.ok:
                return Status.unresolvable(status.reason, status.plugin or p.NAME)
        if self.placer is not None:
            status = self.placer.feasible(env, job)
            if not status.ok:
                return Status.unresolvable(status.reason, status.plugin or self.placer.NAME)
        return SUCCESS

    # --- placement ---------------------------------------------------------------------------
    def candidate_mask(self, ctx: CycleContext, job: int, restrict: BoolArray | None = None) -> BoolArray:
        """Nodes where one worker of ``job`` fits now (:meth:`fit_mask`), within ``restrict`` when
        given, narrowed by the policy's Filter plugins: where a placer may put the next worker."""
        mask = self.fit_mask(ctx, job)
        if restrict is not None:
            mask &= restrict
        for f in self.filters:
            mask = f.filter(ctx, job, mask)
        return mask

    def fit_mask(self, ctx: CycleContext, job: int) -> BoolArray:
        """Nodes where one worker of ``job`` fits now (resources and GPU type)."""
        env, state, jobs = self.env, ctx.state, self.env.jobs
        g = int(jobs.gpus_per_worker[job])
        milli = self.job_milli[job]
        if milli < FULL_GPU_MILLI and g == 1 and milli > 0:  # a GPU share: a free GPU or an open slot with room
            mask = (state.free >= 1) | ((state.shares.best >= milli) & state.up)
        else:
            mask = state.free >= g if g > 0 else state.up.copy()
        t = int(jobs.gpu_type[job])
        if t >= 0:
            mask &= env.nodes_of_type(t)
        c = int(jobs.cpu_milli[job])
        if c > 0:
            mask &= env.cpu_unmodelled | (state.free_cpu >= c)
        m = int(jobs.memory_mib[job])
        if m > 0:
            mask &= env.mem_unmodelled | (state.free_mem >= m)
        return mask

    def room_for(self, ctx: CycleContext, job: int) -> int:
        """Upper bound on how many workers of ``job`` fit now, from the free-GPU histogram (GPUs and
        type only, so O(GPUs per node) instead of O(nodes)); remembered per (GPUs per worker, type)
        while the state's free capacity is unchanged."""
        g = self.job_gpus[job]
        if g == 0:
            return self.job_workers[job]
        state = ctx.state
        rooms = self._room
        if not rooms.fresh(state, state.version):
            rooms.keep(state, state.version, {})
        t = self.job_type[job]
        milli = self.job_milli[job]
        if milli < 1000 and g == 1 and milli > 0:  # a GPU share (FULL_GPU_MILLI = 1000)
            return self._share_room(state, milli, t)
        room = rooms.value.get((g, t))
        if room is None:
            hist, width = state.hist_counts
            if t < 0:  # every type: the whole histogram against the slot counts repeated per type
                weights = self._slot_weights.get((g, width, len(hist)))
                if weights is None:
                    weights = self._slot_counts(g, width, len(hist))
                room = sum(map(mul, hist, weights))
            else:
                per = self._slot_weights.get((g, width, width))
                if per is None:
                    per = self._slot_counts(g, width, width)
                room = 0
                for code in self.env.cluster_types_of(t):
                    base = code * width
                    room += sum(map(mul, hist[base:base + width], per))
            rooms.value[(g, t)] = room
        return room

    def _slot_counts(self, g: int, width: int, n: int) -> list[int]:
        """``gpu_slots(k, g)`` for ``k`` free GPUs, ``k`` = 0 .. ``width`` - 1, repeated over ``n``
        entries (``width``: one type's row of the free-GPU histogram; its length: every type's): the
        weights of the histogram's counts in :meth:`room_for`, kept by ``(g, width, n)``."""
        counts = self._slot_weights[(g, width, n)] = [gpu_slots(k, g) for k in range(width)] * (n // width)
        return counts

    def _share_room(self, state: ClusterState, milli: int, t: int) -> int:
        """:meth:`room_for` of a GPU share of ``milli``: completely free GPUs of the allowed types and
        (any type) open GPU slots: an upper bound, as room_for promises."""
        key = (-milli, t)  # cannot clash with a whole-GPU key
        room = self._room.value.get(key)
        if room is None:
            hist, width = state.hist_counts
            codes = self.env.cluster_types_of(t) if t >= 0 else range(len(hist) // width)
            room = 0
            for code in codes:
                base = code * width
                for k in range(1, width):
                    room += hist[base + k] * gpu_slots(k, 1, milli)
            # open GPU slots: their free milli in total over ``milli`` bounds what they hold (an upper
            # bound, O(1); the exact count, ShareBooks.workers, is O(nodes with shares))
            room += (state.shares.open * FULL_GPU_MILLI - state.shares.used_milli) // milli
            self._room.value[key] = room
        return room

    def place(self, ctx: CycleContext, job: int) -> Placement | Status:
        """Place the whole gang now (all workers or none), or say why not."""
        placer = self.placer
        if placer is not None and placer.one_worker_by_room and self.job_workers[job] == 1 \
                and self.job_milli[job] >= 1000:
            return placer.place(ctx, job, self)  # (its search finds no node exactly when room_for is 0)
        room = self.room_for(ctx, job)
        if room < self.job_workers[job]:
            return self._no_fit(ctx, job, room)
        if placer is not None and (self.job_milli[job] >= 1000 or placer.SHARES or not self.is_share(job)):
            return placer.place(ctx, job, self)
        return self.place_workers(ctx, job)

    def places_by_room(self, ctx: CycleContext, job: int) -> bool:
        """True when :meth:`place` succeeds exactly when :meth:`room_for` holds the job's workers: no
        placer, whole GPUs, placed from the class index (whose greedy choice finds a node for every
        worker once the room is there), so a planner may test the room instead of placing."""
        g = self.job_gpus[job]
        if self.placer is not None or g <= 0 or not self.class_scores or self.is_share(job):
            return False
        if not (self.cpu_all_unmodelled or not self.job_cpu[job]) or not (self.mem_all_unmodelled
                                                                           or not self.job_mem[job]):
            return False
        classes = ctx.state.classes
        return classes is not None and self.class_groups(classes, g, self.job_type[job]) is not None

    def is_share(self, job: int) -> bool:
        """Does ``job`` ask for a share of one GPU per worker (see :mod:`kant.model.fit`)?"""
        return self.job_gpus[job] == 1 and 0 < self.job_milli[job] < FULL_GPU_MILLI

    def place_workers(self, ctx: CycleContext, job: int, restrict: BoolArray | None = None) -> Placement | Status:
        """Greedy filter+score placement of every worker of ``job``, optionally only on nodes in
        ``restrict``. Returns the placement (not yet allocated) or why it failed."""
        jobs = self.env.jobs
        if self.job_milli[job] < 1000 and self.is_share(job):
            return self._place_share_workers(ctx, job, restrict)
        if restrict is None and self.class_scores:
            classes = ctx.state.classes
            g = self.job_gpus[job]
            if classes is not None and g > 0 and (self.cpu_all_unmodelled or not self.job_cpu[job]) \
                    and (self.mem_all_unmodelled or not self.job_mem[job]):
                groups = self.class_groups(classes, g, self.job_type[job])
                if groups is not None:
                    return self._place_by_class(ctx, job, classes, groups, g)
        mask = self.candidate_mask(ctx, job, restrict)
        g = int(jobs.gpus_per_worker[job])
        c = int(jobs.cpu_milli[job])
        m = int(jobs.memory_mib[job])
        w = int(jobs.workers[job])
        nodes = np.flatnonzero(mask)
        if w == 1:
            if len(nodes) == 0:
                return self._no_fit(ctx, job, 0)
            return Placement((self._best(ctx, job, nodes),), g, c, m)
        state = ctx.state
        if g > 0:
            slots = int((state.free[nodes] // g).sum())
            if slots < w:
                return self._no_fit(ctx, job, slots)
        chosen: list[int] = []
        try:
            for _ in range(w):
                if len(nodes) == 0:
                    return self._no_fit(ctx, job, len(chosen))
                best = self._best(ctx, job, nodes)
                chosen.append(best)
                state.free[best] -= g
                state.free_cpu[best] -= c
                state.free_mem[best] -= m
                if not state.fits(best, g, c, m):
                    nodes = nodes[nodes != best]
        finally:
            for n in chosen:
                state.free[n] += g
                state.free_cpu[n] += c
                state.free_mem[n] += m
        return Placement(tuple(chosen), g, c, m)

    def _place_share_workers(self, ctx: CycleContext, job: int, restrict: BoolArray | None) -> Placement | Status:
        """:meth:`place_workers` for a GPU share: filters and scores see the state with the earlier
        workers' shares tentatively booked (on the arrays they read: ``free`` and ``shares.best``)."""
        state = ctx.state
        milli, c, m, w = self.job_milli[job], self.job_cpu[job], self.job_mem[job], self.job_workers[job]
        chosen: list[int] = []
        touched: dict[int, tuple[int, int, list[int]]] = {}  # node -> (free, shares.best, slot copy)
        try:
            for _ in range(w):
                nodes = np.flatnonzero(self.candidate_mask(ctx, job, restrict))
                if len(nodes) == 0:
                    return self._no_fit(ctx, job, len(chosen))
                best = self._best(ctx, job, nodes)
                chosen.append(best)
                if w == 1:
                    break
                if best not in touched:
                    touched[best] = (state.free.item(best), state.shares.best.item(best),
                                     list(state.shares.slots.get(best, ())))
                slots = touched[best][2]
                fit = [v for v in slots if v >= milli]
                if fit:
                    slots[slots.index(min(fit))] -= milli
                else:
                    state.free[best] -= 1
                    slots.append(FULL_GPU_MILLI - milli)
                state.shares.best[best] = max([*slots, 0])
                state.free_cpu[best] -= c
                state.free_mem[best] -= m
        finally:
            for n, (free, smax, _) in touched.items():
                state.free[n] = free
                state.shares.best[n] = smax
            for n in chosen if w > 1 else ():
                state.free_cpu[n] += c
                state.free_mem[n] += m
        return Placement(tuple(chosen), 1, c, m, milli)

    # --- class-based placement ---------------------------------------------------------------
    def class_groups(self, classes: NodeClasses, gpus: int, gpu_type: int) -> ClassGroups | None:
        """Node classes where one worker of ``gpus`` GPUs of job type ``gpu_type`` fits, grouped by
        equal weighted score (the same floating-point sum :meth:`_best` computes per node), best
        group first; classes within a group ascending. None if a score is NaN (then the vectorised
        path decides). Computed once per (gpus, type): class scores depend on nothing else."""
        key = (gpus, gpu_type)
        if key in self._class_plans:
            return self._class_plans[key]
        cand = classes.class_free >= gpus
        if gpu_type >= 0:
            cand &= np.isin(classes.class_type, self.env.cluster_types_of(gpu_type))
        ids = np.flatnonzero(cand)
        plan: ClassGroups | None
        if not self.scorers or len(ids) == 0:
            plan = [ids.tolist()] if len(ids) else []
        else:
            cap, free = classes.class_cap[ids], classes.class_free[ids]
            first = self.class_scorers[0]
            total = first.score_classes(self.env, gpus, cap, free) * first.weight
            for s in self.class_scorers[1:]:
                total = total + s.score_classes(self.env, gpus, cap, free) * s.weight
            total = np.asarray(total, dtype=np.float64)
            if np.isnan(total).any():
                plan = None
            else:
                plan = []
                last = None
                for i in np.argsort(-total, kind="stable").tolist():
                    if last is None or total[i] != last:
                        plan.append([])
                        last = total[i]
                    plan[-1].append(int(ids[i]))
        self._class_plans[key] = plan
        return plan

    @staticmethod
    def best_of_classes(classes: NodeClasses, groups: ClassGroups) -> int:
        """Lowest-index node of the best non-empty group of classes, or -1 if all are empty."""
        count = classes.count
        for group in groups:
            best = -1
            for c in group:
                if count[c]:
                    head = classes.head(c)
                    if best < 0 or head < best:
                        best = head
            if best >= 0:
                return best
        return -1

    def _place_by_class(self, ctx: CycleContext, job: int, classes: NodeClasses, groups: ClassGroups,
                        g: int) -> Placement | Status:
        """:meth:`place_workers` without a node scan: the same greedy choice, worker by worker, from
        the class index (a worker's node moves to the class with ``g`` fewer free GPUs, tentatively,
        and is moved back afterwards)."""
        c = self.job_cpu[job]
        m = self.job_mem[job]
        w = self.job_workers[job]
        if w == 1:
            best = self.best_of_classes(classes, groups)
            if best < 0:
                return self._no_fit(ctx, job, 0)
            return Placement((best,), g, c, m)
        slots = self.room_for(ctx, job)  # = sum over fitting nodes of free // g
        if slots < w:
            return self._no_fit(ctx, job, slots)
        chosen: list[int] = []
        node_class = classes.node_class
        try:
            for _ in range(w):
                best = self.best_of_classes(classes, groups)
                if best < 0:  # pragma: no cover - slots >= w guarantees a node per worker
                    return self._no_fit(ctx, job, len(chosen))
                chosen.append(best)
                classes.move(best, node_class[best] - g)
        finally:
            for n in reversed(chosen):
                classes.move(n, node_class[n] + g)
        return Placement(tuple(chosen), g, c, m)

    def _best(self, ctx: CycleContext, job: int, nodes: npt.NDArray[np.int64]) -> int:
        if not self.scorers or len(nodes) == 1:
            return int(nodes[0])
        total = self.scorers[0].score(ctx, job, nodes) * self.scorers[0].weight
        for s in self.scorers[1:]:
            total = total + s.score(ctx, job, nodes) * s.weight
        return int(nodes[int(np.argmax(total))])

    def _no_fit(self, ctx: CycleContext, job: int, slots: int) -> Status:
        # the message depends only on what describe_request reads, and slots: built once per value
        key = (self.job_workers[job], self.job_gpus[job], self.job_milli[job], self.job_type[job], slots)
        status = self._no_fit_cache.get(key)
        if status is None:
            request = self.env.jobs.describe_request(job)
            status = Status.unschedulable(f"needs {request}; room now for {slots} worker(s)", "node-resources-fit")
            if len(self._no_fit_cache) < 65536:
                self._no_fit_cache[key] = status
        return status

    # --- growth ------------------------------------------------------------------------------
    def jobs_added(self, start: int) -> None:
        """Jobs ``start ..`` joined the store: every plugin grows its per-job state."""
        for p in self.plugins:
            p.jobs_added(self.env, start)

    # --- listeners ---------------------------------------------------------------------------
    def job_started(self, job: int, now: float, placement: Placement) -> None:
        for p in self.listeners:
            p.job_started(self.env, job, now, placement)

    def job_stopped(self, job: int, now: float, placement: Placement, finished: bool) -> None:
        for p in self.listeners:
            p.job_stopped(self.env, job, now, placement, finished)


class DynamicKey(QueueOrder):
    """The queue order at one instant: call it with a job for its sort key (a tuple), or sort many
    jobs at once with :meth:`order` (one NumPy lexsort over the sorters' vectorised ``keys``)."""

    __slots__ = ("fw", "now", "shape_slots")

    def __init__(self, fw: Framework, now: float) -> None:
        self.fw = fw
        self.now = now
        #: the key's places that are equal for every job of a shape (Framework.shape_slots), or None
        self.shape_slots = fw.shape_slots

    def shape_values(self, reps: npt.NDArray[np.int64]) -> list[tuple[float, ...]]:
        """For one job of each shape (``reps``), the keys of the shape-keyed sorters now."""
        env = self.fw.env
        sorters = self.fw.sorters
        assert self.shape_slots is not None
        cols = [sorters[i].keys(env, reps, self.now).tolist() for i in self.shape_slots]
        return list(zip(*cols, strict=True))

    def __call__(self, job: int) -> SortKey:
        return self.fw._key(job, self.now)

    def kept_by_shape(self, queue: PendingQueue) -> Mapping[int, list[SortKey]] | None:
        kept = self.fw.kept
        return None if kept is None else kept.by_shape(queue, self.now)

    def order(self, jobs: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """``jobs`` sorted by (sorter keys in policy order, submit time, job row)."""
        env = self.fw.env
        cols = [p.keys(env, jobs, self.now) for p in self.fw.sorters]
        return jobs[np.lexsort((jobs, env.jobs.submit[jobs], *reversed(cols)))]
