"""GPU-sharing placement model of the FGD experiment: an inventory, a pod list, and the free state.

Units are integers: milli-CPU, MiB and milli-GPU (``MILLI`` = 1000 = one whole GPU).

* :class:`Inventory`: the nodes (CPU, memory, GPU count, GPU model code), immutable.
* :class:`Workload`: pods as columns. A pod asks for ``ngpu`` whole GPUs (1..8, ``milli`` = 1000),
  or one fractional share of a single GPU (``ngpu`` = 1, ``milli`` < 1000), or no GPU (``ngpu`` =
  ``milli`` = 0); plus ``cpu`` and ``mem``; ``spec`` is a code into the workload's allowed-type
  table (-1 = any GPU type).
* :class:`GpuShareState`: free CPU and memory per node and free milli-GPU per GPU (a 2-D array
  nodes x max GPUs per node; slots a node does not have hold 0, which is exactly how a fully used
  GPU looks, so no mask is needed). :meth:`GpuShareState.fit_mask` is the vectorised fit test over
  all nodes; :meth:`GpuShareState.place` books a pod on a node and the chosen GPU(s) and refuses
  any placement that would overcommit a GPU, the CPU or the memory of a node.

As in the FGD simulator (hkust-adsl/kubernetes-scheduler-simulator), a pod fits a node when the
node's free CPU and memory cover the request, the node's GPU model is allowed, and the node has
``ngpu`` GPUs with at least ``milli`` free each (for a whole-GPU pod: ``ngpu`` completely free
GPUs; for a share: one GPU with ``milli`` free).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kant.errors import SchedulingError

__all__ = ["MILLI", "N_KINDS", "GpuShareState", "Inventory", "Pod", "Workload", "load_kind"]

MILLI = 1000

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: load kinds (bit positions) used by GPU clustering: share, 1, 2, 4, 8 whole GPUs, other counts
N_KINDS = 6
_KIND_OF_COUNT = {1: 1, 2: 2, 4: 3, 8: 4}


def load_kind(ngpu: int, milli: int) -> int:
    """Kind of GPU load a pod puts on a node: 0 share, 1/2/3/4 for 1/2/4/8 whole GPUs, 5 any other
    count; -1 for a pod without GPU."""
    if ngpu <= 0:
        return -1
    if ngpu == 1 and milli < MILLI:
        return 0
    return _KIND_OF_COUNT.get(ngpu, 5)


def _ro(a: npt.ArrayLike, dtype: type = np.int64) -> IntArray:
    arr: IntArray = np.array(a, dtype=dtype)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class Inventory:
    """Nodes as parallel arrays. ``model`` is a code into ``model_names``."""

    names: tuple[str, ...]
    cpu: IntArray
    mem: IntArray
    ngpu: IntArray
    model: IntArray
    model_names: tuple[str, ...]
    max_gpus: int = field(init=False)
    total_gpu_milli: int = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.names)
        for name in ("cpu", "mem", "ngpu", "model"):
            arr = _ro(getattr(self, name))
            if arr.shape != (n,):
                raise ValueError(f"Inventory.{name} has shape {arr.shape}, expected ({n},)")
            object.__setattr__(self, name, arr)
        if n == 0:
            raise ValueError("Inventory has no nodes")
        if (self.cpu < 0).any() or (self.mem < 0).any() or (self.ngpu < 0).any():
            raise ValueError("Inventory has a negative capacity")
        if ((self.model < 0) | (self.model >= max(len(self.model_names), 1))).any():
            raise ValueError("Inventory.model has a code outside model_names")
        object.__setattr__(self, "max_gpus", max(int(self.ngpu.max()), 1))
        object.__setattr__(self, "total_gpu_milli", int(self.ngpu.sum()) * MILLI)

    @property
    def n_nodes(self) -> int:
        return len(self.names)

    @classmethod
    def from_cluster(cls, cluster: object) -> Inventory:
        """From a :class:`kant.model.cluster.Cluster` (CPU or memory 0 = not modelled = unlimited)."""
        from kant.model.cluster import Cluster

        assert isinstance(cluster, Cluster)
        big = np.iinfo(np.int64).max // 4
        cpu = np.where(cluster.cpu_milli > 0, cluster.cpu_milli, big)
        mem = np.where(cluster.memory_mib > 0, cluster.memory_mib, big)
        return cls(tuple(cluster.names), cpu, mem, cluster.gpus, cluster.gpu_type, tuple(cluster.gpu_type_names))

    @classmethod
    def build(cls, nodes: Sequence[tuple[int, int, int, str]]) -> Inventory:
        """From ``(cpu_milli, memory_mib, gpus, model)`` tuples (tests, small examples)."""
        names: list[str] = []
        models: dict[str, int] = {}
        for _, _, _, m in nodes:
            models.setdefault(m, len(models))
        for i in range(len(nodes)):
            names.append(f"node-{i}")
        return cls(
            tuple(names),
            np.array([n[0] for n in nodes]),
            np.array([n[1] for n in nodes]),
            np.array([n[2] for n in nodes]),
            np.array([models[n[3]] for n in nodes]),
            tuple(models),
        )


@dataclass(frozen=True, slots=True)
class Pod:
    """One pod's request. ``shape`` numbers the distinct (cpu, ngpu, milli) triples of a workload
    (FGD caches per shape); ``kind`` is :func:`load_kind`."""

    index: int
    cpu: int
    mem: int
    ngpu: int
    milli: int
    spec: int
    shape: int
    kind: int

    @property
    def gpu_milli(self) -> int:
        """GPU demand in milli-GPU (``ngpu`` x ``milli``)."""
        return self.ngpu * self.milli


@dataclass(frozen=True, eq=False)
class Workload:
    """Pods as columns, in arrival order of the source list. ``allowed[spec]`` says which node
    models a pod with that ``spec`` code may use (indexed by inventory model code); -1 = any."""

    names: tuple[str, ...]
    cpu: IntArray
    mem: IntArray
    ngpu: IntArray
    milli: IntArray
    spec: IntArray
    allowed: BoolArray  # (n_specs, n_models)
    source: str = ""
    shape: IntArray = field(init=False)
    pods: tuple[Pod, ...] = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.names)
        for name in ("cpu", "mem", "ngpu", "milli", "spec"):
            arr = _ro(getattr(self, name))
            if arr.shape != (n,):
                raise ValueError(f"Workload.{name} has shape {arr.shape}, expected ({n},)")
            object.__setattr__(self, name, arr)
        allowed = np.array(self.allowed, dtype=bool)
        if allowed.ndim != 2:
            raise ValueError("Workload.allowed must be a 2-D table (specs x models)")
        allowed.setflags(write=False)
        object.__setattr__(self, "allowed", allowed)
        if (self.cpu < 0).any() or (self.mem < 0).any():
            raise ValueError("Workload has a negative CPU or memory request")
        if ((self.ngpu < 0) | (self.ngpu > 64)).any():
            raise ValueError("Workload.ngpu must be in 0..64")
        gpu = self.ngpu > 0
        if (gpu & ((self.milli <= 0) | (self.milli > MILLI))).any() or (~gpu & (self.milli != 0)).any():
            raise ValueError("Workload.milli must be 1..1000 for GPU pods and 0 for CPU pods")
        if ((self.ngpu > 1) & (self.milli != MILLI)).any():
            raise ValueError("a multi-GPU pod must ask for whole GPUs (milli 1000)")
        if ((self.spec < -1) | (self.spec >= len(allowed))).any():
            raise ValueError("Workload.spec has a code outside allowed")
        if n:
            _, shape = np.unique(np.stack([self.cpu, self.ngpu, self.milli], axis=1), axis=0, return_inverse=True)
            shape = shape.reshape(-1).astype(np.int64)
        else:
            shape = np.zeros(0, dtype=np.int64)
        shape.setflags(write=False)
        object.__setattr__(self, "shape", shape)
        pods = tuple(
            Pod(i, c, m, g, mi, s, sh, load_kind(g, mi))
            for i, (c, m, g, mi, s, sh) in enumerate(
                zip(
                    self.cpu.tolist(), self.mem.tolist(), self.ngpu.tolist(), self.milli.tolist(),
                    self.spec.tolist(), shape.tolist(), strict=True,
                )
            )
        )
        object.__setattr__(self, "pods", pods)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_milli(self) -> IntArray:
        """GPU demand per pod in milli-GPU."""
        return self.ngpu * self.milli

    @classmethod
    def from_jobs(cls, jobs: object, inventory: Inventory) -> Workload:
        """From a :class:`kant.model.job.JobTable` of one-worker pods (as
        :func:`kant.traces.openb.read_openb_pods` returns), checking GPU types against ``inventory``."""
        from kant.model.job import JobTable
        from kant.traces.schema import gpu_type_compatibility

        assert isinstance(jobs, JobTable)
        if len(jobs) and (jobs.workers != 1).any():
            raise ValueError("the FGD experiment takes one-worker pods only")
        compat = gpu_type_compatibility(jobs.gpu_type_names, inventory.model_names)
        spec = np.where(jobs.gpu_type >= 0, jobs.gpu_type, -1)
        milli = np.where(jobs.gpus_per_worker > 0, jobs.gpu_milli, 0)
        return cls(
            tuple(jobs.names), jobs.cpu_milli, jobs.memory_mib, jobs.gpus_per_worker, milli, spec,
            compat[:-1], source=jobs.source,
        )

    @classmethod
    def build(
        cls, pods: Sequence[tuple[int, int, int, int] | tuple[int, int, int, int, Sequence[str]]],
        inventory: Inventory,
    ) -> Workload:
        """From ``(cpu, mem, ngpu, milli[, allowed models])`` tuples (tests, small examples)."""
        specs: dict[tuple[str, ...], int] = {}
        spec_codes: list[int] = []
        for p in pods:
            if len(p) > 4 and p[4]:
                key = tuple(p[4])
                spec_codes.append(specs.setdefault(key, len(specs)))
            else:
                spec_codes.append(-1)
        allowed = np.zeros((len(specs), len(inventory.model_names)), dtype=bool)
        for key, code in specs.items():
            for m in key:
                if m in inventory.model_names:
                    allowed[code, inventory.model_names.index(m)] = True
        return cls(
            tuple(f"pod-{i}" for i in range(len(pods))),
            np.array([p[0] for p in pods], dtype=np.int64),
            np.array([p[1] for p in pods], dtype=np.int64),
            np.array([p[2] for p in pods], dtype=np.int64),
            np.array([p[3] for p in pods], dtype=np.int64),
            np.array(spec_codes, dtype=np.int64),
            allowed,
        )


class GpuShareState:
    """Free resources of every node and GPU; changed only by :meth:`place` (pods never leave).

    Derived per-node aggregates kept up to date on each placement, so policies read them as arrays:
    ``total_free`` (sum of free milli-GPU), ``full_free`` (number of completely free GPUs),
    ``max_free`` (largest free share of one GPU), ``kinds`` (bit mask of :func:`load_kind` values
    placed on the node).
    """

    def __init__(self, inventory: Inventory, workload: Workload | None = None) -> None:
        inv = inventory
        self.inv = inv
        n, g = inv.n_nodes, inv.max_gpus
        self.cpu_free: IntArray = inv.cpu.copy()
        self.mem_free: IntArray = inv.mem.copy()
        exists = np.arange(g)[None, :] < inv.ngpu[:, None]
        self.gpu_exists: BoolArray = exists
        self.gpu_free: IntArray = np.where(exists, MILLI, 0).astype(np.int64)
        self.total_free: IntArray = inv.ngpu * MILLI
        self.full_free: IntArray = inv.ngpu.copy()
        self.max_free: IntArray = np.where(inv.ngpu > 0, MILLI, 0).astype(np.int64)
        self.kinds: IntArray = np.zeros(n, dtype=np.int64)
        self.allocated_milli = 0
        self.n_placed = 0
        self._spec_nodes: BoolArray | None = None
        if workload is not None:
            self.bind(workload)

    def bind(self, workload: Workload) -> None:
        """Precompute, per GPU-type constraint of ``workload``, the mask of allowed nodes."""
        if len(workload.allowed) and workload.allowed.shape[1] != len(self.inv.model_names):
            raise ValueError("workload's allowed-type table does not match the inventory's models")
        if len(workload.allowed):
            self._spec_nodes = workload.allowed[:, self.inv.model]
        else:
            self._spec_nodes = np.zeros((0, self.inv.n_nodes), dtype=bool)

    def type_ok(self, spec: int) -> BoolArray | None:
        """Nodes whose GPU model a pod with constraint ``spec`` may use (None = all)."""
        if spec < 0:
            return None
        if self._spec_nodes is None:
            raise SchedulingError("GpuShareState.bind(workload) was not called")
        row: BoolArray = self._spec_nodes[spec]
        return row

    def fit_mask(self, pod: Pod) -> BoolArray:
        """Nodes that can host ``pod`` now (CPU, memory, GPU type, GPU shares)."""
        m = self.cpu_free >= pod.cpu
        m &= self.mem_free >= pod.mem
        if pod.ngpu:
            if pod.milli < MILLI:
                m &= self.max_free >= pod.milli
            else:
                m &= self.full_free >= pod.ngpu
            ok = self.type_ok(pod.spec)
            if ok is not None:
                m &= ok
        return m

    # --- GPU choice helpers (one node; at most max_gpus values) ---------------------------------
    def whole_gpus(self, node: int, k: int) -> tuple[int, ...]:
        """The ``k`` lowest-index completely free GPUs of ``node``."""
        idx = np.flatnonzero(self.gpu_free[node] == MILLI)[:k]
        return tuple(int(i) for i in idx)

    def best_fit_gpu(self, node: int, milli: int) -> int:
        """The GPU of ``node`` with the least free share that still holds ``milli`` (lowest index on ties)."""
        free = self.gpu_free[node]
        return int(np.argmin(np.where(free >= milli, free, MILLI + 1)))

    def gpu_with_free(self, node: int, free_value: int) -> int:
        """The lowest-index GPU of ``node`` whose free share is exactly ``free_value``."""
        hits = np.flatnonzero(self.gpu_free[node] == free_value)
        if not hits.size:
            raise SchedulingError(f"node {node} has no GPU with {free_value} milli free")
        return int(hits[0])

    def default_gpus(self, node: int, pod: Pod) -> tuple[int, ...]:
        """Whole GPUs: lowest-index free ones; a share: the best-fitting GPU; CPU pod: none."""
        if pod.ngpu == 0:
            return ()
        if pod.milli < MILLI:
            return (self.best_fit_gpu(node, pod.milli),)
        return self.whole_gpus(node, pod.ngpu)

    # --- booking ---------------------------------------------------------------------------------
    def place(self, node: int, pod: Pod, gpus: Sequence[int]) -> None:
        """Book ``pod`` on ``node`` using GPU slots ``gpus``; raise :class:`SchedulingError` (and
        change nothing) if it does not fit."""
        if not 0 <= node < self.inv.n_nodes:
            raise SchedulingError(f"node {node} out of range")
        if self.cpu_free[node] < pod.cpu or self.mem_free[node] < pod.mem:
            raise SchedulingError(f"pod {pod.index} overcommits CPU or memory of node {node}")
        if len(gpus) != pod.ngpu or len(set(gpus)) != len(gpus):
            raise SchedulingError(f"pod {pod.index} needs {pod.ngpu} distinct GPU(s), got {tuple(gpus)}")
        row = self.gpu_free[node]
        if pod.ngpu:
            ok = self.type_ok(pod.spec)
            if ok is not None and not ok[node]:
                raise SchedulingError(f"pod {pod.index} may not use GPU model of node {node}")
            for g in gpus:
                if not 0 <= g < int(self.inv.ngpu[node]) or row[g] < pod.milli:
                    raise SchedulingError(f"pod {pod.index} overcommits GPU {g} of node {node}")
            for g in gpus:
                row[g] -= pod.milli
            self.total_free[node] -= pod.gpu_milli
            self.full_free[node] = int(np.count_nonzero(row == MILLI))
            self.max_free[node] = int(row.max())
            self.kinds[node] |= 1 << pod.kind
            self.allocated_milli += pod.gpu_milli
        self.cpu_free[node] -= pod.cpu
        self.mem_free[node] -= pod.mem
        self.n_placed += 1

    def check(self) -> None:
        """Verify every invariant from scratch (tests, debugging)."""
        inv = self.inv
        if (self.gpu_free < 0).any() or (self.gpu_free > MILLI).any():
            raise SchedulingError("a GPU share is outside 0..1000")
        if (self.gpu_free[~self.gpu_exists] != 0).any():
            raise SchedulingError("a GPU slot the node does not have holds a share")
        if (self.cpu_free < 0).any() or (self.mem_free < 0).any():
            raise SchedulingError("a node is overcommitted on CPU or memory")
        if (self.cpu_free > inv.cpu).any() or (self.mem_free > inv.mem).any():
            raise SchedulingError("a node has more free CPU or memory than capacity")
        if not np.array_equal(self.total_free, self.gpu_free.sum(axis=1)):
            raise SchedulingError("total_free is stale")
        if not np.array_equal(self.full_free, (self.gpu_free == MILLI).sum(axis=1)):
            raise SchedulingError("full_free is stale")
        if not np.array_equal(self.max_free, self.gpu_free.max(axis=1)):
            raise SchedulingError("max_free is stale")
        if self.allocated_milli != inv.total_gpu_milli - int(self.total_free.sum()):
            raise SchedulingError("allocated_milli is stale")

    @property
    def idle(self) -> BoolArray:
        """Nodes whose GPUs are all completely free (GPU nodes only)."""
        out: BoolArray = (self.full_free == self.inv.ngpu) & (self.inv.ngpu > 0)
        return out
