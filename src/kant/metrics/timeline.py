"""The cluster series of a finished run as step functions (:class:`Timeline`).

Sample ``k`` holds on ``[times[k], times[k+1])``, the last sample holds until ``end_time``, and before
the first sample the cluster is empty; a time-weighted mean is an integral computed with ``np.diff``
of clipped sample times, never a Python loop over samples (see :mod:`kant.metrics.summary`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kant.metrics import occupancy
from kant.metrics.recorder import SimResult

__all__ = ["Timeline"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


class Timeline:
    """The cluster series of a run as step functions over ``edges``.

    ``edges`` has one more entry than each series: sample ``k`` holds on ``[edges[k], edges[k+1])``
    and ``edges[-1]`` is the run's end. If ``start`` is before the first sample, an "empty cluster"
    sample (nothing allocated, down or queued; every GPU node empty) is put in front at ``start``.
    Besides the recorded series, ``series["down_nodes"]`` holds the down GPU nodes of each sample
    (from the result's record of node changes).
    """

    def __init__(self, result: SimResult, start: float | None = None) -> None:
        times = np.asarray(result.times, dtype=np.float64)
        cluster = result.cluster
        n = times.size
        series = {name: np.asarray(v, dtype=np.float64) for name, v in result.series.items()}
        # each sample's down GPU nodes: the last change at or before its time (samples follow changes)
        at = np.searchsorted(result.down_node_times, times, side="right") - 1
        down = np.asarray(result.down_nodes, dtype=np.float64)
        series["down_nodes"] = np.where(at >= 0, down[np.maximum(at, 0)], 0.0) if down.size else np.zeros(n)
        end = float(result.end_time)
        if n:
            end = max(end, float(times[-1]))
        first = float(times[0]) if n else end
        if start is not None and start < first:
            empty = {name: 0.0 for name in series}
            empty["empty_nodes"] = float(cluster.n_gpu_nodes)
            times = np.concatenate(([start], times))
            series = {name: np.concatenate(([empty.get(name, 0.0)], v)) for name, v in series.items()}
        self.result = result
        self.edges: FloatArray = np.append(times, end)
        self.series: dict[str, FloatArray] = series
        self.end = end
        self.has_samples = n > 0

    def __len__(self) -> int:
        return int(self.edges.size - 1)

    def weights(self, lo: float, hi: float) -> FloatArray:
        """Seconds each sample holds inside ``[lo, hi]``."""
        return np.diff(np.clip(self.edges, lo, hi))

    def cumulative(self, values: FloatArray, points: npt.ArrayLike) -> FloatArray:
        """Integral of the step function ``values`` from the first edge up to each point."""
        edges = self.edges
        x = np.clip(np.asarray(points, dtype=np.float64), edges[0], edges[-1])
        if len(self) == 0:
            return np.zeros_like(x)
        cum = np.concatenate(([0.0], np.cumsum(values * np.diff(edges))))
        k = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(self) - 1)
        out: FloatArray = cum[k] + values[k] * (x - edges[k])
        return out

    def binned_mean(
        self, values: FloatArray, lo: float, hi: float, bins: int, mask: BoolArray | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """Time-weighted mean of ``values`` in ``bins`` equal bins of ``[lo, hi]`` (for plots).

        Only instants where ``mask`` is true count; a bin with no counted time is NaN. Returns
        ``(bin midpoints, means)``.
        """
        bounds = np.linspace(lo, hi, bins + 1)
        if mask is None:
            num = np.diff(self.cumulative(values, bounds))
            den = np.diff(np.clip(bounds, self.edges[0], self.edges[-1]))
        else:
            m = mask.astype(np.float64)
            num = np.diff(self.cumulative(np.where(mask, values, 0.0), bounds))
            den = np.diff(self.cumulative(m, bounds))
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
        return (bounds[:-1] + bounds[1:]) / 2, mean

    # --- derived step functions (kant.metrics.occupancy: the live service's definitions too) ---
    def gar(self) -> FloatArray:
        """Allocated / total GPUs per sample."""
        return occupancy.gar(self.series["allocated_gpus"], self.result.cluster.total_gpus)[0]

    def sor(self) -> tuple[FloatArray, BoolArray]:
        """SOR per sample and the mask of samples with demand (denominator > 0)."""
        s = self.series
        return occupancy.sor(s["allocated_gpus"], s["pending_gpus"], s["down_gpus"], self.result.cluster.total_gpus)

    def gfr_nodes(self) -> tuple[FloatArray, BoolArray]:
        """Partial nodes / up GPU nodes per sample, and the mask of samples with a GPU node up."""
        s = self.series
        return occupancy.gfr_nodes(s["partial_nodes"], s["down_nodes"], self.result.cluster.n_gpu_nodes)

    def gfr_gpus(self) -> tuple[FloatArray, BoolArray]:
        """Free GPUs on partial nodes / free GPUs per sample, and the mask of samples with free GPUs."""
        s = self.series
        return occupancy.gfr_gpus(s["free_on_partial"], s["allocated_gpus"], s["down_gpus"],
                                  self.result.cluster.total_gpus)
