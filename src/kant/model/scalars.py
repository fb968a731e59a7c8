"""One-element reads and writes of a NumPy array at Python speed: a memoryview of its buffer.

``a[i] = x`` and ``a.item(i)`` on an array cost about three times what the same access through a
memoryview of its buffer costs (NumPy's scalar machinery against a C struct pack); the per-event
bookkeeping (the cluster state, the recorder, the simulator) does several per job start and stop.
The view shares the array's buffer: a write through either is seen by both. It stays bound to that
buffer, so whoever replaces the array must take a new view.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, cast

import numpy.typing as npt

__all__ = ["ScalarView", "scalar_view"]

T = TypeVar("T")


class ScalarView(Protocol[T]):
    """What a memoryview of a 1-D array gives: its elements as Python ints or floats, one at a time."""

    def __getitem__(self, index: int, /) -> T: ...

    def __setitem__(self, index: int, value: T, /) -> None: ...

    def __len__(self) -> int: ...


def scalar_view(array: npt.NDArray[Any], kind: type[T]) -> ScalarView[T]:
    """A memoryview of ``array`` (1-D, C-contiguous; ``kind``: ``int`` or ``float``, its elements' Python
    type, for the type checker) for one-element reads and writes."""
    if array.ndim != 1 or not array.flags.c_contiguous:
        raise ValueError("a scalar view needs a 1-D C-contiguous array")
    return cast(ScalarView[T], memoryview(array))  # type: ignore[arg-type]
