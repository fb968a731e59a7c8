"""Version-stamped caches: one value kept with the stamp it was computed at.

A cache of something derived from a changing object (the free capacity of a
:class:`~kant.model.state.ClusterState`, the live loop's state) is valid while it is the same object,
by identity, and the object's change counter (its stamp) has not moved. That test is written here
once: a holder keeps a :class:`Stamped` and asks :meth:`Stamped.fresh` before using the value.

    cache = Stamped[list[int]]([])
    if not cache.fresh(state, state.version):
        cache.keep(state, state.version, compute(state))
    keys = cache.value
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["Stamped"]

T = TypeVar("T")

_NEVER = object()  # the stamp of a cache that holds nothing yet (equal to no stamp a caller gives)


class Stamped(Generic[T]):
    """A value and the (source, stamp) it was computed from; ``value`` is the last one kept (or the
    initial value, which is never fresh)."""

    __slots__ = ("_source", "_stamp", "value")

    def __init__(self, value: T) -> None:
        self._source: object = None
        self._stamp: object = _NEVER
        self.value = value

    def fresh(self, source: object, stamp: Hashable) -> bool:
        """Whether the value was computed from this very ``source`` at this ``stamp``."""
        return self._source is source and self._stamp == stamp

    def keep(self, source: object, stamp: Hashable, value: T) -> T:
        """Remember ``value`` as computed from ``source`` at ``stamp``; returns it."""
        self._source, self._stamp, self.value = source, stamp, value
        return value

    def forget(self) -> None:
        """Make the next :meth:`fresh` false (the value stays until the next :meth:`keep`)."""
        self._source, self._stamp = None, _NEVER
