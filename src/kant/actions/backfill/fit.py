"""Capacity and fit: the one place backfill turns placements and requests into per-node amounts and
counts worker slots. Everything here is arithmetic on ``resources x nodes`` arrays (GPUs first, then
CPU and memory where the cluster models them); the reservation and walk code never looks at a
resource by name. A different capacity model (GPU sharing, say) replaces this module's
:class:`Capacity` methods and the free functions below, nothing else.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from kant.framework.context import CycleContext, SchedulerEnv
from kant.model.state import ClusterState, Placement

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

MANY = 1 << 40  # "unlimited" worker slots (a request for none of a resource)


class Capacity:
    """The resources backfill models on one cluster and the fit arithmetic on them.

    ``attrs``: the ``ClusterState`` arrays of free capacity, GPUs first (``free``, then ``free_cpu``
    and ``free_mem`` when some node models them); ``modelled``: resources x nodes, 1 where the node
    models the resource."""

    def __init__(self, env: SchedulerEnv) -> None:
        cluster = env.cluster
        self.attrs: tuple[str, ...] = ("free",)
        modelled = [np.ones(cluster.n_nodes, dtype=np.int64)]
        if (cluster.cpu_milli > 0).any():
            self.attrs += ("free_cpu",)
            modelled.append((cluster.cpu_milli > 0).astype(np.int64))
        if (cluster.memory_mib > 0).any():
            self.attrs += ("free_mem",)
            modelled.append((cluster.memory_mib > 0).astype(np.int64))
        self.modelled: IntArray = np.stack(modelled)
        self.modelled_rows: list[list[int]] = self.modelled.tolist()
        self.total_gpus = cluster.total_gpus
        self.n_nodes = cluster.n_nodes
        self._jobs = env.jobs

    # --- the cluster now ---------------------------------------------------------------------
    def free_gpus(self, state: ClusterState) -> int:
        return self.total_gpus - state.allocated_gpus - state.down_gpus

    def free_now(self, state: ClusterState) -> IntArray:
        """Resources x nodes free now."""
        if len(self.attrs) == 1:
            return state.free[None, :]
        return np.stack([getattr(state, a) for a in self.attrs])

    def view(self, ctx: CycleContext, free: IntArray) -> CycleContext:
        """The cycle as if the free capacity were ``free`` (resources x nodes): for placing a job at
        a future time or in the capacity a reservation leaves. Any Place plugin works on it."""
        kw = {attr: free[r] for r, attr in enumerate(self.attrs)}
        return dataclasses.replace(ctx, state=ctx.state.what_if(**kw))

    # --- what a job holds ----------------------------------------------------------------------
    def usage_on(self, placement: Placement, node: int, count: int) -> list[int]:
        """Per resource, what ``count`` workers of ``placement`` hold on ``node``."""
        req = (placement.gpus, placement.cpu_milli, placement.memory_mib)
        return [req[r] * count * m[node] for r, m in enumerate(self.modelled_rows)]

    def usage(self, placement: Placement) -> IntArray:
        """Resources x nodes that ``placement`` holds."""
        use = np.zeros((len(self.attrs), self.n_nodes), dtype=np.int64)
        for node, count in placement.per_node.items():
            use[:, node] = self.usage_on(placement, node, count)
        return use

    def request_vector(self, job: int, g: int) -> tuple[int, ...]:
        """Per-worker request of ``job`` for each modelled resource (GPUs first; ``g`` its GPUs)."""
        jobs = self._jobs
        req = [g]
        if "free_cpu" in self.attrs:
            req.append(int(jobs.cpu_milli[job]))
        if "free_mem" in self.attrs:
            req.append(int(jobs.memory_mib[job]))
        return tuple(req)

    # --- worker slots ----------------------------------------------------------------------------
    @staticmethod
    def gpu_slots(gpu_free: IntArray, g: int, tmask: BoolArray | None) -> int:
        """Workers of ``g`` GPUs (``g > 0``) the per-node free GPUs hold on the nodes of ``tmask``."""
        v = gpu_free if tmask is None else gpu_free[tmask]
        return int((v // g).sum())

    def worker_slots(self, avail: IntArray, req: tuple[int, ...], tmask: BoolArray | None) -> IntArray:
        return worker_slots(avail, req, tmask, self.modelled)

    def best_fit(self, slots: IntArray, w: int, req: tuple[int, ...]) -> IntArray:
        return best_fit(slots, w, req, self.modelled)


def worker_slots(avail: IntArray, req: tuple[int, ...], tmask: BoolArray | None, modelled: IntArray) -> IntArray:
    """Workers of ``req`` that each node's capacity holds; ``avail`` is resources x nodes (or
    resources x rows x nodes, giving rows x nodes)."""
    if len(req) == 1 and req[0] > 0:  # GPUs only: the common case
        slots: IntArray = avail[0] // req[0]
    else:
        slots = np.full(avail.shape[1:], MANY, dtype=np.int64)
        for r, need in enumerate(req):
            if need > 0:
                per = avail[r] // need
                slots = np.minimum(slots, per if r == 0 else np.where(modelled[r] > 0, per, MANY))
    if tmask is not None:
        slots = np.where(tmask, slots, 0)
    return slots


def best_fit(slots: IntArray, w: int, req: tuple[int, ...], modelled: IntArray) -> IntArray:
    """Usage (resources x nodes) of ``w`` workers put on the nodes with the fewest slots first
    (ties: lower node index). The caller has checked that the slots hold ``w`` workers."""
    if w == 1:  # the node with the fewest slots (lowest index among equals)
        node = int(np.argmin(np.where(slots > 0, slots, MANY)))
        usage1 = np.zeros((len(req), len(slots)), dtype=np.int64)
        for r, need in enumerate(req):
            usage1[r, node] = need * modelled[r, node]
        return usage1
    nz = np.flatnonzero(slots > 0)
    order = nz[np.argsort(slots[nz], kind="stable")]
    cum = np.cumsum(np.minimum(slots[order], w))
    m = int(np.searchsorted(cum, w))
    chosen = order[: m + 1]
    take = np.minimum(slots[chosen], w)
    take[-1] -= int(cum[m]) - w
    usage = np.zeros((len(req), len(slots)), dtype=np.int64)
    for r, need in enumerate(req):
        usage[r, chosen] = take * need * modelled[r, chosen]
    return usage


def first_enough(free0: IntArray, e_node: IntArray, e_g: IntArray, g: int, w: int, tmask: BoolArray | None) -> int:
    """Index of the first release (in time order) after which the free GPUs hold ``w`` workers of
    ``g`` GPUs, 0 if they already do, -1 if never. Vectorised: per-node running totals by a
    cumulative sum grouped by node."""
    slots0 = int(((free0 if tmask is None else free0[tmask]) // g).sum())
    if slots0 >= w:
        return 0
    n = len(e_node)
    if n == 0:
        return -1
    # the same stable order either way; node numbers that fit 16 bits take NumPy's radix sort, O(n)
    # instead of a merge sort (a tenth of the time for 20,000 rows)
    by_node = np.argsort(e_node.astype(np.uint16) if len(free0) <= 1 << 16 else e_node, kind="stable")
    gn, gd = e_node[by_node], e_g[by_node]
    cs = np.cumsum(gd)
    new_group = np.empty(n, dtype=bool)
    new_group[0] = True
    np.not_equal(gn[1:], gn[:-1], out=new_group[1:])
    before_group = np.maximum.accumulate(np.where(new_group, cs - gd, 0))
    after = free0[gn] + cs - before_group
    gain = np.empty_like(gd)
    gain[by_node] = after // g - (after - gd) // g
    slots = slots0 + np.cumsum(gain)
    if slots[-1] < w:
        return -1
    return int(np.argmax(slots >= w))
