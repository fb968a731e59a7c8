"""One finished run as the metrics see it (:class:`RunView`): what every metric of
:data:`kant.metrics.registry.METRICS` is computed from.

The view holds what several metrics share, worked out once: the measurement window, the cluster
:class:`~kant.metrics.timeline.Timeline` from the window's start, the window's sample weights, the
estimates JTTED compares, and the job masks (training, finished).
"""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np
import numpy.typing as npt

from kant.metrics.recorder import JobStatus, SimResult
from kant.metrics.timeline import Timeline
from kant.model.job import JobKind, JobTable

__all__ = ["RunView"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


class RunView:
    """A finished run (``result``) with its measurement window and what the metrics share.

    ``window`` is the measurement window ``(start, end)`` for the time-weighted cluster metrics (GAR,
    daily GAR, SOR, GFR, queue); by default ``[first submit, last submit]`` of all jobs
    (``window_kind`` ``"arrivals"``), or, when every job arrives at one instant or there are none,
    ``[first sample, end of run]`` (``"run"``); ``"given"`` for the caller's. ``estimates`` (one value
    per job, NaN = none) replaces the job table's ``estimate`` column for JTTED.
    """

    def __init__(self, result: SimResult, *, window: tuple[float, float] | None = None,
                 estimates: npt.ArrayLike | None = None) -> None:
        jobs = result.jobs
        n_jobs = len(jobs)
        if estimates is None:
            est = np.asarray(jobs.estimate, dtype=np.float64)
        else:
            est = np.asarray(estimates, dtype=np.float64)
            if est.shape != (n_jobs,):
                raise ValueError(f"estimates has shape {est.shape}, expected ({n_jobs},)")
        times = np.asarray(result.times, dtype=np.float64)
        run_window: tuple[float, float] | None = None
        if times.size:
            run_window = (float(times[0]), max(float(result.end_time), float(times[-1])))
        bounds: tuple[float, float] | None
        if window is not None:
            lo, hi = float(window[0]), float(window[1])
            if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
                raise ValueError(f"window must be finite with start <= end, got {window}")
            bounds, kind = (lo, hi), "given"
        elif n_jobs and float(jobs.submit.max()) > float(jobs.submit.min()):
            bounds, kind = (float(jobs.submit.min()), float(jobs.submit.max())), "arrivals"
        else:
            bounds, kind = run_window, "run"
        self.result = result
        self.jobs: JobTable = jobs
        #: the estimates JTTED compares with the true durations
        self.estimates: FloatArray = est
        #: the recorder's sample times
        self.times: FloatArray = times
        #: ``[first sample, end of run]`` (None: no samples)
        self.run_window = run_window
        #: the measurement window ``(start, end)`` (None: no samples and no spread of arrivals)
        self.bounds = bounds
        #: where the window came from: ``"given"``, ``"arrivals"`` or ``"run"``
        self.window_kind = kind
        #: the cluster series from the window's start
        self.timeline = Timeline(result, bounds[0] if bounds is not None else None)

    @cached_property
    def weights(self) -> FloatArray:
        """Seconds each timeline sample holds inside the window (an empty array without a window)."""
        if self.bounds is None:
            return np.zeros(0)
        return self.timeline.weights(*self.bounds)

    @cached_property
    def training(self) -> BoolArray:
        """Training jobs."""
        mask: BoolArray = self.jobs.kind == JobKind.TRAINING
        return mask

    @cached_property
    def finished(self) -> BoolArray:
        """Jobs that finished."""
        mask: BoolArray = self.result.status == JobStatus.FINISHED
        return mask

    @cached_property
    def finished_training(self) -> BoolArray:
        """Training jobs that finished."""
        return self.finished & self.training
