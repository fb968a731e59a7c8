"""Consecutive live cycles on a deep queue that EASY backfill must walk (``bench_cycle.py --deep``).

The cluster: 10,000 nodes x 8 H100 (32 nodes per leaf, 8 leaves per spine), nearly full. Every node
but :data:`EMPTY_NODES` runs work: nine in ten one 8-GPU job, the others jobs of 1, 2 or 4 GPUs on
5 to 8 of their GPUs (the rest free: fragments). Each running job ends between 5 minutes and 12
hours from now (uniform), so backfill has a release profile to plan on; its estimate is exact for
four in five, and one in five ends earlier than estimated (a release before its estimated end
drops the head's reservation).

The queue (seeded): a blocked head, a gang of :data:`HEAD_NODES` whole nodes at the highest
priority, which gets a reservation; then ``--pending`` jobs (default 100,000) of varied shapes (8-GPU
gangs of 1 to 16 workers, jobs of 1, 2 or 4 GPUs on one or two workers), priority 1 for 2 % of them
and 0 for the rest, estimates long for 95 % (4 to 72 h: past the head's shadow time) and short for
5 % (5 to 40 minutes: they may backfill), each running 30-100 % of its estimate. Building this
state is not timed.

Timed: ``Scheduler.cycle(now)`` for ``--cycles`` consecutive cycles as events come, one cycle per
event time: running jobs end (at their true end), jobs arrive (Poisson, one every 20 s on average,
the same shape mix; one in ten at priority 1, so it sorts ahead of the priority-0 jobs the walk
passes, and one in 200 a gang of :data:`HEAD_NODES` nodes at priority 3: a new head), and what the
cycles start runs to its true end. Prints P50, P99 and max of the cycle times (wall; the first
cycle apart: it starts what fits and plans the head from scratch), P50 and P99 of each cycle's CPU
time (this process's: less affected by other load on the machine; the target is on the wall P99),
the starts, the backfill counters, and writes bench/results/cycle_deep.json. Figures, never asserts.
"""

from __future__ import annotations

import heapq
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from kant.actions.backfill import Backfill
from kant.config import load_policy
from kant.config.policy import Policy, parse_policy
from kant.framework.context import RunningJob
from kant.model.job import JobTableBuilder
from kant.model.state import Placement
from kant.scheduler import Scheduler
from kant.traces import load_cluster

TARGET_P99_S = 0.050
N_NODES, GPUS = 10_000, 8
EMPTY_NODES = 40
HEAD_NODES = 128
SHORT_P = 0.05
PRIORITY1_P = 0.02
ARRIVAL_MEAN_S = 20.0
ARRIVAL_PRIORITY1_P = 0.1
ARRIVAL_HEAD_P = 0.005
HOUR = 3600.0


def _shape(rng: np.random.Generator) -> tuple[int, int]:
    """(workers, GPUs per worker) of one queued job."""
    gpw = int(rng.choice((1, 2, 4, 8), p=(0.3, 0.15, 0.15, 0.4)))
    if gpw == 8:
        return int(rng.choice((1, 2, 4, 8, 16), p=(0.5, 0.2, 0.15, 0.1, 0.05))), 8
    return int(rng.choice((1, 2), p=(0.8, 0.2))), gpw


def _estimate(rng: np.random.Generator) -> float:
    return float(rng.uniform(300.0, 2400.0)) if rng.random() < SHORT_P else float(rng.uniform(4 * HOUR, 72 * HOUR))


def policy_with(name: str, max_jobs: int | None) -> Policy:
    """The bundled policy ``name``, its backfill looking at ``max_jobs`` queued jobs per pass if given."""
    policy = load_policy(name)
    if max_jobs is None:
        return policy
    doc = policy.to_dict()
    for action in doc["actions"]:
        if action["name"] == "backfill":
            action["args"]["max_jobs"] = max_jobs
    return parse_policy(doc, f"{name} with backfill max_jobs {max_jobs}")


