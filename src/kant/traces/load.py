"""Inference load: request logs and request-rate series, held column-wise like :class:`~kant.model.job.JobTable`.

Load traces (Azure LLM, ServeGen, Alibaba GenAI) describe the traffic an inference service must
absorb, not jobs to place. They come in two shapes, both held in a :class:`LoadSeries`:

* ``kind == "requests"``: one row per request; ``time`` is its arrival, ``input_tokens`` /
  ``output_tokens`` its sizes (-1 when unknown) and ``duration`` its measured service time in
  seconds (``nan`` when unknown). ``rate`` is ``nan``.
* ``kind == "rate"``: one row per sample of a request rate; ``rate`` (requests/s) holds from
  ``time`` for ``window`` seconds (or, when ``window`` is 0, until the stream's next sample).
  ``cv`` is the inter-arrival coefficient of variation in that window when the trace gives it.

``stream`` says which client, model or request type a row belongs to (a code into
``stream_names``), so one series can carry many services. Times are seconds from the trace origin
(``origin_epoch``, POSIX seconds, when the trace has real dates). Rows are sorted by time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = ["LOAD_COLUMNS", "LoadKind", "LoadSeries"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

LoadKind = Literal["requests", "rate"]

#: per-row columns of a :class:`LoadSeries`, in schema order
LOAD_COLUMNS = ("time", "rate", "stream", "input_tokens", "output_tokens", "duration", "cv")


@dataclass(frozen=True, eq=False)
class LoadSeries:
    """Requests or rate samples of one or more streams; row ``i`` is one request or one sample."""

    kind: LoadKind
    time: FloatArray
    rate: FloatArray
    stream: IntArray
    input_tokens: IntArray
    output_tokens: IntArray
    duration: FloatArray
    cv: FloatArray
    stream_names: tuple[str, ...] = ("default",)
    window: float = 0.0
    source: str = ""
    origin_epoch: float | None = None
    n_rows: int = field(init=False)

    def __post_init__(self) -> None:
        if self.kind not in ("requests", "rate"):
            raise ValueError(f"LoadSeries.kind must be 'requests' or 'rate', got {self.kind!r}")
        n = len(self.time)
        for name in LOAD_COLUMNS:
            arr = getattr(self, name)
            if arr.shape != (n,):
                raise ValueError(f"LoadSeries.{name} has shape {arr.shape}, expected ({n},)")
            arr.setflags(write=False)
        if n and (int(self.stream.min()) < 0 or int(self.stream.max()) >= len(self.stream_names)):
            raise ValueError("LoadSeries.stream has a code outside stream_names")
        if self.window < 0 or not math.isfinite(self.window):
            raise ValueError("LoadSeries.window must be a finite number >= 0")
        object.__setattr__(self, "n_rows", n)

    def __len__(self) -> int:
        return self.n_rows

    # --- summaries ------------------------------------------------------------------------------
    @property
    def span(self) -> float:
        """Seconds from the first row to the end of the last request or window."""
        if not self.n_rows:
            return 0.0
        end = float(self.time.max()) + (self.window if self.kind == "rate" else 0.0)
        return end - float(self.time.min())

    def total_requests(self) -> float:
        """Requests in the series: rows for a request log, the integral of the rate for a rate series."""
        if self.kind == "requests":
            return float(self.n_rows)
        return float(np.sum(self.rate * self._hold_times()))

    def _hold_times(self) -> FloatArray:
        """How long each rate sample holds: ``window``, or until the same stream's next sample."""
        if self.window > 0:
            return np.full(self.n_rows, self.window)
        hold = np.zeros(self.n_rows)
        for code in np.unique(self.stream):
            idx = np.flatnonzero(self.stream == code)
            t = self.time[idx]
            if len(idx) > 1:
                gaps = np.diff(t)
                hold[idx[:-1]] = gaps
                hold[idx[-1]] = float(np.median(gaps))
        return hold

    def rate_series(self, bin_s: float = 60.0, stream: str | None = None) -> tuple[FloatArray, FloatArray]:
        """Requests/s in consecutive bins of ``bin_s`` seconds from the first row: ``(bin_starts, rps)``.

        For a request log this counts arrivals; for a rate series it spreads each sample's requests
        over the time it holds. ``stream`` restricts to one stream by name.
        """
        if bin_s <= 0:
            raise ValueError("bin_s must be positive")
        sel = np.ones(self.n_rows, dtype=bool)
        if stream is not None:
            if stream not in self.stream_names:
                raise ValueError(f"unknown stream {stream!r}")
            sel = self.stream == self.stream_names.index(stream)
        if not sel.any():
            return np.zeros(0), np.zeros(0)
        t = self.time[sel]
        t0 = float(t.min())
        if self.kind == "requests":
            n_bins = int((float(t.max()) - t0) // bin_s) + 1  # the last arrival needs a bin of its own
            starts = np.asarray(t0 + bin_s * np.arange(n_bins), dtype=np.float64)
            counts = np.bincount(((t - t0) // bin_s).astype(np.int64), minlength=n_bins)[:n_bins]
            return starts, np.asarray(counts / bin_s, dtype=np.float64)
        hold = self._hold_times()[sel]
        r = self.rate[sel]
        n_bins = max(1, math.ceil((float((t + hold).max()) - t0) / bin_s - 1e-9))
        starts = np.asarray(t0 + bin_s * np.arange(n_bins), dtype=np.float64)
        # The summed rate is piecewise constant between sample starts and ends, so its integral is
        # piecewise linear: integrate at the event times, then interpolate at the bin edges.
        events = np.concatenate([t, t + hold])
        deltas = np.concatenate([r, -r])
        order = np.argsort(events, kind="stable")
        ev = events[order]
        level = np.cumsum(deltas[order])
        integral = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(ev))])
        edges = t0 + bin_s * np.arange(n_bins + 1)
        reqs = np.diff(np.interp(edges, ev, integral))
        return starts, np.asarray(reqs / bin_s, dtype=np.float64)
