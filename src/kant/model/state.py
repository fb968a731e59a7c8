"""Mutable cluster state: who holds which GPUs right now, plus aggregates kept up to date.

Every change goes through :meth:`ClusterState.allocate` and :meth:`ClusterState.release`, which
keep per-node free GPUs, per-leaf and per-spine free GPUs, the number of partly allocated nodes and
the free GPUs stranded on them in step, in O(nodes touched). Metrics read these aggregates instead
of scanning the cluster.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kant.errors import SchedulingError
from kant.model.cluster import Cluster

__all__ = ["Placement", "ClusterState"]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a job's workers run: ``nodes[k]`` is worker k's node; each worker holds the same
    ``gpus``/``cpu_milli``/``memory_mib`` on its node."""

    nodes: tuple[int, ...]
    gpus: int
    cpu_milli: int = 0
    memory_mib: int = 0
    per_node: dict[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        counts: dict[int, int] = {}
        for n in self.nodes:
            counts[n] = counts.get(n, 0) + 1
        object.__setattr__(self, "per_node", counts)

    @property
    def total_gpus(self) -> int:
        return self.gpus * len(self.nodes)

    def distinct_nodes(self) -> list[int]:
        return list(self.per_node)

    def span(self, cluster: Cluster) -> tuple[int, int, int]:
        """(distinct nodes, distinct leaves, distinct spines) this placement touches."""
        nodes = self.per_node
        if len(nodes) == 1:
            return (1, 1, 1)
        leaf, spine = cluster.leaf, cluster.spine
        return (len(nodes), len({int(leaf[n]) for n in nodes}), len({int(spine[n]) for n in nodes}))


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
        # Capacity that came back (a release, a node repaired), as (node, free before, free after),
        # oldest first. Entry k of the whole history is release_log[k - release_log_start]; the log
        # is trimmed as it grows, so a reader that fell behind release_log_start must start afresh.
        # Until capacity comes back a request that failed to place still fails: it has only been
        # taken since.
        self.release_log: list[tuple[int, int, int]] = []
        self.release_log_start = 0
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
        self.free_hist = np.zeros((n_types, cluster.max_gpus_per_node + 1), dtype=np.int64)
        gpu_nodes = cluster.gpus > 0
        np.add.at(self.free_hist, (cluster.gpu_type[gpu_nodes], cluster.gpus[gpu_nodes]), 1)

    # --- queries -----------------------------------------------------------------------------
    @property
    def free_gpus(self) -> int:
        return self.cluster.total_gpus - self.allocated_gpus - self.down_gpus

    def __contains__(self, job: int) -> bool:
        return job in self.allocations

    def running(self) -> Iterator[int]:
        return iter(self.allocations)

    # --- node classification for the aggregates ----------------------------------------------
    def _unclassify(self, node: int) -> None:
        cap = int(self.cluster.gpus[node])
        if cap == 0 or not self.up[node]:
            return
        free = int(self.free[node])
        self.free_hist[self.cluster.gpu_type[node], free] -= 1
        if free == cap:
            self.empty_nodes -= 1
        elif free > 0:
            self.partial_nodes -= 1
            self.free_on_partial -= free

    def _classify(self, node: int) -> None:
        cap = int(self.cluster.gpus[node])
        if cap == 0 or not self.up[node]:
            return
        free = int(self.free[node])
        self.free_hist[self.cluster.gpu_type[node], free] += 1
        if free == cap:
            self.empty_nodes += 1
        elif free > 0:
            self.partial_nodes += 1
            self.free_on_partial += free

    # --- changes -----------------------------------------------------------------------------
    def fits(self, node: int, gpus: int, cpu_milli: int = 0, memory_mib: int = 0, count: int = 1) -> bool:
        return bool(
            self.up[node]
            and self.free[node] >= gpus * count
            and (self.cluster.cpu_milli[node] == 0 or self.free_cpu[node] >= cpu_milli * count)
            and (self.cluster.memory_mib[node] == 0 or self.free_mem[node] >= memory_mib * count)
        )

    def allocate(self, job: int, placement: Placement) -> None:
        """Give ``job`` its placement; raises :class:`SchedulingError` if anything is over-booked."""
        if job in self.allocations:
            raise SchedulingError(f"job {job} is already allocated")
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
        self._apply(placement, +1)
        return placement

    @property
    def release_count(self) -> int:
        """How many capacity returns ever happened (the end of the release log)."""
        return self.release_log_start + len(self.release_log)

    def _log_release(self, node: int, before: int, after: int) -> None:
        log = self.release_log
        log.append((node, before, after))
        if len(log) > 8192:
            del log[:4096]
            self.release_log_start += 4096

    def _apply(self, placement: Placement, sign: int) -> None:
        cluster = self.cluster
        g = placement.gpus
        for node, count in placement.per_node.items():
            if sign > 0:
                before = int(self.free[node])
                self._log_release(node, before, before + g * count)
            self._unclassify(node)
            delta = sign * g * count
            self.free[node] += delta
            self.leaf_free[cluster.leaf[node]] += delta
            self.spine_free[cluster.spine[node]] += delta
            if cluster.cpu_milli[node]:
                self.free_cpu[node] += sign * placement.cpu_milli * count
            if cluster.memory_mib[node]:
                self.free_mem[node] += sign * placement.memory_mib * count
            self._classify(node)
        self.allocated_gpus -= sign * placement.total_gpus

    def set_down(self, node: int) -> None:
        """Mark a node failed. The caller must first release every job on it."""
        if not self.up[node]:
            return
        cap = int(self.cluster.gpus[node])
        if int(self.free[node]) != cap:
            raise SchedulingError(f"node {self.cluster.names[node]} still holds work; release it first")
        self._unclassify(node)
        self.up[node] = False
        self.free[node] = 0
        self.leaf_free[self.cluster.leaf[node]] -= cap
        self.spine_free[self.cluster.spine[node]] -= cap
        self.down_gpus += cap

    def set_up(self, node: int) -> None:
        if self.up[node]:
            return
        cap = int(self.cluster.gpus[node])
        self.up[node] = True
        self.free[node] = cap
        self.leaf_free[self.cluster.leaf[node]] += cap
        self.spine_free[self.cluster.spine[node]] += cap
        self.down_gpus -= cap
        self._classify(node)
        self._log_release(node, 0, cap)

    def jobs_on(self, node: int) -> list[int]:
        return [j for j, p in self.allocations.items() if node in p.per_node]

    def what_if(self, free: npt.ArrayLike, free_cpu: npt.ArrayLike | None = None,
                free_mem: npt.ArrayLike | None = None) -> ClusterState:
        """A planning copy with other free capacity per node (as the cluster will be when some jobs
        end, or less what a reservation holds), for trying a placement without changing anything.
        Per-node arrays are copied and every aggregate is recomputed from them; ``allocations`` is
        shared and must not be changed through the copy. O(nodes)."""
        cluster = self.cluster
        view = copy.copy(self)
        view.free = np.array(free, dtype=np.int64)
        view.free_cpu = np.array(self.free_cpu if free_cpu is None else free_cpu, dtype=np.int64)
        view.free_mem = np.array(self.free_mem if free_mem is None else free_mem, dtype=np.int64)
        f = view.free
        view.leaf_free = np.bincount(cluster.leaf, weights=f, minlength=cluster.n_leaves).astype(np.int64)
        view.spine_free = np.bincount(cluster.spine, weights=f, minlength=cluster.n_spines).astype(np.int64)
        gpu_up = self.up & (cluster.gpus > 0)
        view.allocated_gpus = int((cluster.gpus - f)[self.up].sum())
        partial = gpu_up & (f > 0) & (f < cluster.gpus)
        view.partial_nodes = int(partial.sum())
        view.free_on_partial = int(f[partial].sum())
        view.empty_nodes = int((gpu_up & (f == cluster.gpus)).sum())
        width = self.free_hist.shape[1]
        flat = cluster.gpu_type[gpu_up] * width + f[gpu_up]
        view.free_hist = np.bincount(flat, minlength=self.free_hist.size).reshape(self.free_hist.shape)
        return view

    # --- checking ----------------------------------------------------------------------------
    def check(self) -> None:
        """Recompute everything from the allocations and compare; raises on any mismatch.

        O(cluster + allocations): for tests and debug runs, never the hot path.
        """
        cluster = self.cluster
        used = np.zeros(cluster.n_nodes, dtype=np.int64)
        for job, p in self.allocations.items():
            for node, count in p.per_node.items():
                if not self.up[node]:
                    raise SchedulingError(f"job {job} holds GPUs on down node {node}")
                used[node] += p.gpus * count
        cap = np.where(self.up, cluster.gpus, 0)
        if np.any(used > cap):
            bad = int(np.flatnonzero(used > cap)[0])
            raise SchedulingError(f"node {cluster.names[bad]} double-booked: {used[bad]} > {cap[bad]}")
        if not np.array_equal(self.free, cap - used):
            raise SchedulingError("free GPU array out of step with allocations")
        if not np.array_equal(self.leaf_free, np.bincount(cluster.leaf, weights=cap - used, minlength=cluster.n_leaves)):
            raise SchedulingError("leaf aggregates out of step")
        if not np.array_equal(self.spine_free, np.bincount(cluster.spine, weights=cap - used, minlength=cluster.n_spines)):
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
        hist = np.zeros_like(self.free_hist)
        np.add.at(hist, (cluster.gpu_type[gpu_up], (cap - used)[gpu_up]), 1)
        if not np.array_equal(hist, self.free_hist):
            raise SchedulingError("free_hist aggregate out of step")
