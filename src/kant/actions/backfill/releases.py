"""The release profile: when running jobs give their capacity back.

:class:`Releases` mirrors ``ctx.running`` incrementally and keeps its per-node release rows sorted by
time; :func:`events` adds the jobs started earlier in the current cycle. Every running job gives back
its per-node GPUs (and CPU and memory, on nodes that model them; a GPU share gives back no GPU, see
:mod:`kant.actions.backfill.fit`) at its estimated end
``ctx.running[job].expected_end``; a job started earlier in the same cycle at
``now + env.estimate(job)``. A job already past its estimated end is assumed to end *right after
now*: its time is clamped to ``now``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np

from kant.actions.backfill.fit import Capacity, FloatArray, IntArray
from kant.framework.context import CycleContext, RunningJob
from kant.model.fit import FULL_GPU_MILLI
from kant.model.state import ClusterState, Placement

__all__ = ["Releases", "events"]


class Releases:
    """A mirror of ``ctx.running`` (job -> (RunningJob, placement)) kept in O(changes log n): jobs
    enter ``running`` only as some cycle's ``ctx.started`` (the action hands those lists over);
    jobs that left are found through a heap of expected ends (those due by now), falling back to a
    set difference when some left early. The per-node release arrays, sorted by time, are brought up
    to date when a reservation is computed: rows of jobs that left are masked out and rows of jobs
    that entered are merged in (O(rows) in NumPy, not a sort of every running job's rows in Python:
    on a cluster with 10,000 jobs running, most cycles change a few)."""

    def __init__(self, modelled: IntArray, fields: tuple[int, ...] | None = None) -> None:
        self.modelled = modelled  # resources x nodes: 1 where the resource is modelled
        # per row, its amount's index in (gpus, cpu_milli, memory_mib): Capacity.fields
        self.fields = tuple(range(len(modelled))) if fields is None else fields
        # the cycles' ctx.started lists not yet in the mirror, each with its cycle's time
        self.unsynced: list[tuple[float, list[tuple[int, Placement]]]] = []
        self._current: tuple[float, list[tuple[int, Placement]]] | None = None
        # the cycles' ctx.resized lists (elastic jobs that changed placement: kant.actions.elastic) not
        # yet looked at, the current cycle's last (looked at again: it fills as the cycle goes)
        self.resized: list[list[tuple[int, Placement, Placement]]] = []
        self.by_job: dict[int, tuple[RunningJob, Placement]] = {}
        self._ends: list[tuple[float, int, int, RunningJob]] = []  # (expected end, seq, job, run)
        # entries of the heap that came due while their job still ran (overrunning its estimate):
        # looked at each sync that misses a job, not pushed back (re-pushing them all cost log n each)
        self._overdue: list[tuple[float, int, int, RunningJob]] = []
        self._seq = 0
        # (times, nodes, amounts, jobs) of the mirror as of the last build; None: build from scratch
        self._sorted: tuple[FloatArray, IntArray, IntArray, IntArray] | None = None
        self._gone: set[int] = set()  # jobs whose rows in _sorted are stale (left, or run again)
        self._new: list[int] = []  # jobs that entered by_job since, in order (re-entries repeat)
        self._modelled_rows: list[tuple[int, list[int]]] = list(zip(self.fields, modelled.tolist(), strict=True))

    def hand_over(self, now: float, started: list[tuple[int, Placement]],
                  resized: list[tuple[int, Placement, Placement]] | None = None) -> None:
        """A cycle begins: ``started`` is its ``ctx.started`` list (filled as the cycle goes). Jobs
        enter ``ctx.running`` only through such lists, so the mirror needs nothing else to catch up;
        the previous cycle's list, complete by now, joins the unsynced ones. ``resized``: the cycle's
        ``ctx.resized`` list (a running elastic job's new placement and run re-enter the mirror)."""
        if self._current is not None:
            self.unsynced.append(self._current)
        self._current = (now, started)
        if resized is not None and (not self.resized or self.resized[-1] is not resized):
            self.resized.append(resized)

    def _put(self, job: int, run: RunningJob, placement: Placement) -> None:
        self.by_job[job] = (run, placement)
        heapq.heappush(self._ends, (run.expected_end, self._seq, job, run))
        self._seq += 1

    def sync(
        self, now: float, running: dict[int, RunningJob], state: ClusterState, estimate: Callable[[int], float] | None,
    ) -> tuple[bool, list[tuple[int, float]]]:
        """Catch up with ``running`` through the unsynced hand-over lists (emptied). Returns whether
        some job left before its expected end (or something changed unseen and the mirror was
        rebuilt) and the (job, expected end) of jobs added.

        A job of a hand-over list whose run has already ended (it is not running, or runs again from
        a later start) never entered the mirror: it left early if its expected end, its cycle's time
        plus ``estimate(job)``, is after now. ``estimate`` is None when estimates may have changed
        since (a runtime estimator learns as jobs finish): then such a job counts as early."""
        by_job = self.by_job
        early = False
        gone_early = False  # a run that never entered the mirror ended early (the mirror is unchanged)
        added: list[tuple[int, float]] = []
        ends, seq, allocations, heappush = self._ends, self._seq, state.allocations, heapq.heappush
        started, self.unsynced = self.unsynced, []
        for when, lst in started:
            for job, _ in lst:
                run = running.get(job)
                if run is None or run.start != when:  # this run is over (a later one is in a later list)
                    if not gone_early and (estimate is None or when + estimate(job) > now):
                        gone_early = True
                    continue
                old = by_job.get(job)
                if old is not None:
                    if old[0] is run:
                        continue
                    if old[0].expected_end > now:
                        early = True
                end = run.expected_end
                if old is not None:  # runs again: its old rows go, it re-enters at the end
                    del by_job[job]
                    self._gone.add(job)
                by_job[job] = (run, allocations[job])
                self._new.append(job)
                heappush(ends, (end, seq, job, run))
                seq += 1
                added.append((job, end))
        if self.resized:  # elastic jobs resized: their new run and placement replace the old rows
            for changed in self.resized:
                for job, _, _ in changed:
                    run = running.get(job)
                    placement = allocations.get(job)
                    if run is None or placement is None:
                        continue
                    old = by_job.get(job)
                    if old is not None:
                        if old[0] is run and old[1] is placement:
                            continue
                        del by_job[job]
                        self._gone.add(job)
                    early = True  # capacity moved now: a kept reservation or plan is stale
                    by_job[job] = (run, placement)
                    self._new.append(job)
                    heappush(ends, (run.expected_end, seq, job, run))
                    seq += 1
                    added.append((job, run.expected_end))
            self.resized = self.resized[-1:]
        self._seq = seq
        missing = len(by_job) - len(running)  # jobs that have left running since the last sync
        if missing > 0:
            if self._overdue:  # overrunning jobs first: have some of them ended?
                still = []
                for entry in self._overdue:
                    job, run = entry[2], entry[3]
                    mine = by_job.get(job)
                    if mine is None or mine[0] is not run:
                        continue  # stale entry
                    if missing and running.get(job) is not run:
                        del by_job[job]
                        self._gone.add(job)
                        missing -= 1
                    else:
                        still.append(entry)
                self._overdue = still
            while missing and ends and ends[0][0] <= now:  # those due by now next (never early)
                entry = heapq.heappop(ends)
                job, run = entry[2], entry[3]
                mine = by_job.get(job)
                if mine is None or mine[0] is not run:
                    continue  # stale entry
                if running.get(job) is run:
                    self._overdue.append(entry)  # still running past its estimate
                    continue
                del by_job[job]
                self._gone.add(job)
                missing -= 1
            if missing:  # some left before their expected end
                for job in by_job.keys() - running.keys():
                    self._gone.add(job)
                    if by_job.pop(job)[0].expected_end > now:
                        early = True
        if len(by_job) != len(running):  # pragma: no cover - a driver changed running outside cycles
            early = True
            by_job.clear()
            self._ends = []
            self._overdue = []
            self._sorted = None
            for job, run in running.items():
                self._put(job, run, state.allocations[job])
        if len(self._ends) > 4 * len(by_job) + 64:  # drop stale heap entries now and then
            self._ends = [e for e in self._ends if by_job.get(e[2], (None,))[0] is e[3]]
            heapq.heapify(self._ends)
        return early or gone_early, added

    def _rows_of(self, jobs: list[int]) -> tuple[FloatArray, IntArray, IntArray, IntArray]:
        """The rows of ``jobs`` (one per job and node), in the order given."""
        modelled = self._modelled_rows
        n_res = len(modelled)
        t: list[float] = []
        nodes: list[int] = []
        amounts: list[int] = []
        owner: list[int] = []
        by_job = self.by_job
        for job in jobs:
            run, placement = by_job[job]
            end = run.expected_end
            # a GPU share gives back no GPU (see Capacity.release_on)
            gpus = 0 if placement.gpus == 1 and placement.gpu_milli < FULL_GPU_MILLI else placement.gpus
            req = (gpus, placement.cpu_milli, placement.memory_mib)
            for node, count in placement.per_node.items():
                t.append(end)
                nodes.append(node)
                owner.append(job)
                amounts.extend([req[f] * count * m[node] for f, m in modelled])
        return (np.asarray(t, dtype=np.float64), np.asarray(nodes, dtype=np.int64),
                np.asarray(amounts, dtype=np.int64).reshape(-1, n_res), np.asarray(owner, dtype=np.int64))

    def sorted(self) -> tuple[FloatArray, IntArray, IntArray]:
        """(times, nodes, amounts): one entry per (running job, node), by time, ties in the order the
        jobs entered the mirror (as a stable sort of every job's rows in ``by_job`` order gives)."""
        by_job = self.by_job
        if self._sorted is None:
            t, nodes, amt, owner = self._rows_of(list(by_job))
            order = np.argsort(t, kind="stable")
            self._sorted = (t[order], nodes[order], amt[order], owner[order])
        elif self._gone or self._new:
            t, nodes, amt, owner = self._sorted
            if self._gone and len(owner):
                # the rows of the jobs in _gone out: a table over job ids (np.isin's own "table" kind
                # without its Python-level checks)
                gone = np.fromiter(self._gone, dtype=np.int64, count=len(self._gone))
                keep = np.ones(max(int(owner.max()), int(gone.max())) + 1, dtype=np.bool_)
                keep[gone] = False
                keep = keep[owner]
                t, nodes, amt, owner = t[keep], nodes[keep], amt[keep], owner[keep]
            # each job's last entry is its place in by_job; jobs that left since are not there
            fresh = [job for job in dict.fromkeys(reversed(self._new)) if job in by_job][::-1]
            if fresh:
                # merged after the rows already there at equal times: a stable sort of the rows there
                # (sorted) followed by the new ones in entry order
                nt, nn, na, no = self._rows_of(fresh)
                t = np.concatenate((t, nt))
                order = np.argsort(t, kind="stable")
                t, nodes = t[order], np.concatenate((nodes, nn))[order]
                amt, owner = np.concatenate((amt, na))[order], np.concatenate((owner, no))[order]
            self._sorted = (t, nodes, amt, owner)
        self._gone.clear()
        self._new.clear()
        return self._sorted[0], self._sorted[1], self._sorted[2]


def events(releases: Releases, capacity: Capacity, ctx: CycleContext) -> tuple[FloatArray, IntArray, IntArray]:
    """Releases of running jobs (``releases``, synced) and of jobs started earlier in this cycle, by
    time; ends already past are clamped to now (an overrunning job ends "right after now")."""
    t, node, amt = releases.sorted()
    extra_t: list[float] = []
    extra_node: list[int] = []
    extra_amt: list[list[int]] = []
    for job, placement in ctx.started:
        if job not in ctx.state.allocations:  # started, then evicted in this cycle
            continue
        end = ctx.now + ctx.env.estimate(job)
        for n, count in placement.per_node.items():
            extra_t.append(end)
            extra_node.append(n)
            extra_amt.append(capacity.release_on(placement, n, count))
    if extra_t:
        t = np.concatenate((t, np.asarray(extra_t)))
        node = np.concatenate((node, np.asarray(extra_node, dtype=np.int64)))
        amt = np.concatenate((amt, np.asarray(extra_amt, dtype=np.int64)))
        order = np.argsort(t, kind="stable")
        t, node, amt = t[order], node[order], amt[order]
    if len(t) and t[0] < ctx.now:
        t = np.maximum(t, ctx.now)
    return t, node, amt
