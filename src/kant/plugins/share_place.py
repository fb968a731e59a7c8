"""Share-aware node keys (Place plugins) of the FGD paper's baselines, on the core cluster state with
GPU shares (see docs/gpu-sharing.md and docs/experiments.md):

* ``random-pick``: a fitting node drawn uniformly; a share gets a GPU drawn uniformly among the
  node's GPUs that hold it;
* ``residual-fit``: the least weighted normalised CPU+GPU(+memory) residual left on the node (the
  FGD artifact's BestFit; not the core ``best-fit`` score, which counts whole free GPUs only);
* ``dot-product``: Tetris alignment of the node's free vector and the request;
* ``gpu-packing``: partly used GPUs first, then used nodes, then the smallest idle node;
* ``gpu-clustering``: pods of the same kind of GPU load together;

plus :func:`ebinpack_share_key`, the key of the core ``e-binpack`` plugin's share-aware mode. The
exact rules are in each class's docstring. Each plugin minimises a per-node key over the nodes where
the one-worker job fits now (the framework's fit mask narrowed by the policy's filters); nodes with
the same best key are a tie, broken by the lowest node index (``tie: first``, default) or by a
uniform pick from the run's seeded generator ``env.rng`` (``tie: random``, the upstream Kubernetes
scheduler's ``selectHost``). A share goes to the best-fitting GPU (the least free milli that holds
it) unless a rule says otherwise; whole GPUs are interchangeable. Gangs of several workers are placed
by the runner's filter+score greedy (``fw.place_workers``).

``CPU_MAX``, ``GPU_MAX`` and ``MEM_MAX`` are the largest node capacities of the cluster
(``GPU_MAX`` = its most GPUs on one node x 1000); CPU or memory a node does not model counts as
unlimited (a very large number), as the fit test does.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import JobListener, Place, Placer
from kant.framework.registry import register_plugin
from kant.framework.status import Status
from kant.model.fit import FULL_GPU_MILLI
from kant.model.state import ClusterState, Placement

__all__ = [
    "DotProduct",
    "GpuClustering",
    "GpuPacking",
    "KeyPlace",
    "NodeRows",
    "RandomPick",
    "ResidualFit",
    "ebinpack_share_key",
    "smallest",
    "load_kind",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
MILLI = FULL_GPU_MILLI
BIG = np.iinfo(np.int64).max // 4  # capacity of a resource a node does not model
N_KINDS = 6
_KIND_OF_COUNT = {1: 1, 2: 2, 4: 3, 8: 4}


def load_kind(ngpu: int, milli: int) -> int:
    """Kind of GPU load a worker puts on a node: 0 share, 1/2/3/4 for 1/2/4/8 whole GPUs, 5 any other
    count; -1 for no GPU."""
    if ngpu <= 0:
        return -1
    if ngpu == 1 and milli < MILLI:
        return 0
    return _KIND_OF_COUNT.get(ngpu, 5)


class NodeRows:
    """Every node's free milli per GPU (largest first, 0-padded to the cluster's most GPUs per node),
    refreshed for the nodes whose free GPUs, GPU slots (``state.shares.version``) or up state changed since
    the last look (one vectorised comparison per call), and the aggregates the keys read."""

    def __init__(self, env: SchedulerEnv) -> None:
        cluster = env.cluster
        n, g = cluster.n_nodes, max(cluster.max_gpus_per_node, 1)
        self.gpus = cluster.gpus.astype(np.int64)
        self.rows: IntArray = np.where(np.arange(g)[None, :] < self.gpus[:, None], MILLI, 0).astype(np.int64)
        self.total: IntArray = self.rows.sum(axis=1)
        self.full: IntArray = self.gpus.copy()
        self._seen: ClusterState | None = None
        self._at_free = cluster.gpus.copy()
        self._at_share = np.zeros(n, dtype=np.int64)
        self._at_up = np.ones(n, dtype=bool)

    def sync(self, state: ClusterState) -> None:
        if self._seen is not state:
            self._seen = state
            changed = np.ones(len(self._at_free), dtype=bool)
        else:
            changed = ((state.free != self._at_free) | (state.shares.version != self._at_share)
                       | (state.up != self._at_up))
        nodes = np.flatnonzero(changed)
        if not nodes.size:
            return
        g = self.rows.shape[1]
        for n in nodes.tolist():
            row = state.gpu_free_milli(n) if state.up[n] else []
            self.rows[n] = row + [0] * (g - len(row))
        r = self.rows[nodes]
        self.total[nodes] = r.sum(axis=1)
        self.full[nodes] = (r == MILLI).sum(axis=1)
        self._at_free[nodes] = state.free[nodes]
        self._at_share[nodes] = state.shares.version[nodes]
        self._at_up[nodes] = state.up[nodes]

    def idle(self, nodes: IntArray) -> BoolArray:
        """Nodes whose GPUs are all completely free (GPU nodes only)."""
        g = self.gpus[nodes]
        out: BoolArray = (self.full[nodes] == g) & (g > 0)
        return out

    def best_fit(self, nodes: IntArray, milli: int) -> IntArray:
        """Per node, the least free milli of a GPU that holds ``milli`` (1001 if none)."""
        free = self.rows[nodes]
        out: IntArray = np.where(free >= milli, free, MILLI + 1).min(axis=1)
        return out


def smallest(ctx: CycleContext, key: npt.NDArray[np.generic], random_tie: bool) -> int:
    """The index of the smallest ``key``: the first among equals, or with ``random_tie`` one drawn
    uniformly among them from the run's seeded ``env.rng`` (no draw when there is one)."""
    i = int(np.argmin(key))
    if random_tie:
        cand = np.flatnonzero(key == key[i])
        if cand.size > 1:
            i = int(cand[int(ctx.env.rng.integers(cand.size))])
    return i


class TieArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tie: Literal["first", "random"] = "first"


class KeyPlace(Place):
    """Base: one-worker jobs go to the fitting node with the smallest :meth:`key`; the GPU of a share
    is :meth:`pick` (free milli of the GPU to use; -1: the best-fitting one)."""

    Args: ClassVar[type[BaseModel]] = TieArgs
    SHARES = True

    def setup(self, env: SchedulerEnv) -> None:
        cluster = env.cluster
        self.rows = NodeRows(env)
        self._cpu_unmodelled = env.cpu_unmodelled
        self._mem_unmodelled = env.mem_unmodelled
        cpu_cap = np.where(env.cpu_unmodelled, BIG, cluster.cpu_milli)
        mem_cap = np.where(env.mem_unmodelled, BIG, cluster.memory_mib)
        self.cpu_max = max(int(cpu_cap.max()), 1) if cluster.n_nodes else 1
        self.mem_max = max(int(mem_cap.max()), 1) if cluster.n_nodes else 1
        self.max_gpus = max(int(cluster.gpus.max()), 1) if cluster.n_nodes else 1

    def cpu_free(self, state: ClusterState, nodes: IntArray) -> IntArray:
        out: IntArray = np.where(self._cpu_unmodelled[nodes], BIG, state.free_cpu[nodes]).astype(np.int64)
        return out

    def mem_free(self, state: ClusterState, nodes: IntArray) -> IntArray:
        out: IntArray = np.where(self._mem_unmodelled[nodes], BIG, state.free_mem[nodes]).astype(np.int64)
        return out

    def key(self, ctx: CycleContext, fw: Placer, job: int, nodes: IntArray) -> npt.NDArray[np.generic]:
        raise NotImplementedError

    def pick(self, ctx: CycleContext, node: int, milli: int) -> int:
        return -1

    def best(self, ctx: CycleContext, nodes: IntArray, key: npt.NDArray[np.generic]) -> int:
        """The node with the smallest ``key``; ties per ``tie``."""
        return int(nodes[smallest(ctx, key, self.args.tie == "random")])  # type: ignore[attr-defined]

    def place(self, ctx: CycleContext, job: int, fw: Placer) -> Placement | Status:
        if fw.job_workers[job] != 1:
            return fw.place_workers(ctx, job)
        nodes = np.flatnonzero(fw.candidate_mask(ctx, job))
        if not nodes.size:
            return fw.place_workers(ctx, job)  # says why, the runner's way
        self.rows.sync(ctx.state)
        node = self.choose(ctx, fw, job, nodes)
        g, c, m = fw.job_gpus[job], fw.job_cpu[job], fw.job_mem[job]
        if fw.is_share(job):
            milli = fw.job_milli[job]
            return Placement((node,), 1, c, m, milli, (self.pick(ctx, node, milli),))
        return Placement((node,), g, c, m)

    def choose(self, ctx: CycleContext, fw: Placer, job: int, nodes: IntArray) -> int:
        return self.best(ctx, nodes, self.key(ctx, fw, job, nodes))


