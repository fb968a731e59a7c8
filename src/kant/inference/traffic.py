"""Traffic of an inference service over a simulation: a load trace binned, then stretched.

**Base series.** A :class:`~kant.traces.load.LoadSeries` (optionally only some of its streams) is
binned into ``bin_s``-second bins from its first row: a request log counts arrivals per bin, a rate
series spreads each sample's requests over the time it holds (``LoadSeries.rate_series``). Only whole
bins are kept (a trailing partial bin would read as a dip). For request logs the mean tokens per
request of each bin (``input``, ``output`` or ``total``) is kept too, for services whose capacity is
in tokens/s; empty bins get the trace-wide mean.

**Stretching** to ``n`` bins (the simulation's length), in this order, all randomness from one
``numpy.random.default_rng(seed)``:

1. ``repeat``: ``none`` (the trace once, then no traffic), ``tile`` (copies back to back) or
   ``shuffle`` (copies back to back, each rotated by a random offset drawn uniformly from the
   possible offsets, so that a one-hour trace does not repeat the same hour 2,600 times; offsets are
   whole days when the base series is at least two days long, keeping its daily pattern in phase,
   and whole bins otherwise).
2. ``diurnal_amplitude`` A and ``peak_hour`` h*: each bin is multiplied by
   ``1 + A cos(2 pi (h - h*) / 24)`` where ``h`` is the hour of day of the bin's midpoint (simulation
   time 0 is midnight). The factor averages 1 over a day.
3. ``weekend_factor`` w: bins on days 5 and 6 of each week (day 0 = simulation time 0) are multiplied
   by w.
4. ``noise`` s: each bin is multiplied by an independent log-normal factor ``exp(s Z - s^2 / 2)``
   (mean 1).
5. ``scale`` multiplies every bin; or ``mean_rps`` rescales the result so that its mean over the
   ``n`` bins is exactly that rate.

Tokens per request follow the same repetition (not the multipliers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from kant.traces.load import LoadSeries

__all__ = ["DAY", "RateFunction", "StretchSpec", "base_bins", "stretch"]

FloatArray = npt.NDArray[np.float64]
DAY = 86_400.0

TokenField = Literal["input", "output", "total"]


@dataclass(frozen=True)
class StretchSpec:
    """How to turn a base series into the simulation's traffic (see the module docstring)."""

    repeat: Literal["none", "tile", "shuffle"] = "shuffle"
    scale: float = 1.0
    mean_rps: float | None = None
    diurnal_amplitude: float = 0.0
    peak_hour: float = 14.0
    weekend_factor: float = 1.0
    noise: float = 0.0
    seed: int = 0


