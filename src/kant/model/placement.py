"""Where a job's workers run (:class:`Placement`), and :func:`slot_setters` for the fast
``__init__`` of a frozen slotted dataclass. Re-exported by :mod:`kant.model.state`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kant.model.cluster import Cluster
from kant.model.fit import FULL_GPU_MILLI

__all__ = ["Placement", "slot_setters"]


@dataclass(frozen=True, slots=True, init=False)
class Placement:
    """Where a job's workers run: ``nodes[k]`` is worker k's node; each worker holds the same
    ``gpus``/``cpu_milli``/``memory_mib`` on its node. A GPU share (``gpus`` 1, ``gpu_milli`` below
    1000) holds ``gpu_milli`` of one GPU; ``gpu_pick[k]``, if given, is the free milli of the GPU
    worker k is to use (1000: a completely free one), else the state picks the best-fitting GPU."""

    nodes: tuple[int, ...]
    gpus: int
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_milli: int = FULL_GPU_MILLI
    gpu_pick: tuple[int, ...] = ()
    per_node: dict[int, int] = field(init=False, repr=False, compare=False)

    # The generated __init__ of a frozen dataclass sets each field through a lookup of
    # object.__setattr__; this one (the same arguments, a placement is made at every start) calls
    # the slots' own setters, bound once below the class: half the cost.
    def __init__(self, nodes: tuple[int, ...], gpus: int, cpu_milli: int = 0, memory_mib: int = 0,
                 gpu_milli: int = FULL_GPU_MILLI, gpu_pick: tuple[int, ...] = ()) -> None:
        _set_nodes(self, nodes)
        _set_gpus(self, gpus)
        _set_cpu(self, cpu_milli)
        _set_mem(self, memory_mib)
        _set_milli(self, gpu_milli)
        _set_pick(self, gpu_pick)
        if len(nodes) == 1:
            _set_per_node(self, {nodes[0]: 1})
        else:
            counts: dict[int, int] = {}
            for n in nodes:
                counts[n] = counts.get(n, 0) + 1
            _set_per_node(self, counts)

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


def slot_setters(cls: type, *names: str) -> list[Callable[[Any, Any], None]]:
    """The ``__set__`` of each named slot of ``cls``: what the fast ``__init__`` of a frozen slotted
    dataclass calls (its fields are set once, there; ``object.__setattr__`` per field costs twice)."""
    return [vars(cls)[name].__set__ for name in names]


_set_nodes, _set_gpus, _set_cpu, _set_mem, _set_milli, _set_pick, _set_per_node = slot_setters(
    Placement, "nodes", "gpus", "cpu_milli", "memory_mib", "gpu_milli", "gpu_pick", "per_node")
