"""Elastic gangs: a training job that may run on between ``min_workers`` and ``max_workers`` workers.

A *worker* is the job's per-worker GPU unit: ``gpus_per_worker`` whole GPUs on one node (elastic
jobs ask for whole GPUs; a GPU share cannot be elastic). A job running on ``k`` workers holds
``k x gpus_per_worker`` GPUs. Its ``workers`` column keeps its meaning for every job: the gang size it
asks for when it starts; for an elastic job ``min_workers <= workers <= max_workers``, and its
``duration`` (and ``estimate``) is the run time *at* ``workers`` workers, its reference size.

How fast a size runs (:meth:`ElasticBounds.speed`): linear by default (``k`` workers do ``k /
workers`` of the reference size's work per second); a job may give a speed-up table instead,
``{size: throughput}`` at two or more sizes (any unit: only ratios count), interpolated linearly
between the sizes it names and held flat beyond its largest (more workers do not help) and
scaled down linearly below its smallest.

A job without bounds is rigid and behaves exactly as it always has; a table with no elastic job has
no :class:`ElasticSpec` at all (``JobTable.elastic is None``), so nothing costs anything then.
What the scheduler does with the bounds (grow into idle GPUs, shrink instead of being evicted) is
:mod:`kant.actions.elastic`; what a resize costs in the simulator is
:attr:`kant.sim.execution.ExecutionModel.resize_cost_s`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ElasticBounds", "ElasticSpec", "check_bounds", "check_row", "format_speedup", "parse_speedup"]

IntArray = npt.NDArray[np.int64]


def check_bounds(workers: int, min_workers: int | None, max_workers: int | None, gpu_milli: int = 1000) -> str | None:
    """Why these bounds are invalid (a one-line reason naming the field), or None if they are valid.
    Both bounds or neither: a job gives ``min_workers`` and ``max_workers`` together."""
    if min_workers is None and max_workers is None:
        return None
    if min_workers is None:
        return "min_workers: missing (an elastic job gives both min_workers and max_workers)"
    if max_workers is None:
        return "max_workers: missing (an elastic job gives both min_workers and max_workers)"
    if min_workers < 1:
        return f"min_workers: must be >= 1, got {min_workers}"
    if max_workers < min_workers:
        return f"max_workers: must be >= min_workers ({min_workers}), got {max_workers}"
    if not min_workers <= workers <= max_workers:
        return f"workers: must be within [min_workers, max_workers] = [{min_workers}, {max_workers}], got {workers}"
    if gpu_milli < 1000:
        return "min_workers: an elastic job asks for whole GPUs per worker (gpu_milli 1000)"
    return None


def parse_speedup(text: str | Mapping[int, float] | None) -> tuple[tuple[int, float], ...] | None:
    """A speed-up table from ``"1:1,2:1.8,4:3.1"`` (or a mapping): ``((size, throughput), ...)`` by
    size; None for an empty text. ValueError naming the bad item."""
    if text is None:
        return None
    if isinstance(text, Mapping):
        items: list[tuple[int, float]] = [(int(k), float(v)) for k, v in text.items()]
    else:
        s = text.strip()
        if not s:
            return None
        items = []
        for part in s.split(","):
            head, sep, tail = part.partition(":")
            try:
                if not sep:
                    raise ValueError
                items.append((int(head), float(tail)))
            except ValueError:
                raise ValueError(f"speedup: {part.strip()!r} is not SIZE:THROUGHPUT (e.g. 1:1,2:1.8)") from None
    if len(items) < 2:
        raise ValueError("speedup: give at least two SIZE:THROUGHPUT points")
    items.sort()
    for k, (size, value) in enumerate(items):
        if size < 1:
            raise ValueError(f"speedup: size must be >= 1, got {size}")
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"speedup: throughput at size {size} must be a positive number, got {value}")
        if k and size == items[k - 1][0]:
            raise ValueError(f"speedup: size {size} given twice")
    return tuple(items)


def check_row(workers: int, min_workers: int | None, max_workers: int | None, gpu_milli: int,
              speedup: str | None) -> tuple[int | None, int | None, tuple[tuple[int, float], ...] | None, str | None]:
    """A trace row's elastic fields, as every reader takes them: its bounds, its speed-up table and
    why they are invalid (None when valid: a one-line reason starting with the field's name). A table
    without bounds gives the job its size as both (it runs at that size: the table changes nothing)."""
    why = check_bounds(workers, min_workers, max_workers, gpu_milli)
    table = None
    if why is None and speedup:
        try:
            table = parse_speedup(speedup)
        except ValueError as exc:
            why = str(exc)
        if why is None and min_workers is None:
            min_workers = max_workers = workers
    return min_workers, max_workers, table, why


def format_speedup(table: tuple[tuple[int, float], ...] | None) -> str | None:
    """``"1:1,2:1.8"`` for a speed-up table (None for none): the form :func:`parse_speedup` reads."""
    return None if table is None else ",".join(f"{k}:{v:g}" for k, v in table)


@dataclass(frozen=True, slots=True)
class ElasticBounds:
    """One elastic job: its bounds, its reference size (``workers``) and its speed-up table."""

    min_workers: int
    max_workers: int
    workers: int
    speedup: tuple[tuple[int, float], ...] | None = None

    def throughput(self, size: int) -> float:
        """Work per second at ``size`` workers, in the unit of the table (linear: ``size``)."""
        table = self.speedup
        if table is None:
            return float(size)
        if size >= table[-1][0]:
            return table[-1][1]
        if size <= table[0][0]:
            return float(table[0][1] * size / table[0][0])
        for (s0, v0), (s1, v1) in itertools.pairwise(table):
            if s0 <= size <= s1:
                return v0 + (v1 - v0) * (size - s0) / (s1 - s0)
        raise AssertionError("unreachable")  # pragma: no cover

    def speed(self, size: int) -> float:
        """Speed at ``size`` workers relative to the reference size ``workers`` (1.0 there)."""
        return self.throughput(size) / self.throughput(self.workers)


@dataclass(frozen=True)
class ElasticSpec:
    """Elastic bounds of a :class:`~kant.model.job.JobTable`'s rows (rigid rows: min = max = workers,
    no table); None on a table where no job is elastic."""

    min_workers: IntArray
    max_workers: IntArray
    speedup: tuple[tuple[tuple[int, float], ...] | None, ...]

    def __post_init__(self) -> None:
        n = len(self.speedup)
        for arr in (self.min_workers, self.max_workers):
            if arr.shape != (n,):
                raise ValueError(f"ElasticSpec: a column has shape {arr.shape}, expected ({n},)")
            arr.setflags(write=False)

    @classmethod
    def of(cls, workers: npt.ArrayLike, min_workers: Sequence[int | None], max_workers: Sequence[int | None],
           speedup: Sequence[tuple[tuple[int, float], ...] | None] | None = None) -> ElasticSpec | None:
        """From per-row bounds (None: rigid); None when no row is elastic."""
        w = np.asarray(workers, dtype=np.int64)
        lo = np.array([w[i] if v is None else v for i, v in enumerate(min_workers)], dtype=np.int64)
        hi = np.array([w[i] if v is None else v for i, v in enumerate(max_workers)], dtype=np.int64)
        sp = tuple(speedup) if speedup is not None else (None,) * len(w)
        if not (np.any(lo != w) or np.any(hi != w) or any(s is not None for s in sp)):
            return None
        return cls(lo, hi, sp)

    def __len__(self) -> int:
        return len(self.speedup)

    def is_elastic(self, row: int) -> bool:
        return bool(self.min_workers[row] != self.max_workers[row]) or self.speedup[row] is not None

    def bounds(self, row: int, workers: int) -> ElasticBounds | None:
        """The row's bounds, or None for a rigid row."""
        if not self.is_elastic(row):
            return None
        return ElasticBounds(int(self.min_workers[row]), int(self.max_workers[row]), workers, self.speedup[row])

    def take(self, rows: IntArray) -> ElasticSpec:
        return ElasticSpec(self.min_workers[rows].copy(), self.max_workers[rows].copy(),
                           tuple(self.speedup[i] for i in rows.tolist()))

    def equals(self, other: ElasticSpec | None) -> bool:
        return other is not None and (np.array_equal(self.min_workers, other.min_workers)
                and np.array_equal(self.max_workers, other.max_workers) and self.speedup == other.speedup)