def _milli(fw: Placer, job: int) -> int:
    """The milli per GPU of ``job`` (1000 for whole GPUs, 0 without GPU)."""
    if fw.job_gpus[job] <= 0:
        return 0
    return fw.job_milli[job] if fw.is_share(job) else MILLI


@register_plugin
class RandomPick(KeyPlace, JobListener):
    """``random-pick``: a fitting node drawn uniformly from ``env.rng``; a share gets a GPU drawn
    uniformly among the node's GPUs that hold it, in GPU slot order. ``tie`` is not used.

    The core state does not number a node's whole GPUs, so the plugin keeps a slot layout per node as
    the FGD simulator has it (whole-GPU workers take the lowest-numbered free GPUs, a share the GPU
    drawn), from the start/stop events; a node whose layout no longer matches the state's free milli
    (a placement the plugin did not hear of) gets the state's GPUs, largest free first."""

    NAME = "random-pick"

    def setup(self, env: SchedulerEnv) -> None:
        super().setup(env)
        self._slots: dict[int, list[int]] = {n: [MILLI] * g for n, g in enumerate(env.cluster.gpus.tolist())}
        self._held: dict[int, list[tuple[int, int, int]]] = {}  # job -> (node, slot, milli) per GPU
        self._pending: tuple[int, int] | None = None  # (node, slot) of the share just picked

    def _layout(self, node: int) -> list[int]:
        g = int(self.rows.gpus[node])
        row = self.rows.rows[node][:g].tolist()
        slots = self._slots.get(node)
        if slots is None or sorted(slots, reverse=True) != row:
            slots = self._slots[node] = row
        return slots

    def choose(self, ctx: CycleContext, fw: Placer, job: int, nodes: IntArray) -> int:
        return int(nodes[int(ctx.env.rng.integers(nodes.size))])

    def pick(self, ctx: CycleContext, node: int, milli: int) -> int:
        slots = self._layout(node)
        fits = [k for k, v in enumerate(slots) if v >= milli]
        k = fits[int(ctx.env.rng.integers(len(fits)))]
        self._pending = (node, k)
        return slots[k]

    def job_started(self, env: SchedulerEnv, job: int, now: float, placement: Placement) -> None:
        if placement.gpus <= 0:
            return
        share = placement.gpu_milli < MILLI
        held = self._held.setdefault(job, [])
        for node in placement.nodes:
            slots = self._slots.get(node)
            if slots is None:
                continue  # laid out again from the state when next needed
            if share:
                m = placement.gpu_milli
                pending = self._pending
                if pending is not None and pending[0] == node and slots[pending[1]] >= m:
                    k = pending[1]
                else:  # best fit, lowest slot on ties (the state's own rule)
                    fit = [(v, k) for k, v in enumerate(slots) if v >= m]
                    if not fit:
                        del self._slots[node]
                        continue
                    k = min(fit)[1]
                slots[k] -= m
                held.append((node, k, m))
            else:
                free = [k for k, v in enumerate(slots) if v == MILLI][: placement.gpus]
                if len(free) < placement.gpus:
                    del self._slots[node]
                    continue
                for k in free:
                    slots[k] = 0
                    held.append((node, k, MILLI))
        self._pending = None

    def job_stopped(self, env: SchedulerEnv, job: int, now: float, placement: Placement, finished: bool) -> None:
        for node, k, m in self._held.pop(job, ()):
            slots = self._slots.get(node)
            if slots is not None and slots[k] + m <= MILLI:
                slots[k] += m


class ResidualArgs(TieArgs):
    cpu_weight: float = Field(0.5, ge=0)
    gpu_weight: float = Field(0.5, ge=0)
    mem_weight: float = Field(0.0, ge=0)


