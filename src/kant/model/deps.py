"""Job dependencies (Slurm's ``--dependency``): a job waits until other jobs have started or ended.

A dependency is written as Slurm writes it: clauses joined by ``,`` (all must hold), each a type and
one or more job ids joined by ``:`` -- ``afterok:41:42,afterany:7``. The types:

* ``after``: each named job has started (or ended without starting: cancelled, refused);
* ``afterok``: each named job completed successfully;
* ``afternotok``: each named job ended without success (failed, cancelled, timed out, refused);
* ``afterany``: each named job ended, however.

In a trace the ids are job names (``JobTable.names``); in the live service they are job ids.

This module holds the rule, once, for the simulator and the live service: :func:`edge_state` says
what a job's :class:`Outcome` means for one clause, and :class:`DependencyGate` tracks a whole job
table's dependency graph (which jobs may be queued now, which can never run). A dependency that can
no longer be met (``afterok`` on a job that failed) leaves its job waiting with the reason
``DependencyNeverSatisfied``, or cancels it when the job asked for ``kill_on_invalid_dep``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

__all__ = [
    "Clause",
    "DepType",
    "DependencyGate",
    "EdgeState",
    "JobDeps",
    "Outcome",
    "edge_state",
    "find_cycle",
    "format_dependency",
    "parse_dependency",
]

BoolArray = npt.NDArray[np.bool_]

#: the reason a job whose dependency can never be met shows (Slurm's word)
NEVER_SATISFIED = "DependencyNeverSatisfied"


class DepType(IntEnum):
    AFTER = 0
    AFTEROK = 1
    AFTERNOTOK = 2
    AFTERANY = 3


_TYPE_WORDS = {t.name.lower(): t for t in DepType}


class Outcome(IntEnum):
    """How far a job that others depend on has got (only ever moves forward)."""

    WAITING = 0  # not started yet
    STARTED = 1  # started at least once, not ended
    OK = 2  # completed successfully
    NOTOK = 3  # ended without success: failed, cancelled, timed out, refused at submit


class EdgeState(IntEnum):
    WAIT = 0
    MET = 1
    NEVER = 2


def edge_state(kind: DepType, outcome: Outcome) -> EdgeState:
    """What ``outcome`` of a named job means for a clause of type ``kind``."""
    if outcome == Outcome.WAITING:
        return EdgeState.WAIT
    if kind == DepType.AFTER:
        return EdgeState.MET
    if outcome == Outcome.STARTED:
        return EdgeState.WAIT
    if kind == DepType.AFTERANY:
        return EdgeState.MET
    if kind == DepType.AFTEROK:
        return EdgeState.MET if outcome == Outcome.OK else EdgeState.NEVER
    return EdgeState.MET if outcome == Outcome.NOTOK else EdgeState.NEVER


@dataclass(frozen=True, slots=True)
class Clause:
    """One clause: ``kind`` on each of ``jobs`` (ids as written)."""

    kind: DepType
    jobs: tuple[str, ...]

    def __str__(self) -> str:
        return ":".join((self.kind.name.lower(), *self.jobs))


def parse_dependency(text: str) -> tuple[Clause, ...]:
    """Parse ``afterok:41:42,afterany:7``; raises ValueError saying what is wrong. Empty -> ()."""
    text = text.strip()
    if not text:
        return ()
    if "?" in text:
        raise ValueError("'?' (any of) is not supported; join clauses with ',' (all of)")
    clauses = []
    for part in text.split(","):
        words = [w.strip() for w in part.split(":")]
        kind = _TYPE_WORDS.get(words[0].lower())
        if kind is None:
            raise ValueError(f"unknown dependency type {words[0]!r}; expected one of {', '.join(_TYPE_WORDS)}")
        ids = words[1:]
        if not ids or any(not w for w in ids):
            raise ValueError(f"{part.strip()!r}: expected {words[0]}:<job>[:<job>...]")
        clauses.append(Clause(kind, tuple(ids)))
    return tuple(clauses)


def format_dependency(clauses: Iterable[Clause]) -> str:
    """The canonical text of ``clauses`` (``afterok:41:42,afterany:7``)."""
    return ",".join(str(c) for c in clauses)


def find_cycle(edges: Mapping[int, Sequence[int]]) -> list[int] | None:
    """A cycle in the graph ``job -> jobs it depends on``, as a list of jobs, or None. Iterative
    depth-first search (a chain of a million jobs does not hit the recursion limit)."""
    state: dict[int, int] = {}  # 1 = on the current path, 2 = done
    for root in edges:
        if state.get(root):
            continue
        path: list[int] = [root]
        iters = [iter(edges.get(root, ()))]
        state[root] = 1
        while iters:
            nxt = next(iters[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                iters.pop()
                continue
            s = state.get(nxt, 0)
            if s == 1:
                return [*path[path.index(nxt) :], nxt]
            if s == 0:
                state[nxt] = 1
                path.append(nxt)
                iters.append(iter(edges.get(nxt, ())))
    return None


@dataclass(frozen=True, eq=False)
class JobDeps:
    """A job table's dependencies: per row its dependency text (canonical, ``""`` = none; ids are
    job names) and whether it is cancelled when the dependency can never be met."""

    spec: tuple[str, ...]
    kill_on_invalid: BoolArray

    def __post_init__(self) -> None:
        if self.kill_on_invalid.shape != (len(self.spec),):
            raise ValueError("JobDeps.kill_on_invalid must have one value per row")
        self.kill_on_invalid.setflags(write=False)

    @staticmethod
    def of(spec: Sequence[str], kill_on_invalid: Sequence[bool] | BoolArray | None = None) -> JobDeps | None:
        """Dependencies from per-row texts (parsed and made canonical); None if no row has one."""
        texts = tuple(format_dependency(parse_dependency(s)) for s in spec)
        if not any(texts):
            return None
        kill = (
            np.zeros(len(texts), dtype=bool)
            if kill_on_invalid is None
            else np.asarray(kill_on_invalid, dtype=bool).copy()
        )
        return JobDeps(texts, kill)

    def take(self, rows: npt.NDArray[np.int64]) -> JobDeps | None:
        spec = tuple(self.spec[i] for i in rows.tolist())
        if not any(spec):
            return None
        return JobDeps(spec, self.kill_on_invalid[rows].copy())

    def equals(self, other: JobDeps | None) -> bool:
        return (
            other is not None
            and self.spec == other.spec
            and bool(np.array_equal(self.kill_on_invalid, other.kill_on_invalid))
        )

    def resolve(self, names: Sequence[str]) -> list[list[tuple[DepType, int]]]:
        """Per row its edges ``(type, row depended on)``; raises ValueError naming the first row
        that names an unknown job, itself, or closes a cycle."""
        index = {nm: i for i, nm in enumerate(names)}
        out: list[list[tuple[DepType, int]]] = []
        for row, text in enumerate(self.spec):
            edges: list[tuple[DepType, int]] = []
            for clause in parse_dependency(text):
                for ident in clause.jobs:
                    dep = index.get(ident)
                    if dep is None:
                        raise ValueError(f"job {names[row]!r}: depends on unknown job {ident!r}")
                    if dep == row:
                        raise ValueError(f"job {names[row]!r}: depends on itself")
                    edges.append((clause.kind, dep))
            out.append(edges)
        cycle = find_cycle({r: [d for _, d in e] for r, e in enumerate(out) if e})
        if cycle is not None:
            raise ValueError(f"job {names[cycle[0]]!r}: dependency cycle " + " -> ".join(repr(names[r]) for r in cycle))
        return out


class DependencyGate:
    """A table's dependency graph while it runs: which rows may be queued, which never can.

    The driver tells it each row's progress (:meth:`outcome`) and each arrival (:meth:`arrive`); it
    answers with the rows to queue now and the rows to cancel (``kill_on_invalid_dep``). A row with
    no dependency passes at once. Each edge is settled once (an outcome only moves forward).
    """

    def __init__(self, names: Sequence[str], deps: JobDeps) -> None:
        edges = deps.resolve(names)
        n = len(names)
        self.names = names
        self.kill = deps.kill_on_invalid
        self.unmet = np.zeros(n, dtype=np.int64)
        self.arrived = np.zeros(n, dtype=bool)
        self.released = np.zeros(n, dtype=bool)  # queued (or cancelled): the gate is done with it
        self.never: dict[int, str] = {}  # row -> why its dependency can never be met
        self._edges: dict[int, list[tuple[int, DepType]]] = {}  # depended-on row -> [(dependent, type)]
        self._open: dict[int, list[tuple[DepType, int]]] = {}  # dependent -> its edges not yet met
        self._outcome = np.zeros(n, dtype=np.int64)
        for row, es in enumerate(edges):
            if es:
                self.unmet[row] = len(es)
                self._open[row] = list(es)
                for kind, dep in es:
                    self._edges.setdefault(dep, []).append((row, kind))

    def arrive(self, row: int) -> bool:
        """``row`` is submitted: True if it may be queued now (else the gate holds it)."""
        self.arrived[row] = True
        if self.unmet.item(row) == 0:
            self.released[row] = True
            return True
        return False

    def kill_now(self, row: int) -> bool:
        """Whether an arrived, held row is to be cancelled now (its dependency can never be met and it
        asked for ``kill_on_invalid_dep``); if so the gate lets go of it."""
        if row in self.never and bool(self.kill[row]) and not self.released[row]:
            self.released[row] = True
            return True
        return False

    def outcome(self, row: int, outcome: Outcome) -> tuple[list[int], list[int]]:
        """``row`` got to ``outcome``: the rows to queue now and the rows to cancel now."""
        if outcome <= self._outcome.item(row):
            return [], []
        self._outcome[row] = outcome
        queue: list[int] = []
        kill: list[int] = []
        for dependent, kind in self._edges.get(row, ()):
            if self.released.item(dependent):
                continue
            state = edge_state(kind, outcome)
            if state == EdgeState.WAIT:
                continue
            open_edges = self._open[dependent]
            try:
                open_edges.remove((kind, row))
            except ValueError:
                continue  # settled before
            if state == EdgeState.MET:
                left = self.unmet.item(dependent) - 1
                self.unmet[dependent] = left
                if left == 0 and self.arrived.item(dependent) and dependent not in self.never:
                    self.released[dependent] = True
                    queue.append(dependent)
            else:
                if dependent not in self.never:
                    word = "completed" if outcome == Outcome.OK else "did not complete"
                    self.never[dependent] = (
                        f"{NEVER_SATISFIED}: {kind.name.lower()}:{self.names[row]} ({self.names[row]} {word})"
                    )
                if self.arrived.item(dependent) and self.kill.item(dependent):
                    self.released[dependent] = True
                    kill.append(dependent)
        return queue, kill

    def held(self) -> list[int]:
        """Rows submitted and still held by the gate."""
        return np.flatnonzero(self.arrived & ~self.released).tolist()

    def why(self, row: int) -> str:
        """Why a held row waits, in words."""
        if row in self.never:
            return self.never[row]
        waiting = ", ".join(f"{k.name.lower()}:{self.names[d]}" for k, d in self._open.get(row, ()))
        return f"Dependency: waiting for {waiting}"
