"""The FGD experiment's inputs as columns: an inventory and a pod list (what the arrivals, the
never-fit count and the measures read; placement is the core scheduler's, :mod:`kant.experiments.fgd.core`).

Units are integers: milli-CPU, MiB and milli-GPU (``MILLI`` = 1000 = one whole GPU).

* :class:`Inventory`: the nodes (CPU, memory, GPU count, GPU model code), immutable.
* :class:`Workload`: pods as columns. A pod asks for ``ngpu`` whole GPUs (1..8, ``milli`` = 1000),
  or one fractional share of a single GPU (``ngpu`` = 1, ``milli`` < 1000), or no GPU (``ngpu`` =
  ``milli`` = 0); plus ``cpu`` and ``mem``; ``spec`` is a code into the workload's allowed-type
  table (-1 = any GPU type).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["MILLI", "Inventory", "Workload"]

MILLI = 1000

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

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