@register_plugin
class ResidualFit(KeyPlace):
    """``residual-fit`` (the FGD artifact's BestFit): the least weighted normalised residual,

        key = w_cpu (cpu_free - cpu) / CPU_MAX + w_gpu (gpu_free - gpus x milli) / GPU_MAX
              + w_mem (mem_free - mem) / MEM_MAX,

    ``gpu_free`` the node's free milli-GPU in total (shares included). Defaults 0.5, 0.5, 0."""

    NAME = "residual-fit"
    Args = ResidualArgs

    def setup(self, env: SchedulerEnv) -> None:
        super().setup(env)
        a = self.args
        assert isinstance(a, ResidualArgs)
        self._wc = a.cpu_weight / self.cpu_max
        self._wg = a.gpu_weight / (self.max_gpus * MILLI)
        self._wm = a.mem_weight / self.mem_max

    def key(self, ctx: CycleContext, fw: Placer, job: int, nodes: IntArray) -> npt.NDArray[np.generic]:
        st = ctx.state
        demand = fw.job_gpus[job] * _milli(fw, job)
        key = self._wc * (self.cpu_free(st, nodes) - fw.job_cpu[job]) + self._wg * (self.rows.total[nodes] - demand)
        if self._wm:
            key = key + self._wm * (self.mem_free(st, nodes) - fw.job_mem[job])
        out: npt.NDArray[np.generic] = key
        return out


class DotProductArgs(TieArgs):
    prefer: Literal["min", "max"] = "min"


@register_plugin
class DotProduct(KeyPlace):
    """``dot-product`` (Tetris alignment; the FGD artifact's DotProd): with both vectors normalised by
    the largest node capacity,

        dot = (cpu_free / CPU_MAX)(cpu / CPU_MAX) + gpu_term,

    ``gpu_term`` = (f / 1000)(milli / 1000) for a share, f the free milli of the GPU it would use;
    (gpu_free / GPU_MAX)(gpus x 1000 / GPU_MAX) for whole GPUs; 0 without GPU. ``prefer: min``
    (default, the artifact, which scores 1 - dot) takes the smallest dot and the best-fitting GPU;
    ``prefer: max`` (Tetris) the largest dot and the GPU with the most free milli."""

    NAME = "dot-product"
    Args = DotProductArgs

    def setup(self, env: SchedulerEnv) -> None:
        super().setup(env)
        a = self.args
        assert isinstance(a, DotProductArgs)
        self._cmax = float(self.cpu_max)
        self._gmax = float(self.max_gpus * MILLI)
        self._sign = 1.0 if a.prefer == "min" else -1.0

    def key(self, ctx: CycleContext, fw: Placer, job: int, nodes: IntArray) -> npt.NDArray[np.generic]:
        cm = self._cmax
        dot = (self.cpu_free(ctx.state, nodes) / cm) * (fw.job_cpu[job] / cm)
        g = fw.job_gpus[job]
        if fw.is_share(job):
            milli = fw.job_milli[job]
            f = self.rows.best_fit(nodes, milli) if self._sign > 0 else self.rows.rows[nodes].max(axis=1)
            dot = dot + (f / MILLI) * (milli / MILLI)
        elif g > 0:
            dot = dot + (self.rows.total[nodes] / self._gmax) * (g * MILLI / self._gmax)
        out: npt.NDArray[np.generic] = self._sign * dot
        return out

    def pick(self, ctx: CycleContext, node: int, milli: int) -> int:
        return -1 if self._sign > 0 else int(self.rows.rows[node].max())


