"""Capacity and fit: the one place backfill turns placements and requests into per-node amounts and
counts worker slots. Everything here is arithmetic on ``resources x nodes`` arrays (GPUs first, then
CPU and memory where the cluster models them); the reservation and walk code never looks at a
resource by name. The number of workers a node holds is :mod:`kant.model.fit`'s rule, the one the
runner, preemption and the failure memo use.

GPU shares (``docs/gpu-sharing.md``): a request vector carries a share's milli as one more entry
after the resources (``(1, cpu, mem, milli)``; a whole-GPU request has none), so caches keyed by the
request tell a share from a whole GPU. The GPU row of the capacity arrays counts *completely free*
GPUs only. Open GPU slots (GPUs that already hold shares) count for the capacity free *now* (the
``share_free`` argument, from :meth:`kant.model.shares.ShareBooks.workers`); capacity in the future
is whole GPUs only: a running share job gives no GPU back in the release profile (its GPU may hold
other shares past its end) and a share worker planned in the future takes a completely free GPU per ``1000 //
milli`` workers of the job on a node. Both only make reservations later, never over-book: every
start still goes through ``ClusterState.allocate``.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import numpy.typing as npt

from kant.framework.context import CycleContext, SchedulerEnv
from kant.model import fit
from kant.model.fit import FULL_GPU_MILLI
from kant.model.state import ClusterState, Placement

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

MANY = 1 << 40  # "unlimited" worker slots (a request for none of a resource)
_NONE = np.zeros(1, dtype=bool)  # "modelled nowhere" (read only when CPU or memory is asked for)


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
        #: per resource row, the index of its per-worker amount in ``(gpus, cpu_milli, memory_mib)``
        #: (memory is the second row when CPU is not modelled) and the row of ``modelled`` as a list
        self.fields: tuple[int, ...] = tuple({"free": 0, "free_cpu": 1, "free_mem": 2}[a] for a in self.attrs)
        self.modelled_rows: list[tuple[int, list[int]]] = list(zip(self.fields, self.modelled.tolist(), strict=True))
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

    def view(self, ctx: CycleContext, free: IntArray, shares: bool = True,
             changed: Collection[int] | None = None) -> CycleContext:
        """The cycle as if the free capacity were ``free`` (resources x nodes): for placing a job at
        a future time or in the capacity a reservation leaves. Any Place plugin works on it. Without
        ``shares`` the open GPU slots are left out (capacity in the future: whole GPUs only).
        ``changed``: the nodes where ``free`` may differ from the free capacity now, where known."""
        kw = {attr: free[r] for r, attr in enumerate(self.attrs)}
        return ctx.on(ctx.state.what_if(**kw, shares=shares, changed=changed))

    # --- what a job holds ----------------------------------------------------------------------
    def usage_on(self, placement: Placement, node: int, count: int) -> list[int]:
        """Per resource, what ``count`` workers of ``placement`` hold on ``node`` of the profile's
        capacity: a share worker a completely free GPU per ``1000 // milli`` workers."""
        gpus = placement.gpus
        if gpus == 1 and placement.gpu_milli < FULL_GPU_MILLI:
            count_gpu = -(-count // (FULL_GPU_MILLI // placement.gpu_milli))
            req = (count_gpu, placement.cpu_milli * count, placement.memory_mib * count)
            return [req[f] * m[node] for f, m in self.modelled_rows]
        req = (gpus, placement.cpu_milli, placement.memory_mib)
        return [req[f] * count * m[node] for f, m in self.modelled_rows]

    def release_on(self, placement: Placement, node: int, count: int) -> list[int]:
        """Per resource, what ``count`` workers of ``placement`` give back on ``node`` at their end:
        a share gives back no GPU (other shares may hold its GPU longer)."""
        gpus = placement.gpus
        if gpus == 1 and placement.gpu_milli < FULL_GPU_MILLI:
            gpus = 0
        req = (gpus, placement.cpu_milli, placement.memory_mib)
        return [req[f] * count * m[node] for f, m in self.modelled_rows]

    def usage(self, placement: Placement) -> IntArray:
        """Resources x nodes that ``placement`` holds."""
        use = np.zeros((len(self.attrs), self.n_nodes), dtype=np.int64)
        for node, count in placement.per_node.items():
            use[:, node] = self.usage_on(placement, node, count)
        return use

    def request_vector(self, job: int, g: int, milli: int = FULL_GPU_MILLI) -> tuple[int, ...]:
        """Per-worker request of ``job`` for each modelled resource (GPUs first; ``g`` its GPUs), and
        for a GPU share (``g`` 1, ``milli`` below 1000) its milli as one more entry."""
        jobs = self._jobs
        req = [g]
        if "free_cpu" in self.attrs:
            req.append(int(jobs.cpu_milli[job]))
        if "free_mem" in self.attrs:
            req.append(int(jobs.memory_mib[job]))
        if milli < FULL_GPU_MILLI and fit.is_share(g, milli):
            req.append(milli)
        return tuple(req)

    # --- worker slots ----------------------------------------------------------------------------
    @staticmethod
    def gpu_slots(gpu_free: IntArray, g: int, tmask: BoolArray | None, milli: int = FULL_GPU_MILLI,
                  share_free: IntArray | None = None) -> int:
        """Workers of ``g`` GPUs at ``milli`` (``g > 0``) the per-node completely free GPUs (and, for
        a share, the open GPU slots' ``share_free``) hold on the nodes of ``tmask``."""
        if milli >= FULL_GPU_MILLI or not fit.is_share(g, milli):  # whole GPUs: gpu_slots per node, summed
            v = gpu_free if tmask is None else gpu_free[tmask]
            return int((v // g).sum())
        free = np.maximum(gpu_free, 0)  # the rule's GPU term only: no CPU or memory asked
        slots = fit.worker_slots(g, milli, 0, 0, free, free, free, _NONE, _NONE, share_free=share_free, limit=MANY,
                                 ok=tmask)
        return int(slots.sum())

    def worker_slots(self, avail: IntArray, req: tuple[int, ...], tmask: BoolArray | None,
                     share_free: IntArray | None = None) -> IntArray:
        return worker_slots(avail, req, tmask, self.modelled, share_free)

    def best_fit(self, slots: IntArray, w: int, req: tuple[int, ...]) -> IntArray:
        return best_fit(slots, w, req, self.modelled)


def share_opens(state: ClusterState, placement: Placement) -> IntArray:
    """Per node, the completely free GPUs ``ClusterState.allocate`` would open for the GPU share
    ``placement`` now (its workers go on open GPU slots best fit first, as allocate books them)."""
    m = placement.gpu_milli
    opens = np.zeros(state.cluster.n_nodes, dtype=np.int64)
    slots: dict[int, list[int]] = {}
    for k, node in enumerate(placement.nodes):
        free = slots.get(node)
        if free is None:
            free = slots[node] = [v for v in state.shares.slots.get(node, ()) if v > 0]
        pick = placement.gpu_pick[k] if placement.gpu_pick else -1
        fit_ = [i for i, v in enumerate(free) if v >= m] if pick < 0 else \
            ([free.index(pick)] if FULL_GPU_MILLI > pick >= m and pick in free else [])
        if fit_:
            best = min(fit_, key=free.__getitem__)
            free[best] -= m
        else:
            opens[node] += 1
            free.append(FULL_GPU_MILLI - m)
    return opens


def share_milli(req: tuple[int, ...], n_res: int) -> int:
    """The milli of a request vector (1000 unless it is a GPU share's)."""
    return req[n_res] if len(req) > n_res else FULL_GPU_MILLI


def worker_slots(avail: IntArray, req: tuple[int, ...], tmask: BoolArray | None, modelled: IntArray,
                 share_free: IntArray | None = None) -> IntArray:
    """Workers of ``req`` that each node's capacity holds (:func:`kant.model.fit.worker_slots`);
    ``avail`` is resources x nodes (or resources x rows x nodes, giving rows x nodes); ``share_free``
    (a share only): what the open GPU slots hold per node (or rows x nodes)."""
    if len(req) == 1 and req[0] > 0:  # whole GPUs only: the common case (the rule's ``free // gpus``)
        slots: IntArray = avail[0] // req[0]
        if tmask is not None:
            slots = np.where(tmask, slots, 0)
        return slots
    n_res = len(modelled)
    # the second and third rows, whichever they are (the rule treats CPU and memory alike); a row the
    # cluster does not have is padded (asked for 0: never read)
    free = avail[0]
    unmodelled = modelled == 0
    return fit.worker_slots(
        req[0], share_milli(req, n_res), req[1] if n_res > 1 else 0, req[2] if n_res > 2 else 0, free,
        avail[1] if n_res > 1 else free, avail[2] if n_res > 2 else free, unmodelled[min(1, n_res - 1)],
        unmodelled[min(2, n_res - 1)], share_free=share_free, limit=MANY, ok=tmask,
    )


def best_fit(slots: IntArray, w: int, req: tuple[int, ...], modelled: IntArray) -> IntArray:
    """Usage (resources x nodes) of ``w`` workers put on the nodes with the fewest slots first
    (ties: lower node index). The caller has checked that the slots hold ``w`` workers. A GPU share's
    workers on a node take a completely free GPU per ``1000 // milli`` of them."""
    n_res = len(modelled)
    if len(req) > n_res:
        return _best_fit_share(slots, w, req, modelled)
    if w == 1:  # the node with the fewest slots (lowest index among equals)
        node = int(np.argmin(np.where(slots > 0, slots, MANY)))
        usage1 = np.zeros((len(req), len(slots)), dtype=np.int64)
        for r, need in enumerate(req):
            usage1[r, node] = need * modelled[r, node]
        return usage1
    chosen, take = _fewest_first(slots, w)
    usage = np.zeros((len(req), len(slots)), dtype=np.int64)
    for r, need in enumerate(req):
        usage[r, chosen] = take * need * modelled[r, chosen]
    return usage


def _fewest_first(slots: IntArray, w: int) -> tuple[IntArray, IntArray]:
    nz = np.flatnonzero(slots > 0)
    order = nz[np.argsort(slots[nz], kind="stable")]
    cum = np.cumsum(np.minimum(slots[order], w))
    m = int(np.searchsorted(cum, w))
    chosen = order[: m + 1]
    take = np.minimum(slots[chosen], w)
    take[-1] -= int(cum[m]) - w
    return chosen, take


def _best_fit_share(slots: IntArray, w: int, req: tuple[int, ...], modelled: IntArray) -> IntArray:
    n_res = len(modelled)
    chosen, take = _fewest_first(slots, w)
    usage = np.zeros((n_res, len(slots)), dtype=np.int64)
    usage[0, chosen] = -(-take // (FULL_GPU_MILLI // req[n_res]))
    for r in range(1, n_res):
        usage[r, chosen] = take * req[r] * modelled[r, chosen]
    return usage


def first_enough(free0: IntArray, e_node: IntArray, e_g: IntArray, g: int, w: int, tmask: BoolArray | None,
                 milli: int = FULL_GPU_MILLI, share_free: IntArray | None = None) -> int:
    """Index of the first release (in time order) after which the free GPUs hold ``w`` workers of
    ``g`` GPUs (at ``milli``: :func:`kant.model.fit.gpu_slots` per node), 0 if they already do, -1
    if never. For a share, ``share_free`` is what the open GPU slots hold now. Vectorised: per-node
    running totals by a cumulative sum grouped by node."""
    if milli < FULL_GPU_MILLI and fit.is_share(g, milli):
        # a share: every completely free GPU holds ``per`` workers, so a release of k GPUs adds k * per
        per = FULL_GPU_MILLI // milli
        slots0 = Capacity.gpu_slots(free0, g, tmask, milli, share_free)
        if slots0 >= w:
            return 0
        if len(e_node) == 0:
            return -1
        share_slots = slots0 + np.cumsum(e_g) * per
        if share_slots[-1] < w:
            return -1
        return int(np.argmax(share_slots >= w))
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
