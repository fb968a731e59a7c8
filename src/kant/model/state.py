"""Mutable cluster state: who holds which GPUs right now, plus aggregates kept up to date.

Every change goes through :meth:`ClusterState.allocate` and :meth:`ClusterState.release`, which
keep per-node free GPUs, per-leaf and per-spine free GPUs, the number of partly allocated nodes and
the free GPUs stranded on them in step, in O(nodes touched). Metrics read these aggregates instead
of scanning the cluster.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator

import numpy as np
import numpy.typing as npt

from kant.errors import SchedulingError
from kant.model.classes import NodeClasses
from kant.model.cluster import Cluster
from kant.model.fit import FULL_GPU_MILLI
from kant.model.placement import Placement, slot_setters
from kant.model.scalars import scalar_view
from kant.model.shares import ShareBooks

__all__ = ["ClusterState", "Placement", "slot_setters"]


#: :meth:`ClusterState.what_if` recounts from the changed nodes alone while they are at most one in
#: this many nodes (beyond, the full recount over every node is about as cheap)
_DELTA_SHARE = 8


class ClusterState:
    """Free resources per node and the live allocations. Not thread-safe; one writer."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.free = cluster.gpus.copy()
        self.free_cpu = cluster.cpu_milli.copy()
        self.free_mem = cluster.memory_mib.copy()
        self.up = np.ones(cluster.n_nodes, dtype=bool)
        self.leaf_free = cluster.leaf_gpus.copy()
        self.spine_free = cluster.spine_gpus.copy()
        self.allocations: dict[int, Placement] = {}
        #: bumped on every change of free capacity (allocate, release, failure, repair): a reader may
        #: cache something computed from the aggregates while it is unchanged
        self.version = 0
        # Capacity that came back (a release, a node repaired), as (node, free before, free after),
        # oldest first. Entry k of the whole history is release_log[k - release_log_start]; the log
        # is trimmed as it grows, so a reader that fell behind release_log_start must start afresh.
        # Until capacity comes back a request that failed to place still fails: it has only been
        # taken since.
        self.release_log: list[tuple[int, int, int]] = []
        self.release_log_start = 0
        #: how many capacity returns ever happened: ``release_log_start + len(release_log)``, kept as
        #: the log grows (read every cycle by the failure memos)
        self.release_count = 0
        #: nodes whose free capacity (any resource) or ``up`` changed, oldest first (a node once per
        #: change, repeats kept); entry k of the whole history is ``change_log[k - change_log_start]``,
        #: trimmed as it grows like ``release_log``. A reader keeping something per node follows it
        #: (:class:`kant.actions.backfill.leftover.KeptX`); one that fell behind starts afresh.
        self.change_log: list[int] = []
        self.change_log_start = 0
        # aggregates, maintained incrementally
        self.allocated_gpus = 0
        self.down_gpus = 0
        self.partial_nodes = 0  # up GPU nodes with 0 < allocated < capacity
        self.free_on_partial = 0  # free GPUs on those nodes
        self.empty_nodes = int(np.count_nonzero(cluster.gpus))  # up GPU nodes with nothing allocated
        # free_hist[t, k]: up GPU nodes of GPU type t with exactly k free GPUs. A gang of w workers x
        # g GPUs of type t can only fit if sum_k free_hist[t, k] * (k // g) >= w: an O(max GPUs per
        # node) test that rejects most hopeless placements without touching the node arrays.
        n_types = len(cluster.gpu_type_names)
        hist = np.zeros((n_types, cluster.max_gpus_per_node + 1), dtype=np.int64)
        gpu_nodes = cluster.gpus > 0
        np.add.at(hist, (cluster.gpu_type[gpu_nodes], cluster.gpus[gpu_nodes]), 1)
        self.free_hist = hist
        # per-node constants as Python lists: the per-event bookkeeping below reads them one at a time
        self._cap: list[int] = cluster.gpus.tolist()
        #: each node's GPU-type code as a Python list (read-only; for per-node loops)
        self.node_types: list[int] = cluster.gpu_type.tolist()
        self._leaf: list[int] = cluster.leaf.tolist()
        self._spine: list[int] = cluster.spine.tolist()
        self._has_cpu: list[bool] = (cluster.cpu_milli != 0).tolist()
        self._has_mem: list[bool] = (cluster.memory_mib != 0).tolist()
        self._up: list[bool] = [True] * cluster.n_nodes  # the same as ``up``, cheap to read one at a time
        # free GPUs of nodes that take no work (``up`` False: failed or cordoned), which ``free``
        # shows as 0; what jobs on such a node release comes back here, and to ``free`` when it is up
        self._idle_off: list[int] = [0] * cluster.n_nodes
        self._mirror()
        #: nodes by (GPU type, capacity, free GPUs), for the class-based placement paths; None on a
        #: planning copy (:meth:`what_if`), which then uses the vectorised paths
        self.classes: NodeClasses | None = NodeClasses(cluster)
        #: the GPU-share books (docs/gpu-sharing.md): ``free`` counts completely free GPUs only; a GPU
        #: that holds shares is taken from it (an open GPU slot there) until its last share leaves
        self.shares = ShareBooks(cluster.names, self._up)

    def _mirror(self) -> None:
        """Python-list copies of the leaf and spine free GPUs (only this class writes them), so a change
        reads plain ints and writes each array element once; and memoryviews of the free-GPU arrays
        (the same buffers: a scalar read or write through one costs a third of the array's own)."""
        self._leaf_free: list[int] = self.leaf_free.tolist()
        self._spine_free: list[int] = self.spine_free.tolist()
        self._free_mv = scalar_view(self.free, int)
        self._leaf_mv = scalar_view(self.leaf_free, int)
        self._spine_mv = scalar_view(self.spine_free, int)

    @property
    def free_hist(self) -> npt.NDArray[np.int64]:
        """``free_hist[t, k]``: up GPU nodes of GPU type ``t`` with exactly ``k`` free GPUs (a new
        array on each read; the state keeps the counts as a flat Python list, ``_hist``)."""
        return np.asarray(self._hist, dtype=np.int64).reshape(self._hist_shape)

    @free_hist.setter
    def free_hist(self, hist: npt.NDArray[np.int64]) -> None:
        self._hist_shape: tuple[int, int] = (int(hist.shape[0]), int(hist.shape[1]))
        self._hist_width = self._hist_shape[1]
        self._set_hist(hist.reshape(-1).tolist())

    def _set_hist(self, counts: list[int]) -> None:
        """The histogram's flat counts are now ``counts`` (the one way ``_hist`` is replaced)."""
        self._hist: list[int] = counts
        #: the free-GPU histogram as (flat list, row width): ``counts[t * width + k]`` is
        #: ``free_hist[t, k]``. The live list, read only: cheaper than the array for a few reads (an
        #: attribute, kept with ``_hist``: room_for reads it at nearly every start)
        self.hist_counts: tuple[list[int], int] = (counts, self._hist_width)

    # --- queries -----------------------------------------------------------------------------
    @property
    def free_gpus(self) -> int:
        return self.cluster.total_gpus - self.allocated_gpus - self.down_gpus

    @property
    def allocated_milli(self) -> int:
        """GPU capacity held by jobs, in milli-GPU (a GPU that holds shares counts what they hold)."""
        shares = self.shares
        return (self.allocated_gpus - shares.open) * FULL_GPU_MILLI + shares.used_milli

    def share_fits(self, node: int, milli: int, cpu_milli: int = 0, memory_mib: int = 0, count: int = 1) -> bool:
        """Do ``count`` workers of a ``milli`` GPU share (with CPU and memory) fit on ``node`` now?"""
        if not self._up[node]:
            return False
        room = self.free.item(node) * (FULL_GPU_MILLI // milli) + self.shares.room(node, milli)
        return bool(
            room >= count
            and (not self._has_cpu[node] or self.free_cpu[node] >= cpu_milli * count)
            and (not self._has_mem[node] or self.free_mem[node] >= memory_mib * count)
        )

    def gpu_free_milli(self, node: int) -> list[int]:
        """Free milli of each GPU of ``node``, largest first (0 for a GPU held whole)."""
        cap = self._cap[node]
        whole = self.free.item(node) if self._up[node] else self._idle_off[node]
        shares = self.shares.free_milli(node)
        return [FULL_GPU_MILLI] * whole + shares + [0] * (cap - whole - len(shares))

    def __contains__(self, job: int) -> bool:
        return job in self.allocations

    def running(self) -> Iterator[int]:
        return iter(self.allocations)

    # --- node classification for the aggregates ----------------------------------------------
    def _unclassify(self, node: int) -> None:
        cap = self._cap[node]
        if cap == 0 or not self.up[node]:
            return
        free = int(self.free[node])
        i = self.node_types[node] * self._hist_width + free
        self._hist[i] -= 1
        if free == cap:
            self.empty_nodes -= 1
        elif free > 0:
            self.partial_nodes -= 1
            self.free_on_partial -= free
        if self.classes is not None:
            self.classes.move(node, -1)

    def _classify(self, node: int) -> None:
        cap = self._cap[node]
        if cap == 0 or not self.up[node]:
            return
        free = int(self.free[node])
        i = self.node_types[node] * self._hist_width + free
        self._hist[i] += 1
        if free == cap:
            self.empty_nodes += 1
        elif free > 0:
            self.partial_nodes += 1
            self.free_on_partial += free
        if self.classes is not None:
            self.classes.move(node, self.classes.node_base[node] + free)

    # --- changes -----------------------------------------------------------------------------
    def fits(self, node: int, gpus: int, cpu_milli: int = 0, memory_mib: int = 0, count: int = 1) -> bool:
        return bool(
            self._up[node]
            and self._free_mv[node] >= gpus * count
            and (not self._has_cpu[node] or self.free_cpu[node] >= cpu_milli * count)
            and (not self._has_mem[node] or self.free_mem[node] >= memory_mib * count)
        )

    def allocate(self, job: int, placement: Placement) -> None:
        """Give ``job`` its placement; raises :class:`SchedulingError` if anything is over-booked."""
        if job in self.allocations:
            raise SchedulingError(f"job {job} is already allocated")
        if placement.gpu_milli < FULL_GPU_MILLI and placement.gpus == 1:
            self._allocate_share(job, placement)
            return
        for node, count in placement.per_node.items():
            if not self.fits(node, placement.gpus, placement.cpu_milli, placement.memory_mib, count):
                raise SchedulingError(
                    f"job {job}: node {self.cluster.names[node]} cannot hold {count} worker(s) of "
                    f"{placement.gpus} GPU(s) (free {int(self.free[node])}, up={bool(self.up[node])})"
                )
        self._apply(placement, -1)
        self.allocations[job] = placement

    def release(self, job: int) -> Placement:
        """Take back everything ``job`` holds and return its placement."""
        try:
            placement = self.allocations.pop(job)
        except KeyError:
            raise SchedulingError(f"job {job} holds no allocation") from None
        if job in self.shares.of_job:
            self._release_share(job, placement)
        else:
            self._apply(placement, +1)
        return placement

    # --- GPU shares --------------------------------------------------------------------------
    def _allocate_share(self, job: int, placement: Placement) -> None:
        m = placement.gpu_milli
        if m <= 0:
            raise SchedulingError(f"job {job}: gpu_milli must be 1..1000, got {m}")
        if placement.gpu_pick and len(placement.gpu_pick) != len(placement.nodes):
            raise SchedulingError(f"job {job}: gpu_pick has {len(placement.gpu_pick)} entries for "
                                  f"{len(placement.nodes)} worker(s)")
        for node, count in placement.per_node.items():
            if not self.share_fits(node, m, placement.cpu_milli, placement.memory_mib, count):
                raise SchedulingError(
                    f"job {job}: node {self.cluster.names[node]} cannot hold {count} worker(s) of "
                    f"{m} milli-GPU (free GPUs {int(self.free[node])}, up={bool(self.up[node])})"
                )
        taken: list[int] = []
        try:
            for k, node in enumerate(placement.nodes):
                pick = placement.gpu_pick[k] if placement.gpu_pick else -1
                taken.append(self._take_share(job, node, m, pick))
        except SchedulingError:
            for node, slot in zip(placement.nodes, taken, strict=False):
                self._give_share(node, slot, m)
            raise
        self._share_cpu_mem(placement, -1)
        self.shares.of_job[job] = tuple(taken)
        self.allocations[job] = placement
        self.version += 1

    def _share_cpu_mem(self, placement: Placement, sign: int) -> None:
        self._log_changes(placement.per_node)
        for node, count in placement.per_node.items():
            if self._has_cpu[node]:
                self.free_cpu[node] += sign * placement.cpu_milli * count
            if self._has_mem[node]:
                self.free_mem[node] += sign * placement.memory_mib * count

    def _take_share(self, job: int, node: int, m: int, pick: int) -> int:
        """Book ``m`` milli on a GPU slot of ``node`` (:meth:`ShareBooks.take`); a GPU it opens
        leaves the completely free GPUs. Returns the slot."""
        slot, opened = self.shares.take(job, node, m, pick, self.free.item(node))
        if opened:
            self._apply(Placement((node,), 1), -1)
        return slot

    def _give_share(self, node: int, slot: int, m: int) -> None:
        if self.shares.give(node, slot, m):  # its last share left: the GPU is completely free again
            self._apply(Placement((node,), 1), +1)
        elif self._up[node]:  # capacity came back without a whole GPU: log it for the failure memo
            f = self.free.item(node)
            self._log_release(node, f, f)

    def _release_share(self, job: int, placement: Placement) -> None:
        m = placement.gpu_milli
        for node, slot in zip(placement.nodes, self.shares.of_job.pop(job), strict=True):
            self._give_share(node, slot, m)
        self._share_cpu_mem(placement, +1)
        self.version += 1

    def _log_changes(self, nodes: Iterable[int]) -> None:
        changes = self.change_log
        changes.extend(nodes)
        if len(changes) > 8192:
            del changes[:4096]
            self.change_log_start += 4096

    def _log_release(self, node: int, before: int, after: int) -> None:
        log = self.release_log
        log.append((node, before, after))
        self.release_count += 1
        if len(log) > 8192:
            del log[:4096]
            self.release_log_start += 4096

    def _apply(self, placement: Placement, sign: int) -> None:
        """Add ``sign`` x the placement's capacity back to its nodes (+1 release, -1 allocate) and keep
        every aggregate in step (:meth:`_unclassify` then :meth:`_classify` per node, inlined without
        reading the arrays again: this runs twice per job)."""
        self.version += 1
        changes = self.change_log  # _log_changes, inlined: this runs twice per job
        changes.extend(placement.per_node)
        if len(changes) > 8192:
            del changes[:4096]
            self.change_log_start += 4096
        g = placement.gpus
        free, leaf_free, spine_free = self._free_mv, self._leaf_mv, self._spine_mv
        leaf_list, spine_list = self._leaf_free, self._spine_free
        caps, leaf, spine, up, types = self._cap, self._leaf, self._spine, self._up, self.node_types
        hist, width = self._hist, self._hist_width
        has_cpu, has_mem = self._has_cpu, self._has_mem
        classes = self.classes
        log = self.release_log if sign > 0 else None
        empty = partial = on_partial = 0
        for node, count in placement.per_node.items():
            delta = sign * g * count
            if not up[node]:  # a node that takes no work (cordoned): its capacity comes back to nobody
                self._idle_off[node] += delta
                self.down_gpus += delta
                if has_cpu[node]:
                    self.free_cpu[node] += sign * placement.cpu_milli * count
                if has_mem[node]:
                    self.free_mem[node] += sign * placement.memory_mib * count
                continue
            before = free[node]
            after = before + delta
            if log is not None:
                log.append((node, before, after))
                if len(log) > 8192:
                    del log[:4096]
                    self.release_log_start += 4096
            free[node] = after
            lf = leaf[node]
            leaf_free[lf] = leaf_list[lf] = leaf_list[lf] + delta
            sp = spine[node]
            spine_free[sp] = spine_list[sp] = spine_list[sp] + delta
            if has_cpu[node]:
                self.free_cpu[node] += sign * placement.cpu_milli * count
            if has_mem[node]:
                self.free_mem[node] += sign * placement.memory_mib * count
            cap = caps[node]
            if cap and delta and up[node]:
                row = types[node] * width
                hist[row + before] -= 1
                hist[row + after] += 1
                if before == cap:
                    empty -= 1
                elif before > 0:
                    partial -= 1
                    on_partial -= before
                if after == cap:
                    empty += 1
                elif after > 0:
                    partial += 1
                    on_partial += after
                if classes is not None:
                    classes.move(node, classes.node_base[node] + after)
        self.empty_nodes += empty
        self.partial_nodes += partial
        self.free_on_partial += on_partial
        self.allocated_gpus -= sign * g * len(placement.nodes)
        if log is not None:
            self.release_count = self.release_log_start + len(log)

    def _add_group_free(self, node: int, delta: int) -> None:
        self.version += 1
        lf, sp = self._leaf[node], self._spine[node]
        self.leaf_free[lf] = self._leaf_free[lf] = self._leaf_free[lf] + delta
        self.spine_free[sp] = self._spine_free[sp] = self._spine_free[sp] + delta

    def set_unschedulable(self, node: int) -> None:
        """The node takes no new work (cordoned, or failed once its jobs are released); jobs on it go
        on. Its free GPUs count as down and come back with :meth:`set_schedulable`."""
        if not self.up[node]:
            return
        free = self.free.item(node)
        self._unclassify(node)
        self._log_changes((node,))
        self.up[node] = self._up[node] = False
        self.free[node] = 0
        self._idle_off[node] = free
        self._add_group_free(node, -free)
        self.down_gpus += free

    def set_schedulable(self, node: int) -> None:
        """The node takes work again, with the GPUs its jobs do not hold."""
        if self.up[node]:
            return
        free = self._idle_off[node]
        self._idle_off[node] = 0
        self._log_changes((node,))
        self.up[node] = self._up[node] = True
        self.free[node] = free
        self._add_group_free(node, free)
        self.down_gpus -= free
        self._classify(node)
        self._log_release(node, 0, free)

    def set_down(self, node: int) -> None:
        """Mark a node failed. The caller must first release every job on it."""
        cap = self._cap[node]
        if (self.free.item(node) if self.up[node] else self._idle_off[node]) != cap:
            raise SchedulingError(f"node {self.cluster.names[node]} still holds work; release it first")
        self.set_unschedulable(node)

    def set_up(self, node: int) -> None:
        """A failed node is back (see :meth:`set_schedulable`)."""
        self.set_schedulable(node)

    def used_gpus(self) -> npt.NDArray[np.int64]:
        """GPUs held by jobs on each node (a new array; O(nodes), for views, not the hot path)."""
        held_off = self.cluster.gpus - np.asarray(self._idle_off, dtype=np.int64)
        return np.where(self.up, self.cluster.gpus - self.free, held_off)

    def jobs_on(self, node: int) -> list[int]:
        return [j for j, p in self.allocations.items() if node in p.per_node]

    def what_if(self, free: npt.ArrayLike, free_cpu: npt.ArrayLike | None = None,
                free_mem: npt.ArrayLike | None = None, shares: bool = True,
                changed: Collection[int] | None = None) -> ClusterState:
        """A planning copy with other free capacity per node (as the cluster will be when some jobs
        end, or less what a reservation holds), for trying a placement without changing anything.
        Per-node arrays are copied and every aggregate is recomputed from them, or, where few nodes'
        free GPUs differ from this state's, from this state's aggregates and those nodes alone (the
        same values: :meth:`_what_if_delta`); ``allocations`` is shared and must not be changed
        through the copy. O(nodes). Without ``shares`` the copy has no open GPU slots (``free`` is
        then all the GPU capacity: backfill's future capacity). ``changed``: nodes that hold every
        node where ``free`` may differ from this state's free GPUs (the caller knows them; None:
        found by comparing)."""
        cluster = self.cluster
        cls = type(self)
        view = cls.__new__(cls)  # copy.copy's own steps for a plain object, without its generic dispatch
        view.__dict__.update(self.__dict__)
        view.classes = None  # the index belongs to the live state; a planning copy uses vectorised paths
        view.free = np.array(free, dtype=np.int64)
        view.free_cpu = np.array(self.free_cpu if free_cpu is None else free_cpu, dtype=np.int64)
        view.free_mem = np.array(self.free_mem if free_mem is None else free_mem, dtype=np.int64)
        view.change_log, view.change_log_start = [], 0  # the copy's own (the live log is the live state's)
        f = view.free
        if changed is not None and len(changed) * _DELTA_SHARE <= cluster.n_nodes:
            nodes = np.fromiter(changed, dtype=np.int64, count=len(changed))
        else:
            nodes = np.flatnonzero(f != self.free)
        if len(nodes) * _DELTA_SHARE <= cluster.n_nodes:
            self._what_if_delta(view, nodes)
            view.shares = self.shares.copy(keep=shares)
            view._mirror()
            return view
        view.leaf_free = np.bincount(cluster.leaf, weights=f, minlength=cluster.n_leaves).astype(np.int64)
        view.spine_free = np.bincount(cluster.spine, weights=f, minlength=cluster.n_spines).astype(np.int64)
        gpu_up = self.up & (cluster.gpus > 0)
        held_off = int(cluster.gpus[~self.up].sum()) - self.down_gpus  # held by jobs on nodes taking no work
        view.allocated_gpus = int((cluster.gpus - f)[self.up].sum()) + held_off
        partial = gpu_up & (f > 0) & (f < cluster.gpus)
        view.partial_nodes = int(partial.sum())
        view.free_on_partial = int(f[partial].sum())
        view.empty_nodes = int((gpu_up & (f == cluster.gpus)).sum())
        width = self.free_hist.shape[1]
        flat = cluster.gpu_type[gpu_up] * width + f[gpu_up]
        view.free_hist = np.bincount(flat, minlength=self.free_hist.size).reshape(self.free_hist.shape)
        view.shares = self.shares.copy(keep=shares)  # a planning copy books nothing on the live books
        view._mirror()
        return view

    def _what_if_delta(self, view: ClusterState, changed: npt.NDArray[np.int64]) -> None:
        """:meth:`what_if`'s GPU aggregates of ``view`` from this state's, changed on the nodes
        ``changed`` alone (where ``view.free`` differs): each is a sum or a count over nodes, and this
        state's equal the same sums over its own ``free`` (:meth:`check`), so the values are those
        of the full recount (property-tested against it)."""
        cluster = self.cluster
        old, new = self.free[changed], view.free[changed]
        diff = new - old
        view.leaf_free = self.leaf_free.copy()
        np.add.at(view.leaf_free, cluster.leaf[changed], diff)
        view.spine_free = self.spine_free.copy()
        np.add.at(view.spine_free, cluster.spine[changed], diff)
        up = self.up[changed]
        view.allocated_gpus = self.allocated_gpus - int(diff[up].sum())
        gpus = cluster.gpus[changed]
        gpu_up = up & (gpus > 0)
        partial = empty = on_partial = 0
        hist, width = self._hist.copy(), self._hist_width
        rows = zip((cluster.gpu_type[changed][gpu_up] * width).tolist(), gpus[gpu_up].tolist(),
                   old[gpu_up].tolist(), new[gpu_up].tolist(), strict=True)
        for base, cap, was, now in rows:  # the up GPU nodes among the changed: few, plain ints
            hist[base + was] -= 1
            hist[base + now] += 1
            if 0 < was < cap:
                partial -= 1
                on_partial -= was
            elif was == cap:
                empty -= 1
            if 0 < now < cap:
                partial += 1
                on_partial += now
            elif now == cap:
                empty += 1
        view._set_hist(hist)
        view.partial_nodes = self.partial_nodes + partial
        view.free_on_partial = self.free_on_partial + on_partial
        view.empty_nodes = self.empty_nodes + empty

    # --- checking ----------------------------------------------------------------------------
    def check(self) -> None:
        """Recompute everything from the allocations and compare; raises on any mismatch.

        O(cluster + allocations): for tests and debug runs, never the hot path.
        """
        cluster = self.cluster
        used = np.zeros(cluster.n_nodes, dtype=np.int64)
        slot_used: dict[tuple[int, int], int] = {}
        for job, p in self.allocations.items():
            share = self.shares.of_job.get(job)
            if share is not None:
                for node, slot in zip(p.nodes, share, strict=True):
                    slot_used[(node, slot)] = slot_used.get((node, slot), 0) + p.gpu_milli
                continue
            for node, count in p.per_node.items():
                used[node] += p.gpus * count
        self.shares.check(self.allocations, slot_used)
        for node, _ in slot_used:
            used[node] += 1
        if np.any(used > cluster.gpus):
            bad = int(np.flatnonzero(used > cluster.gpus)[0])
            raise SchedulingError(f"node {cluster.names[bad]} double-booked: {used[bad]} > {cluster.gpus[bad]}")
        cap = np.where(self.up, cluster.gpus, 0)
        off = np.asarray(self._idle_off, dtype=np.int64)
        if not np.array_equal(np.where(self.up, 0, cluster.gpus - used), off):
            raise SchedulingError("idle GPUs of nodes taking no work out of step with allocations")
        if self.down_gpus != int(off.sum()):
            raise SchedulingError("down_gpus aggregate out of step")
        if not np.array_equal(self.free, np.where(self.up, cluster.gpus - used, 0)):
            raise SchedulingError("free GPU array out of step with allocations")
        free = self.free
        if not np.array_equal(self.leaf_free, np.bincount(cluster.leaf, weights=free, minlength=cluster.n_leaves)):
            raise SchedulingError("leaf aggregates out of step")
        if not np.array_equal(self.spine_free, np.bincount(cluster.spine, weights=free, minlength=cluster.n_spines)):
            raise SchedulingError("spine aggregates out of step")
        if self.allocated_gpus != int(used.sum()):
            raise SchedulingError("allocated_gpus aggregate out of step")
        gpu_up = self.up & (cluster.gpus > 0)
        partial = gpu_up & (used > 0) & (used < cluster.gpus)
        if self.partial_nodes != int(partial.sum()):
            raise SchedulingError("partial_nodes aggregate out of step")
        if self.free_on_partial != int((cap - used)[partial].sum()):
            raise SchedulingError("free_on_partial aggregate out of step")
        if self.empty_nodes != int((gpu_up & (used == 0)).sum()):
            raise SchedulingError("empty_nodes aggregate out of step")
        if (self._leaf_free != self.leaf_free.tolist() or self._spine_free != self.spine_free.tolist()
                or self._up != self.up.tolist()):
            raise SchedulingError("aggregate mirrors out of step")
        hist = np.zeros_like(self.free_hist)
        np.add.at(hist, (cluster.gpu_type[gpu_up], (cap - used)[gpu_up]), 1)
        if not np.array_equal(hist, self.free_hist):
            raise SchedulingError("free_hist aggregate out of step")
        if self.classes is not None:
            self.classes.check((cap - used).tolist(), self.up.tolist(), cluster.leaf)