class Deep:
    """The scheduler in the state of the module docstring, and the events to come."""

    def __init__(self, policy: str, seed: int, pending: int, cycles: int, max_jobs: int | None = None) -> None:
        rng = np.random.default_rng(seed)
        b = JobTableBuilder(source="bench_cycle_deep")
        # the queue: the head, then the pending jobs in submit order
        b.add("head", submit=-2e6, duration=10 * HOUR, workers=HEAD_NODES, gpus_per_worker=GPUS, priority=2,
              estimate=10 * HOUR)
        submits = np.sort(rng.uniform(-1e6, 0.0, size=pending))
        for i in range(pending):
            w, g = _shape(rng)
            est = _estimate(rng)
            b.add(f"pending-{i}", submit=float(submits[i]), duration=est * float(rng.uniform(0.3, 1.0)),
                  workers=w, gpus_per_worker=g, estimate=est, priority=int(rng.random() < PRIORITY1_P))
        self.first_queued = pending + 1
        # the arrivals to come (rows added now, submitted by the event loop)
        self.arrivals: list[tuple[float, int]] = []
        t = 0.0
        for i in range(cycles * 2):
            t += float(rng.exponential(ARRIVAL_MEAN_S))
            if rng.random() < ARRIVAL_HEAD_P:
                w, g, est, prio = HEAD_NODES, GPUS, 10 * HOUR, 3
            else:
                (w, g), est = _shape(rng), _estimate(rng)
                prio = int(rng.random() < ARRIVAL_PRIORITY1_P)
            row = b.add(f"arrival-{i}", submit=t, duration=est * float(rng.uniform(0.3, 1.0)), workers=w,
                        gpus_per_worker=g, estimate=est, priority=prio)
            self.arrivals.append((t, row))
        # the running jobs: (row, node, GPUs, expected end, true end)
        nodes = rng.permutation(N_NODES)[EMPTY_NODES:]
        running: list[tuple[int, int, int, float, float]] = []
        for node in nodes.tolist():
            if rng.random() < 0.9:
                sizes = [GPUS]
            else:
                used, sizes = int(rng.integers(5, GPUS + 1)), []
                while used:
                    s = int(rng.choice([x for x in (1, 2, 4) if x <= used]))
                    sizes.append(s)
                    used -= s
            for g in sizes:
                end = float(rng.uniform(300.0, 12 * HOUR))
                true_end = end if rng.random() < 0.8 else end * float(rng.uniform(0.2, 1.0))
                started = -float(rng.uniform(0.0, 24 * HOUR))
                row = b.add(f"running-{len(running)}", submit=started - 1.0, duration=true_end - started,
                            gpus_per_worker=g, estimate=end - started)
                running.append((row, node, g, end, true_end))
        jobs = b.build()
        self.duration = jobs.duration
        cluster = load_cluster(f"{N_NODES}x{GPUS}:H100,leaf=32,spine=8")
        self.sched = sched = Scheduler(policy_with(policy, max_jobs), cluster, jobs)
        self.ends: list[tuple[float, int]] = []
        for row, node, g, end, true_end in running:
            placement = Placement((node,), g)
            sched.state.allocate(row, placement)
            start = end - float(jobs.estimate[row])
            sched.running[row] = RunningJob(start, end)
            sched.framework.job_started(row, start, placement)
            self.ends.append((true_end, row))
        heapq.heapify(self.ends)
        for row in range(self.first_queued):
            sched.submit(row, float(jobs.submit[row]))
        self.n_running = len(running)

    def run(self, cycles: int) -> dict[str, Any]:
        """``cycles`` consecutive cycles, one per event time; each timed."""
        sched, ends, arrivals = self.sched, self.ends, self.arrivals
        times: list[float] = []
        cpu: list[float] = []  # CPU time of each cycle (this process): less affected by other load
        started_per: list[int] = []
        finished = arrived = 0
        a = 0
        now = 0.0
        for c in range(cycles):
            if c:  # the first cycle runs on the state as built; then the next event time
                now = min(ends[0][0] if ends else np.inf, arrivals[a][0] if a < len(arrivals) else np.inf)
                while ends and ends[0][0] <= now:
                    _, row = heapq.heappop(ends)
                    sched.finish(row, now)
                    finished += 1
                while a < len(arrivals) and arrivals[a][0] <= now:
                    sched.submit(arrivals[a][1], now)
                    a += 1
                    arrived += 1
            t0, c0 = time.perf_counter(), time.process_time()
            result = sched.cycle(now)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            started_per.append(len(result.started))
            for job, _ in result.started:
                heapq.heappush(ends, (now + float(self.duration[job]), job))
        bf = sched.action(Backfill)
        return {"times": times, "cpu": cpu, "started": started_per, "finished": finished, "arrived": arrived,
                "pending_end": len(sched.queue), "sim_s": now,
                "backfilled": bf.backfilled if bf else 0, "reservations": bf.computed if bf else 0}


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def main(policies: list[str], seed: int, cycles: int, pending: int, max_jobs: int | None = None) -> None:
    rows = []
    for policy in policies:
        t0 = time.perf_counter()
        deep = Deep(policy, seed, pending, cycles, max_jobs)
        build_s = time.perf_counter() - t0
        r = deep.run(cycles)
        later = r["times"][1:]
        rows.append({
            "policy": policy, "max_jobs": max_jobs, "pending": pending, "cycles": cycles, "running": deep.n_running,
            "build_s": round(build_s, 1), "first_ms": round(r["times"][0] * 1e3, 2),
            "p50_ms": round(pct(later, 50) * 1e3, 3), "p99_ms": round(pct(later, 99) * 1e3, 3),
            "max_ms": round(max(later) * 1e3, 3) if later else float("nan"),
            "cpu_p50_ms": round(pct(r["cpu"][1:], 50) * 1e3, 3), "cpu_p99_ms": round(pct(r["cpu"][1:], 99) * 1e3, 3),
            "total_s": round(sum(r["times"]), 3), "started_first": r["started"][0],
            "started_later": sum(r["started"][1:]), "cycles_with_starts": sum(1 for s in r["started"][1:] if s),
            "finished": r["finished"], "arrived": r["arrived"], "pending_end": r["pending_end"],
            "sim_s": round(r["sim_s"], 1), "backfilled": r["backfilled"], "reservations": r["reservations"],
        })
    print(f"Consecutive cycles on a deep queue: {pending:,} pending + a blocked head of {HEAD_NODES} nodes, "
          f"{N_NODES * GPUS:,} GPUs ({N_NODES:,} nodes, {EMPTY_NODES} empty), {cycles} cycles, seed {seed}; "
          f"Python {platform.python_version()}, loadavg {os.getloadavg()[0]:.2f}")
    print(f"{'policy':<18}{'first ms':>9}{'P50 ms':>9}{'P99 ms':>9}{'max ms':>9}{'CPU P50':>9}{'CPU P99':>9}"
          f"{'target':>8}{'ratio':>7}"
          f"{'starts':>8}{'cycles w/':>10}{'ended':>7}{'arrived':>8}{'backfilled':>11}{'reserv.':>8}{'sim s':>9}")
    for r in rows:
        print(f"{r['policy']:<18}{r['first_ms']:>9}{r['p50_ms']:>9}{r['p99_ms']:>9}{r['max_ms']:>9}"
              f"{r['cpu_p50_ms']:>9}{r['cpu_p99_ms']:>9}"
              f"{TARGET_P99_S * 1e3:>8g}{r['p99_ms'] / (TARGET_P99_S * 1e3):>7.2f}"
              f"{r['started_first']:>4}+{r['started_later']:<3}{r['cycles_with_starts']:>10}{r['finished']:>7}"
              f"{r['arrived']:>8}{r['backfilled']:>11}{r['reservations']:>8}{r['sim_s']:>9}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "cycle_deep.json").write_text(json.dumps({
        "machine": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(), "seed": seed, "target_p99_s": TARGET_P99_S, "rows": rows,
    }, indent=2) + "\n")
