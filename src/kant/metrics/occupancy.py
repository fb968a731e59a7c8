"""GAR, SOR and both GFR forms from the cluster's counts: one definition (docs/metrics.md) for a run's
series and for the live service's instant.

The summary's :class:`~kant.metrics.summary.Timeline` calls these functions on the recorded samples
(NumPy arrays, one value per sample), the live service's view (:mod:`kant.service.live.view`) on the
counts of one instant (plain numbers). Each returns the ratio and where it is defined (its denominator
is positive): where it is not, the value is not a ratio (the numerator over 1), a time-weighted mean
leaves the instant out, and the live view shows no value (:func:`at_instant`).

:class:`ClusterNow` is the counts of one instant; the ``*_now`` functions are the live side of the
built-in metrics' lines in :data:`kant.metrics.registry.METRICS` (what the live service shows).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kant.model.state import ClusterState

__all__ = ["ClusterNow", "Ratio", "at_instant", "down_nodes", "gar", "gar_now", "gfr_gpus", "gfr_gpus_now",
           "gfr_nodes", "gfr_nodes_now", "sor", "sor_now"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
#: a ratio and where it is defined (arrays of one value per sample, or 0-d arrays for one instant)
Ratio = tuple[FloatArray, BoolArray]


def _ratio(num: npt.ArrayLike, den: npt.ArrayLike) -> Ratio:
    den_ = np.asarray(den, dtype=np.float64)
    defined = den_ > 0
    value = np.asarray(num, dtype=np.float64) / np.where(defined, den_, 1.0)
    return value, np.broadcast_to(defined, value.shape)  # (one flag per value, also for a constant den)


def gar(allocated_gpus: npt.ArrayLike, total_gpus: int) -> Ratio:
    """GPU Allocation Ratio: allocated / total GPUs (down GPUs included in the total)."""
    return _ratio(allocated_gpus, total_gpus)


def sor(allocated_gpus: npt.ArrayLike, pending_gpus: npt.ArrayLike, down_gpus: npt.ArrayLike,
        total_gpus: int) -> Ratio:
    """Scheduling Occupancy Rate: allocated / min(capacity, demand), with capacity = total - down GPUs
    and demand = allocated + pending GPUs; defined where that minimum is positive."""
    alloc = np.asarray(allocated_gpus, dtype=np.float64)
    capacity = float(total_gpus) - np.asarray(down_gpus, dtype=np.float64)
    return _ratio(alloc, np.minimum(capacity, alloc + np.asarray(pending_gpus, dtype=np.float64)))


def gfr_nodes(partial_nodes: npt.ArrayLike, down_nodes: npt.ArrayLike, gpu_nodes: int) -> Ratio:
    """GFR, node form: partly used nodes / up GPU nodes (``gpu_nodes - down_nodes``); defined where a
    GPU node is up."""
    return _ratio(partial_nodes, gpu_nodes - np.asarray(down_nodes, dtype=np.float64))


def gfr_gpus(free_on_partial: npt.ArrayLike, allocated_gpus: npt.ArrayLike, down_gpus: npt.ArrayLike,
             total_gpus: int) -> Ratio:
    """GFR, GPU-weighted form: free GPUs on partly used nodes / free GPUs (total - allocated - down);
    defined where a GPU is free."""
    free = total_gpus - np.asarray(allocated_gpus, dtype=np.float64) - np.asarray(down_gpus, dtype=np.float64)
    return _ratio(free_on_partial, free)


def at_instant(ratio: Ratio) -> float | None:
    """The value of a ratio of one instant, or None where it is not defined."""
    value, defined = ratio
    return float(value) if bool(defined) else None


def down_nodes(state: ClusterState) -> int:
    """GPU nodes that take no work now (failed; live, also cordoned or draining): what GFR's up GPU
    nodes leave out. A scan of the nodes: taken when a node changes, not on every sample."""
    return int(np.count_nonzero(~state.up & (state.cluster.gpus > 0)))


@dataclass(frozen=True, slots=True)
class ClusterNow:
    """The cluster's counts at one instant, what a live metric is computed from (the live service
    takes one after each turn of its loop: :func:`kant.service.live.view.publish`)."""

    total_gpus: int
    allocated_gpus: int
    down_gpus: int  # GPUs that take no work: failed nodes, and idle GPUs of cordoned or draining ones
    pending_gpus: int
    partial_nodes: int
    free_on_partial: int
    down_nodes: int  # GPU nodes that take no work
    gpu_nodes: int

    @classmethod
    def of(cls, state: ClusterState, pending_gpus: int) -> ClusterNow:
        """The counts of ``state`` now, with ``pending_gpus`` GPUs asked for by the queue."""
        return cls(state.cluster.total_gpus, state.allocated_gpus, state.down_gpus, pending_gpus, state.partial_nodes,
                   state.free_on_partial, down_nodes(state), state.cluster.n_gpu_nodes)


def gar_now(c: ClusterNow) -> float | None:
    """GAR at one instant (:func:`gar`)."""
    return at_instant(gar(c.allocated_gpus, c.total_gpus))


def sor_now(c: ClusterNow) -> float | None:
    """SOR at one instant (:func:`sor`)."""
    return at_instant(sor(c.allocated_gpus, c.pending_gpus, c.down_gpus, c.total_gpus))


def gfr_nodes_now(c: ClusterNow) -> float | None:
    """GFR's node form at one instant (:func:`gfr_nodes`)."""
    return at_instant(gfr_nodes(c.partial_nodes, c.down_nodes, c.gpu_nodes))


def gfr_gpus_now(c: ClusterNow) -> float | None:
    """GFR's GPU form at one instant (:func:`gfr_gpus`)."""
    return at_instant(gfr_gpus(c.free_on_partial, c.allocated_gpus, c.down_gpus, c.total_gpus))
