"""The capacity returns of a cluster state's release log, replayed once for every failure memo.

Each :class:`~kant.framework.memo.FailedRequests` (the blocking allocate's, backfill's) forgets a
request once the returns since it failed gave its *kind* (GPUs per worker, allowed GPU types, whether
any return helps) the worker slots it lacked (:func:`kant.model.fit.slots_gained`). The memos of one
scheduler read the same log, so they share one :class:`ReleaseReplay`: a running total of slots
returned per kind that some memo waits on, advanced over the new returns once, by the first memo
that refreshes, whatever the number of memos. A memo keeps, per remembered request, the total at
which it has gained what it lacked.
"""

from __future__ import annotations

from kant.model.fit import slots_gained
from kant.model.state import ClusterState

__all__ = ["Kind", "ReleaseReplay"]

#: what decides whether a capacity return helps a request: (GPUs per worker, allowed cluster GPU
#: types or None for any, asks for CPU or memory or a GPU share: any return on an allowed node helps)
Kind = tuple[int, frozenset[int] | None, bool]


class ReleaseReplay:
    """Slots returned so far per watched kind, from one state's release log.

    ``totals[kind]`` grows by the slots each replayed return gives the kind, from when the kind was
    first watched (its origin is arbitrary: a reader compares differences). ``grown`` is bumped
    whenever some total grows, so a reader that saw the same ``grown`` knows no total moved."""

    __slots__ = ("_state", "_watchers", "grown", "seen", "totals")

    def __init__(self) -> None:
        self._state: ClusterState | None = None  # the state whose log is replayed
        self.seen = 0  # release count replayed up to
        self.totals: dict[Kind, int] = {}
        self._watchers: dict[Kind, int] = {}  # kind -> readers waiting on its total
        self.grown = 0

    def watch(self, kind: Kind) -> None:
        """A reader waits on ``kind``'s total: it is kept from now on."""
        n = self._watchers.get(kind, 0)
        self._watchers[kind] = n + 1
        if not n:
            self.totals.setdefault(kind, 0)

    def unwatch(self, kind: Kind) -> None:
        """A reader no longer waits on ``kind`` (when no one does, its total stops moving)."""
        n = self._watchers[kind] - 1
        if n:
            self._watchers[kind] = n
        else:
            del self._watchers[kind]

    def advance(self, state: ClusterState) -> None:
        """Replay the returns logged since the last advance onto every watched kind's total."""
        end = state.release_count
        seen = self.seen
        self._state = state
        if seen >= end:
            return
        self.seen = end
        start = state.release_log_start
        if not self._watchers or seen < start:
            # (behind the trimmed log: every memo waiting on a total saw no later than ``seen``, so
            # it starts afresh at its next refresh, before it reads a total)
            return
        new = state.release_log[seen - start :]
        node_types = state.node_types
        totals = self.totals
        grew = False
        for kind in self._watchers:
            gain = slots_gained(new, node_types, *kind)
            if gain:
                totals[kind] += gain
                grew = True
        if grew:
            self.grown += 1

    def total_at(self, kind: Kind, at: int) -> int:
        """``kind``'s total as of release count ``at`` (at most what was replayed): the total now,
        less what the returns replayed since ``at`` gave it (``kind`` watched, or about to be: a kind
        no one watched has not moved since, and the difference is what counts)."""
        total = self.totals.get(kind, 0)
        state = self._state
        if state is not None and at < self.seen:
            start = state.release_log_start
            if at >= start:  # (else the reader starts afresh at its next refresh: any base will do)
                total -= slots_gained(state.release_log[at - start : self.seen - start], state.node_types, *kind)
        return total
