"""The static shape of a cluster: nodes, their GPUs, and the network topology they sit in.

Node attributes live in NumPy arrays indexed by node number, so that filters and scores can work on
the whole cluster at once. The topology has three tiers: a node sits under one leaf switch, and a
leaf sits under one spine. Everything here is immutable; what changes during a run lives in
:class:`kant.model.state.ClusterState`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kant.text import plural

__all__ = [
    "NodeSpec", "Cluster", "DEFAULT_NODES_PER_LEAF", "DEFAULT_LEAVES_PER_SPINE", "MAX_GPUS_PER_NODE", "MAX_NODES",
]

DEFAULT_NODES_PER_LEAF = 32
DEFAULT_LEAVES_PER_SPINE = 8
#: the largest cluster a spec, inventory or mapping may describe (docs/clusters.md): more is a typo,
#: and building it would take minutes and gigabytes before the first job is placed
MAX_NODES = 1_000_000
#: the most GPUs one node may have (docs/clusters.md)
MAX_GPUS_PER_NODE = 1024

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node of an inventory. ``leaf``/``spine`` are optional topology labels."""

    name: str
    gpu_type: str
    gpus: int
    cpu_milli: int = 0
    memory_mib: int = 0
    leaf: str | None = None
    spine: str | None = None


@dataclass(frozen=True, eq=False)
class Cluster:
    """Immutable node inventory plus topology, as parallel arrays (one entry per node).

    ``cpu_milli``/``memory_mib`` of 0 mean "not modelled": such a node never rejects a job for CPU
    or memory.
    """

    names: tuple[str, ...]
    gpu_type_names: tuple[str, ...]
    gpu_type: IntArray  # code into gpu_type_names
    gpus: IntArray
    cpu_milli: IntArray
    memory_mib: IntArray
    leaf: IntArray  # leaf index per node
    spine: IntArray  # spine index per node
    leaf_spine: IntArray  # spine index per leaf
    leaf_names: tuple[str, ...]
    spine_names: tuple[str, ...]
    leaf_gpus: IntArray = field(init=False)
    spine_gpus: IntArray = field(init=False)
    total_gpus: int = field(init=False)
    max_gpus_per_node: int = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.names)
        for name in ("gpu_type", "gpus", "cpu_milli", "memory_mib", "leaf", "spine"):
            arr = getattr(self, name)
            if arr.shape != (n,):
                raise ValueError(f"Cluster.{name} has shape {arr.shape}, expected ({n},)")
            arr.setflags(write=False)
        self.leaf_spine.setflags(write=False)
        leaf_gpus = np.bincount(self.leaf, weights=self.gpus, minlength=self.n_leaves).astype(np.int64)
        spine_gpus = np.bincount(self.spine, weights=self.gpus, minlength=self.n_spines).astype(np.int64)
        leaf_gpus.setflags(write=False)
        spine_gpus.setflags(write=False)
        object.__setattr__(self, "leaf_gpus", leaf_gpus)
        object.__setattr__(self, "spine_gpus", spine_gpus)
        object.__setattr__(self, "total_gpus", int(self.gpus.sum()))
        object.__setattr__(self, "max_gpus_per_node", int(self.gpus.max()) if n else 0)

    # --- sizes -------------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return len(self.names)

    @property
    def n_leaves(self) -> int:
        return len(self.leaf_names)

    @property
    def n_spines(self) -> int:
        return len(self.spine_names)

    @property
    def n_gpu_nodes(self) -> int:
        return int(np.count_nonzero(self.gpus))

    def gpu_type_code(self, name: str) -> int:
        """Code of a GPU type name, or -1 if no node has it."""
        try:
            return self.gpu_type_names.index(name)
        except ValueError:
            return -1

    def describe(self) -> str:
        """``80 nodes, 640 GPUs V100, 10 leaves, 2 spines``; with several GPU types, the split by type:
        ``120 nodes, 880 GPUs (100 nodes / 800 GPUs H100; 20 nodes / 80 GPUs A10), ...``."""
        parts = []
        for code, tname in enumerate(self.gpu_type_names):
            sel = self.gpu_type == code
            n = int(sel.sum())
            if n:
                parts.append((n, int(self.gpus[sel].sum()), tname))
        gpus = plural(self.total_gpus, "GPU")
        if len(parts) == 1 and parts[0][0] == self.n_nodes:
            gpus += f" {parts[0][2]}"
        else:
            split = "; ".join(f"{plural(n, 'node')} / {plural(g, 'GPU')} {t}" for n, g, t in parts)
            gpus += f" ({split})"
        return (f"{plural(self.n_nodes, 'node')}, {gpus}, {plural(self.n_leaves, 'leaf', 'leaves')}, "
                f"{plural(self.n_spines, 'spine')}")

    # --- construction ------------------------------------------------------------------------
    @classmethod
    def from_nodes(
        cls,
        nodes: Sequence[NodeSpec],
        *,
        nodes_per_leaf: int = DEFAULT_NODES_PER_LEAF,
        leaves_per_spine: int = DEFAULT_LEAVES_PER_SPINE,
    ) -> Cluster:
        """Build a cluster from node specs.

        Nodes that carry ``leaf`` labels keep them (and their ``spine`` label, or a spine derived
        by grouping ``leaves_per_spine`` leaves in order of first appearance). Unlabelled nodes are
        grouped in inventory order: ``nodes_per_leaf`` consecutive nodes form a leaf and
        ``leaves_per_spine`` consecutive leaves a spine.
        """
        if not nodes:
            raise ValueError("a cluster needs at least one node")
        if nodes_per_leaf < 1 or leaves_per_spine < 1:
            raise ValueError("nodes_per_leaf and leaves_per_spine must be >= 1")
        type_names: list[str] = []
        type_index: dict[str, int] = {}
        leaf_index: dict[str, int] = {}
        leaf_names: list[str] = []
        leaf_spine_label: list[str | None] = []
        leaf_of = np.empty(len(nodes), dtype=np.int64)
        auto_count = 0
        for i, node in enumerate(nodes):
            if node.gpu_type not in type_index:
                type_index[node.gpu_type] = len(type_names)
                type_names.append(node.gpu_type)
            if node.leaf is not None:
                label = node.leaf
            else:
                label = f"leaf-{auto_count // nodes_per_leaf}"
                auto_count += 1
            if label not in leaf_index:
                leaf_index[label] = len(leaf_names)
                leaf_names.append(label)
                leaf_spine_label.append(node.spine)
            leaf_of[i] = leaf_index[label]
        spine_index: dict[str, int] = {}
        spine_names: list[str] = []
        leaf_spine = np.empty(len(leaf_names), dtype=np.int64)
        auto_leaf = 0
        for li, slabel in enumerate(leaf_spine_label):
            if slabel is None:
                slabel = f"spine-{auto_leaf // leaves_per_spine}"
                auto_leaf += 1
            if slabel not in spine_index:
                spine_index[slabel] = len(spine_names)
                spine_names.append(slabel)
            leaf_spine[li] = spine_index[slabel]
        return cls(
            names=tuple(n.name for n in nodes),
            gpu_type_names=tuple(type_names),
            gpu_type=np.array([type_index[n.gpu_type] for n in nodes], dtype=np.int64),
            gpus=np.array([n.gpus for n in nodes], dtype=np.int64),
            cpu_milli=np.array([n.cpu_milli for n in nodes], dtype=np.int64),
            memory_mib=np.array([n.memory_mib for n in nodes], dtype=np.int64),
            leaf=leaf_of,
            spine=leaf_spine[leaf_of],
            leaf_spine=leaf_spine,
            leaf_names=tuple(leaf_names),
            spine_names=tuple(spine_names),
        )

    @classmethod
    def uniform(
        cls,
        n_nodes: int,
        gpus_per_node: int,
        gpu_type: str = "GPU",
        *,
        cpu_milli: int = 0,
        memory_mib: int = 0,
        nodes_per_leaf: int = DEFAULT_NODES_PER_LEAF,
        leaves_per_spine: int = DEFAULT_LEAVES_PER_SPINE,
    ) -> Cluster:
        """``n_nodes`` identical nodes (a convenience for tests and specs)."""
        width = len(str(max(n_nodes - 1, 0)))
        nodes = [
            NodeSpec(f"node-{i:0{width}d}", gpu_type, gpus_per_node, cpu_milli, memory_mib)
            for i in range(n_nodes)
        ]
        return cls.from_nodes(nodes, nodes_per_leaf=nodes_per_leaf, leaves_per_spine=leaves_per_spine)