@register_plugin
class GpuPacking(KeyPlace):
    """``gpu-packing`` (the FGD artifact's GpuPacking), highest score first (key = -score):

    1. a share fitting a partly used GPU: 100 - f/100, f the least free milli that holds it;
    2. completely free GPUs on a node in use: 50 - (GPUs the job takes), at least 33;
    3. a node whose GPUs are all free: 33 - (its free GPUs), smaller idle nodes first.

    Jobs without GPU score 0 everywhere (every fitting node ties)."""

    NAME = "gpu-packing"

    def key(self, ctx: CycleContext, fw: Placer, job: int, nodes: IntArray) -> npt.NDArray[np.generic]:
        g = fw.job_gpus[job]
        if g <= 0:
            return np.zeros(nodes.size)
        idle = self.rows.idle(nodes)
        case3 = (100 // 3) - self.rows.full[nodes]
        if fw.is_share(job):
            f = self.rows.best_fit(nodes, fw.job_milli[job])
            used = np.where(f < MILLI, 100.0 - f / 100.0, 50.0 - 1.0)
        else:
            used = np.full(nodes.size, float(max(50 - g, 100 // 3)))
        out: npt.NDArray[np.generic] = -np.where(idle, case3, used)
        return out


@register_plugin
class GpuClustering(KeyPlace, JobListener):
    """``gpu-clustering`` (the FGD artifact's GpuClustering): the kinds of GPU load (share, 1, 2, 4, 8
    whole GPUs, other counts: :func:`load_kind`) of the running workers on each node are kept (from
    the ``job_started``/``job_stopped`` events). With u = (GPU_MAX - gpu_free) / GPU_MAX, a GPU job
    scores 75 + 25u on a node holding only its kind, 50 + 25u on one holding its kind among others,
    25 + 25u on one holding no GPU load, 25u on one holding only other kinds; the highest wins. Jobs
    without GPU score 0 everywhere."""

    NAME = "gpu-clustering"

    def setup(self, env: SchedulerEnv) -> None:
        super().setup(env)
        self._gmax = float(self.max_gpus * MILLI)
        self._count = np.zeros((env.cluster.n_nodes, N_KINDS), dtype=np.int64)
        self.kinds: IntArray = np.zeros(env.cluster.n_nodes, dtype=np.int64)

    def _book(self, env: SchedulerEnv, job: int, placement: Placement, sign: int) -> None:
        jobs = env.jobs
        g = int(jobs.gpus_per_worker[job])
        kind = load_kind(g, placement.gpu_milli if placement.gpu_milli else MILLI)
        if kind < 0:
            return
        for n in placement.nodes:
            self._count[n, kind] += sign
            bits = 0
            for k in np.flatnonzero(self._count[n]).tolist():
                bits |= 1 << k
            self.kinds[n] = bits

    def job_started(self, env: SchedulerEnv, job: int, now: float, placement: Placement) -> None:
        self._book(env, job, placement, 1)

    def job_stopped(self, env: SchedulerEnv, job: int, now: float, placement: Placement, finished: bool) -> None:
        self._book(env, job, placement, -1)

    def key(self, ctx: CycleContext, fw: Placer, job: int, nodes: IntArray) -> npt.NDArray[np.generic]:
        g = fw.job_gpus[job]
        if g <= 0:
            return np.zeros(nodes.size)
        kinds = self.kinds[nodes]
        bit = 1 << load_kind(g, _milli(fw, job))
        same = (kinds & bit) != 0
        tier = np.where(same, np.where(kinds == bit, 75.0, 50.0), np.where(kinds == 0, 25.0, 0.0))
        out: npt.NDArray[np.generic] = -(tier + 25.0 * (self._gmax - self.rows.total[nodes]) / self._gmax)
        return out


def ebinpack_share_key(rows: NodeRows, nodes: IntArray, cpu_free: IntArray, gpus: int, milli: int, cpu: int,
                       max_gpus: int) -> IntArray:
    """The share-aware E-Binpack key (smallest first) of one worker of ``gpus`` GPUs at ``milli``
    (1000: whole GPUs, 0: no GPU) and ``cpu`` milli-CPU, lexicographic, as one integer:

    * share m (f = least free milli on the node that holds m): (GPU tier: 0 exact fit f = m, 1 partly
      used GPU, 2 completely free GPU; node tier: 0 node in use, 1 idle node; f - m; node free
      milli-GPU - m);
    * k whole GPUs: (0 if the worker takes the node's last free milli, 1 node in use, 2 idle node;
      completely free GPUs left; free milli-GPU left);
    * no GPU: (node free milli-GPU; free CPU left)."""
    total = rows.total[nodes]
    gmax = max_gpus * MILLI + 1
    if gpus <= 0:
        cpu_left = cpu_free - cpu
        cmax = int(cpu_left.max()) + 1
        key: IntArray = total * cmax + cpu_left
    elif milli < MILLI:
        f = rows.best_fit(nodes, milli)
        gpu_tier = np.where(f == milli, 0, np.where(f < MILLI, 1, 2))
        node_tier = rows.idle(nodes).astype(np.int64)
        key = ((gpu_tier * 2 + node_tier) * (MILLI + 1) + (f - milli)) * gmax + (total - milli)
    else:
        left_total = total - gpus * MILLI
        tier = np.where(left_total == 0, 0, np.where(rows.idle(nodes), 2, 1))
        left_full = rows.full[nodes] - gpus
        key = (tier * (max_gpus + 1) + left_full) * gmax + left_total
    return key