@dataclass(frozen=True)
class RateFunction:
    """Requests/s as a step function: ``rate[k]`` holds on ``[start + k bin_s, start + (k+1) bin_s)``;
    zero outside. ``tokens[k]`` is the mean tokens per request in bin ``k`` (None when unknown)."""

    start: float
    bin_s: float
    rate: FloatArray
    tokens: FloatArray | None = None

    @property
    def end(self) -> float:
        return self.start + self.bin_s * len(self.rate)

    @property
    def edges(self) -> FloatArray:
        return self.start + self.bin_s * np.arange(len(self.rate) + 1, dtype=np.float64)

    def integral(self, t: npt.ArrayLike) -> FloatArray:
        """Requests arrived from ``start`` to time(s) ``t``."""
        x = np.clip(np.asarray(t, dtype=np.float64), self.start, self.end)
        pos = (x - self.start) / self.bin_s
        k = np.minimum(np.floor(pos).astype(np.int64), len(self.rate) - 1) if len(self.rate) else pos.astype(np.int64)
        cum = np.concatenate(([0.0], np.cumsum(self.rate) * self.bin_s))
        if not len(self.rate):
            return np.zeros_like(x)
        out: FloatArray = cum[k] + self.rate[k] * (x - (self.start + k * self.bin_s))
        return out

    def mean(self, t0: npt.ArrayLike, t1: npt.ArrayLike) -> FloatArray:
        """Mean rate over ``[t0, t1)`` (element-wise; 0 for an empty interval)."""
        a = np.asarray(t0, dtype=np.float64)
        b = np.asarray(t1, dtype=np.float64)
        span = b - a
        out: FloatArray = np.where(span > 0, (self.integral(b) - self.integral(a)) / np.where(span > 0, span, 1.0), 0.0)
        return out

    def bin_of(self, t: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Bin index of time(s) ``t`` (clipped to the series)."""
        k = np.floor((np.asarray(t, dtype=np.float64) - self.start) / self.bin_s).astype(np.int64)
        return np.clip(k, 0, max(len(self.rate) - 1, 0))


def _select(series: LoadSeries, streams: tuple[str, ...] | None) -> LoadSeries:
    if not streams:
        return series
    unknown = [s for s in streams if s not in series.stream_names]
    if unknown:
        raise ValueError(f"unknown stream {unknown[0]!r}; the trace has {len(series.stream_names)} stream(s), "
                         f"e.g. {', '.join(series.stream_names[:5])}")
    codes = [series.stream_names.index(s) for s in streams]
    keep = np.isin(series.stream, codes)
    return LoadSeries(
        kind=series.kind,
        time=series.time[keep],
        rate=series.rate[keep],
        stream=series.stream[keep],
        input_tokens=series.input_tokens[keep],
        output_tokens=series.output_tokens[keep],
        duration=series.duration[keep],
        cv=series.cv[keep],
        stream_names=series.stream_names,
        window=series.window,
        source=series.source,
        origin_epoch=series.origin_epoch,
    )


def base_bins(series: LoadSeries, bin_s: float, *, streams: tuple[str, ...] | None = None,
              token_field: TokenField = "output") -> tuple[FloatArray, FloatArray | None]:
    """The base series: requests/s per whole ``bin_s`` bin, and mean tokens per request per bin
    (request logs with token counts only; else None)."""
    if bin_s <= 0:
        raise ValueError("bin_s must be positive")
    sel = _select(series, streams)
    if len(sel) == 0:
        raise ValueError("the trace has no rows for the selected streams")
    _, rate = sel.rate_series(bin_s)
    whole = max(1, math.floor(sel.span / bin_s + 1e-9))
    rate = np.asarray(rate[:whole], dtype=np.float64)
    tokens: FloatArray | None = None
    if sel.kind == "requests":
        if token_field == "input":
            tok = sel.input_tokens.astype(np.float64)
        elif token_field == "output":
            tok = sel.output_tokens.astype(np.float64)
        else:
            tok = sel.input_tokens.astype(np.float64) + sel.output_tokens.astype(np.float64)
        known = (sel.input_tokens >= 0) if token_field == "input" else (sel.output_tokens >= 0)
        if token_field == "total":
            known = (sel.input_tokens >= 0) & (sel.output_tokens >= 0)
        if known.any():
            t0 = float(sel.time.min())
            k = ((sel.time[known] - t0) // bin_s).astype(np.int64)
            inside = k < len(rate)
            n_bins = len(rate)
            s = np.bincount(k[inside], weights=tok[known][inside], minlength=n_bins)[:n_bins]
            n = np.bincount(k[inside], minlength=n_bins)[:n_bins]
            overall = float(tok[known].mean())
            tokens = np.where(n > 0, s / np.maximum(n, 1), overall)
    return rate, tokens


def _repeat(base: FloatArray, n: int, mode: str, bin_s: float,
            rng: np.random.Generator) -> tuple[FloatArray, npt.NDArray[np.int64]]:
    """The stretched series and, for each output bin, the base bin it came from (-1 = none)."""
    b = len(base)
    idx = np.arange(n, dtype=np.int64)
    if mode == "none":
        src = np.where(idx < b, idx, -1)
    elif mode == "tile":
        src = idx % b
    else:
        copies = -(-n // b)
        day_bins = round(DAY / bin_s)
        if b * bin_s >= 2 * DAY and day_bins >= 1 and abs(day_bins * bin_s - DAY) < 1e-6:
            days = b // day_bins
            offsets = rng.integers(0, max(days, 1), size=copies) * day_bins
        else:
            offsets = rng.integers(0, b, size=copies)
        src = (idx % b + offsets[idx // b]) % b
    out = np.where(src >= 0, base[np.maximum(src, 0)], 0.0)
    return out, src


def stretch(base: FloatArray, tokens: FloatArray | None, *, start: float, bin_s: float, n_bins: int,
            spec: StretchSpec) -> RateFunction:
    """Stretch a base series to ``n_bins`` bins starting at ``start`` (see the module docstring)."""
    if len(base) == 0:
        raise ValueError("empty base series")
    if n_bins < 1:
        raise ValueError("n_bins must be >= 1")
    rng = np.random.default_rng(spec.seed)
    rate, src = _repeat(np.asarray(base, dtype=np.float64), n_bins, spec.repeat, bin_s, rng)
    mid = start + bin_s * (np.arange(n_bins) + 0.5)
    if spec.diurnal_amplitude:
        hour = np.mod(mid, DAY) / 3600.0
        rate = rate * (1.0 + spec.diurnal_amplitude * np.cos(2 * np.pi * (hour - spec.peak_hour) / 24.0))
    if spec.weekend_factor != 1.0:
        day = np.floor(mid / DAY).astype(np.int64) % 7
        rate = rate * np.where(day >= 5, spec.weekend_factor, 1.0)
    if spec.noise > 0:
        z = rng.standard_normal(n_bins)
        rate = rate * np.exp(spec.noise * z - spec.noise**2 / 2)
    if spec.mean_rps is not None:
        m = float(rate.mean())
        rate = rate * (spec.mean_rps / m) if m > 0 else rate
    else:
        rate = rate * spec.scale
    tok = None
    if tokens is not None:
        fill = float(np.mean(tokens))
        tok = np.where(src >= 0, np.asarray(tokens, dtype=np.float64)[np.maximum(src, 0)], fill)
    return RateFunction(start=float(start), bin_s=float(bin_s), rate=np.maximum(rate, 0.0), tokens=tok)
