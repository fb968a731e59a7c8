"""Backfill: start queued jobs out of order when that does not delay reserved jobs (Slurm's backfill).

Run it after a blocking allocate, which starts jobs in queue order until the first one that does not
fit::

    actions:
      - {name: allocate, args: {blocking: true}}
      - {name: backfill, args: {mode: easy}}

The action walks the queue again in the same order. The first job that passes admission and cannot
start now is the *head*. Jobs that fail admission (a quota) are passed over and get no reservation.

**Release profile.** Every running job gives back its per-node GPUs (and CPU and memory, on nodes
that model them) at its estimated end ``ctx.running[job].expected_end``; a job started earlier in
the same cycle at ``now + env.estimate(job)``. A job already past its estimated end is assumed to
end *right after now* (``now + epsilon``): its capacity counts for reservations but never as free
now. kant never kills a job that overruns its estimate (Slurm kills it at its time limit): the
reservation slides and the reserved job may start later than promised; :func:`backfill_stats`
counts such delays.

**EASY** (``mode: easy``: Lifka's EASY, Slurm with one reservation). The head gets a reservation at
its *shadow time* ``S``: the earliest release time at which the capacity free by then holds all its
workers (``sum over nodes of its GPU type of free_S // gpus_per_worker >= workers``) *and* the
policy's own placement (``fw.place``: filters, scores and any ``Place`` plugin) succeeds on the
cluster as it will be at ``S``. Free capacity only grows with time up to ``S`` (releases add to it),
so a placement that succeeds at one release time succeeds at every later one for any Place plugin
whose success is monotone in capacity (every bundled one: plain, binpack, topology, E-Binpack soft
and hard); the release times are searched by galloping then bisection, not one by one.
That placement's per-node capacity ``R`` is reserved. A later job
``j`` (queue order) starts now if it fits the free capacity and

* its estimated end ``now + estimate(j) <= S`` (it is gone before the head needs anything); or
* the policy places it within the capacity the reservation does not need,
  ``X = min(free_now, free_S - R)`` per node and resource; ``free_S`` then drops by what ``j`` holds.

The reservation is kept across cycles while recomputing it would give the same one (same head, no
job left before its estimated end, no job that ends after ``S`` started other than those backfilled
against it, no node failure, ``now <= S``) and recomputed otherwise (property-tested).

**Conservative** (``mode: conservative``). Every job looked at that cannot start now gets a
reservation, in queue order, on a per-node availability profile (free capacity between consecutive
release and reservation times). A job starts now only if it fits, for its whole estimated run, in
what the profile leaves: per node the minimum free capacity over ``[now, now + estimate)``. A job's
earliest start is the first profile time ``t`` at which the per-node minimum over
``[t, t + estimate)`` holds its workers. Starts and the head's reservation use the policy's
placement on that capacity; other reservations take worker slots best-fit (nodes with the fewest
slots first). Reservations of jobs after the last job that could start now are never needed and are
not computed, and the plan is kept for the next pass while re-planning would give the same one
(see :class:`~kant.actions.backfill.conservative.ConsPlan`; property-tested).

With exact estimates (Philly's default: there is no estimate column, so the true duration) neither
mode starts the head later than the shadow time computed when it was first reserved (this is
property-tested in ``tests/test_backfill.py``).

Arguments:
    mode: ``easy`` (one reservation, for the head) or ``conservative`` (one per job looked at).
    max_jobs: queued jobs looked at per cycle, head included (Slurm's ``bf_max_job_test``; default
        :data:`MAX_JOBS_DEFAULT`: 300 for EASY, 100 for conservative); a job
        skipped because it is too long for the capacity the reservation leaves counts too.
    window_s: planning horizon: a job whose earliest start is later than ``now + window_s`` gets no
        reservation and does not hold back later jobs (Slurm's ``bf_window``). Default: unlimited.
    max_place_tries: placements tried for one reservation. EASY searches the release times for the
        earliest at which the placement succeeds (:func:`~kant.actions.backfill.reservation.earliest`:
        galloping then bisection, about ``2 log2`` of the release times; exact within 32 tries for up
        to 65,536 distinct ones).
        Conservative tries candidate times in order, the last try at the end of the profile (every
        running job ended). A reservation the tries could not prove earliest is counted in
        ``approximated`` (:func:`backfill_stats`; the simulator's result notes it).

No wake-ups are needed: every reservation time is an estimated end of a running or planned job,
where a cycle runs when estimates are exact; a job that ends early or overruns triggers a cycle when
it really ends, and the plan is then recomputed.

The package, one concern per module:

* :mod:`~kant.actions.backfill.action`: the action (state kept between cycles, dispatch);
* :mod:`~kant.actions.backfill.host`: the arguments and what a pass uses of the action (``Host``);
* :mod:`~kant.actions.backfill.fit`: capacity and fit arithmetic (the one place to change for another
  capacity model);
* :mod:`~kant.actions.backfill.releases`: the release profile of running jobs;
* :mod:`~kant.actions.backfill.reservation`: the EASY head's reservation, kept or recomputed;
* :mod:`~kant.actions.backfill.leftover`: what the reservation leaves for long jobs;
* :mod:`~kant.actions.backfill.easy`: the EASY walk;
* :mod:`~kant.actions.backfill.conservative`: conservative (the availability profile and the plan);
* :mod:`~kant.actions.backfill.stats`: :func:`backfill_stats`.

Imports run one way, down this list: ``action`` imports the passes (``easy``, ``conservative``), which
see the action only as a ``Host``; ``easy`` imports ``leftover`` and ``reservation``; everything
imports ``host``, ``fit`` and ``releases``.
"""

from kant.actions.backfill.action import Backfill
from kant.actions.backfill.host import MAX_JOBS_DEFAULT, BackfillArgs
from kant.actions.backfill.reservation import earliest
from kant.actions.backfill.stats import BackfillStats, backfill_action, backfill_stats

__all__ = ["MAX_JOBS_DEFAULT", "Backfill", "BackfillArgs", "BackfillStats", "backfill_action", "backfill_stats",
           "earliest"]
