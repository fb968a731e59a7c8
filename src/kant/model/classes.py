"""The node-class index: up GPU nodes by (GPU type, GPU capacity, free GPUs), for placement
without a node scan.

:class:`~kant.model.state.ClusterState` owns one (``state.classes``) and moves a node to its new
class on every change of its free GPUs; the runner's class-based placement and E-Binpack read it
(docs/architecture.md, "Fast placement paths").
"""

from __future__ import annotations

from heapq import heappop, heappush

import numpy as np
import numpy.typing as npt

from kant.errors import SchedulingError
from kant.model.cluster import Cluster
from kant.model.scalars import scalar_view

__all__ = ["ClassGroups", "NodeClasses"]

#: class ids in tie groups, best group first (:meth:`kant.framework.runner.Framework.class_groups`)
ClassGroups = list[list[int]]


class NodeClasses:
    """Index of nodes by *class*: (GPU type, GPU capacity, free GPUs). Up GPU nodes only.

    Class ids are dense: each (type, capacity) pair present in the cluster owns the ids
    ``base .. base + capacity`` and a node with ``f`` free GPUs is in class ``base + f``. Every score
    that depends only on a node's capacity and free GPUs ranks whole classes, so the best node for
    such a score is the lowest-index node of the best class: :meth:`head` gives it in O(log nodes)
    amortised (a min-heap per class with lazy deletion: an entry is valid while the node is still in
    that class). ``leaf_count[c, leaf]`` counts the nodes of class ``c`` under each leaf switch.
    Kept in step by :class:`ClusterState`; see ``docs/architecture.md`` (fast placement paths).
    """

    def __init__(self, cluster: Cluster) -> None:
        caps = cluster.gpus.tolist()
        types = cluster.gpu_type.tolist()
        pairs = sorted({(t, c) for t, c in zip(types, caps, strict=True) if c > 0})
        base: dict[tuple[int, int], int] = {}
        ctype: list[int] = []
        ccap: list[int] = []
        cfree: list[int] = []
        for t, c in pairs:
            base[(t, c)] = len(ctype)
            ctype += [t] * (c + 1)
            ccap += [c] * (c + 1)
            cfree += list(range(c + 1))
        self.n_classes = len(ctype)
        self.class_type = np.asarray(ctype, dtype=np.int64)
        self.class_cap = np.asarray(ccap, dtype=np.int64)
        self.class_free = np.asarray(cfree, dtype=np.int64)
        #: class id of a node with 0 free GPUs (add its free GPUs for its class); -1 for GPU-less nodes
        self.node_base: list[int] = [base[(t, c)] if c > 0 else -1 for t, c in zip(types, caps, strict=True)]
        #: class id of each node now; -1 = in no class (no GPUs, or down)
        self.node_class: list[int] = [-1] * cluster.n_nodes
        self.count: list[int] = [0] * self.n_classes
        self.heaps: list[list[int]] = [[] for _ in range(self.n_classes)]
        self.node_leaf: list[int] = cluster.leaf.tolist()
        self.leaf_count = np.zeros((self.n_classes, cluster.n_leaves), dtype=np.int64)
        for node, b in enumerate(self.node_base):
            if b >= 0:  # nodes in ascending order: each heap is a sorted list, a valid heap
                c = b + caps[node]
                self.node_class[node] = c
                self.count[c] += 1
                self.heaps[c].append(node)
        np.add.at(self.leaf_count, (np.asarray([max(c, 0) for c in self.node_class], dtype=np.int64), cluster.leaf),
                  np.asarray([c >= 0 for c in self.node_class], dtype=np.int64))
        self._n_leaves = cluster.n_leaves
        # a memoryview of leaf_count's buffer (writes go to leaf_count; cheaper one at a time)
        self._leaf_count_flat = scalar_view(self.leaf_count.reshape(-1), int)
        self._leaf_counts: list[int] = self.leaf_count.reshape(-1).tolist()  # the same numbers, cheap to read

    def move(self, node: int, cls: int) -> None:
        """Node ``node`` is now in class ``cls`` (-1: in none)."""
        nc = self.node_class
        old = nc[node]
        if old == cls:
            return
        leaf = self.node_leaf[node]
        counts = self._leaf_counts
        flat = self._leaf_count_flat
        n_leaves = self._n_leaves
        if old >= 0:
            self.count[old] -= 1
            i = old * n_leaves + leaf
            flat[i] = counts[i] = counts[i] - 1
        nc[node] = cls
        if cls >= 0:
            n = self.count[cls] = self.count[cls] + 1
            i = cls * n_leaves + leaf
            flat[i] = counts[i] = counts[i] + 1
            heap = self.heaps[cls]
            heappush(heap, node)
            if len(heap) > 2 * n + 32:  # mostly stale entries: rebuild from the valid ones
                heap[:] = sorted({x for x in heap if nc[x] == cls})

    def head(self, cls: int) -> int:
        """Lowest node index in class ``cls``, or -1 if the class is empty."""
        if not self.count[cls]:
            return -1
        heap = self.heaps[cls]
        nc = self.node_class
        while nc[heap[0]] != cls:
            heappop(heap)
        return heap[0]

    def nodes(self, cls: int) -> list[int]:
        """Every node in class ``cls``, ascending (O(heap); for checks and tests)."""
        return sorted({x for x in self.heaps[cls] if self.node_class[x] == cls})

    def check(self, free: list[int], up: list[bool], leaf: npt.NDArray[np.int64]) -> None:
        """Recompute the index from each node's free GPUs and whether it takes work (``leaf``: each
        node's leaf switch) and compare; raises :class:`SchedulingError` on any mismatch. For
        :meth:`kant.model.state.ClusterState.check` (tests and debug runs)."""
        want = [b + f if u and b >= 0 else -1 for b, f, u in zip(self.node_base, free, up, strict=True)]
        if self.node_class != want:
            raise SchedulingError("node class index out of step")
        members_of: list[list[int]] = [[] for _ in range(self.n_classes)]
        for n, k in enumerate(want):
            if k >= 0:
                members_of[k].append(n)
        leaf_count = np.zeros_like(self.leaf_count)
        for c, members in enumerate(members_of):
            if self.count[c] != len(members) or self.nodes(c) != members:
                raise SchedulingError(f"node class {c} index out of step")
            if self.head(c) != (members[0] if members else -1):
                raise SchedulingError(f"node class {c} head out of step")
            np.add.at(leaf_count[c], leaf[members], 1)
        if not np.array_equal(self.leaf_count, leaf_count) or self._leaf_counts != leaf_count.reshape(-1).tolist():
            raise SchedulingError("node class leaf counts out of step")
