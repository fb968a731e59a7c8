"""Jobs the live service holds for their dependencies (``kant submit --dependency afterok:41``).

A job with a dependency that is not met yet stays out of the scheduler: its row is 'pending' with the
reason ``Dependency: waiting for afterok:41`` (or ``DependencyNeverSatisfied: ...``), and it joins the
queue, with its original submit time, once every clause is met (the rule is
:func:`kant.model.deps.edge_state`, the simulator's). A dependency that can never be met cancels the
job if it asked for ``kill_on_invalid_dep``; else it waits until cancelled.

What a job it depends on has done comes from the loop (each first start and each end, :meth:`outcome`)
and, for jobs that ended before, from the database (``lookup``). The outcomes of this turn are kept
until the turn is written (:meth:`flushed`), as the database does not know them yet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kant.model.deps import NEVER_SATISFIED, DepType, EdgeState, Outcome, edge_state, parse_dependency
from kant.service.live.arrival import Arrival

__all__ = ["HeldJob", "LiveDeps", "outcome_of_state"]

#: the end states that count as success (afterok); every other end state is 'not ok'
_OK_STATES = frozenset({"finished"})


def outcome_of_state(state: str, started: bool) -> Outcome:
    """A stored job's outcome from its state (and whether it ever started)."""
    if state == "pending":
        return Outcome.STARTED if started else Outcome.WAITING
    if state == "running":
        return Outcome.STARTED
    return Outcome.OK if state in _OK_STATES else Outcome.NOTOK


@dataclass(slots=True)
class HeldJob:
    arrival: Arrival
    open: list[tuple[DepType, int]] = field(default_factory=list)  # clauses not yet met: (type, job id)
    never: str | None = None  # why its dependency can never be met

    def reason(self) -> str:
        if self.never is not None:
            return self.never
        return "Dependency: waiting for " + ", ".join(f"{k.name.lower()}:{j}" for k, j in self.open)


class LiveDeps:
    """The held jobs and who waits for whom (job ids). One thread (the loop's) uses it."""

    def __init__(self) -> None:
        self.held: dict[int, HeldJob] = {}
        self.waiters: dict[int, list[int]] = {}  # job id -> the held jobs with a clause on it
        self.recent: dict[int, Outcome] = {}  # outcomes of this turn (not yet in the database)
        #: a stored job's outcome, from the database (set by the loop): job ids -> {id: outcome}
        self.lookup: Callable[[list[int]], dict[int, Outcome]] = lambda ids: {}

    def flushed(self) -> None:
        """The turn was written: the database knows this turn's outcomes."""
        self.recent.clear()

    def hold(self, arrival: Arrival, current: Callable[[int], Outcome | None]) -> HeldJob | None:
        """Hold ``arrival`` if its dependency is not met yet (its clauses settled by what the jobs it names
        have done: ``current`` knows the active ones, else this turn's outcomes, else the database);
        None if it may be queued now."""
        text = arrival.job.dependency
        if not text:
            return None
        edges = [(c.kind, int(j)) for c in parse_dependency(text) for j in c.jobs]
        ids = sorted({j for _, j in edges})
        known: dict[int, Outcome] = {}
        unknown = []
        for j in ids:
            out = self.recent.get(j)
            if out is None:
                out = current(j)
            if out is None:
                unknown.append(j)
            else:
                known[j] = out
        if unknown:
            found = self.lookup(unknown)
            for j in unknown:
                known[j] = found.get(j, Outcome.NOTOK)  # a job that no longer exists never succeeds
        held = HeldJob(arrival)
        for kind, j in edges:
            state = edge_state(kind, known[j])
            if state == EdgeState.WAIT:
                held.open.append((kind, j))
            elif state == EdgeState.NEVER and held.never is None:
                held.never = _never(kind, j, known[j])
        if not held.open and held.never is None:
            return None
        self.held[arrival.id] = held
        for _, j in held.open:
            self.waiters.setdefault(j, []).append(arrival.id)
        return held

    def outcome(self, job_id: int, outcome: Outcome) -> tuple[list[HeldJob], list[HeldJob], list[HeldJob]]:
        """``job_id`` got to ``outcome``: the held jobs to queue now, to cancel now (kill_on_invalid_dep),
        and whose reason changed (to write)."""
        self.recent[job_id] = outcome
        waiting = self.waiters.get(job_id)
        if not waiting:
            return [], [], []
        queue: list[HeldJob] = []
        kill: list[HeldJob] = []
        changed: list[HeldJob] = []
        keep: list[int] = []
        for held_id in list(waiting):
            held = self.held.get(held_id)
            if held is None:
                continue
            settled = False
            for edge in [e for e in held.open if e[1] == job_id]:
                state = edge_state(edge[0], outcome)
                if state == EdgeState.WAIT:
                    continue
                held.open.remove(edge)
                settled = True
                if state == EdgeState.NEVER and held.never is None:
                    held.never = _never(edge[0], job_id, outcome)
            if any(e[1] == job_id for e in held.open):
                keep.append(held_id)
            if not settled:
                continue
            if held.never is not None and held.arrival.job.kill_on_invalid_dep:
                kill.append(self._release(held_id))
            elif not held.open and held.never is None:
                queue.append(self._release(held_id))
            else:
                changed.append(held)
        if keep:
            self.waiters[job_id] = keep
        else:
            self.waiters.pop(job_id, None)
        return queue, kill, changed

    def cancel(self, job_id: int) -> HeldJob | None:
        """A held job is cancelled by its owner: forget it."""
        return self._release(job_id) if job_id in self.held else None

    def _release(self, job_id: int) -> HeldJob:
        held = self.held.pop(job_id)
        for _, j in held.open:
            lst = self.waiters.get(j)
            if lst is not None and job_id in lst:
                lst.remove(job_id)
                if not lst:
                    del self.waiters[j]
        return held

    def held_ids(self) -> Iterable[int]:
        return self.held.keys()


def _never(kind: DepType, job_id: int, outcome: Outcome) -> str:
    word = "finished" if outcome == Outcome.OK else "did not finish"
    return f"{NEVER_SATISFIED}: {kind.name.lower()}:{job_id} (job {job_id} {word})"
