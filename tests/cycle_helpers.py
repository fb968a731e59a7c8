"""A hand-built cycle context for placement tests (shared by the plugin test modules)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from kant.config.policy import parse_policy
from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import Plugin
from kant.framework.queue import PendingQueue, ShapeIndex
from kant.framework.runner import Framework
from kant.framework.statement import Statement
from kant.model.cluster import Cluster
from kant.model.job import JobTableBuilder
from kant.model.state import ClusterState, Placement


def make_ctx(
    cluster: Cluster, jobs_spec: list[dict[str, Any]], used: dict[int, int], plugins: list[Plugin], seed: int = 0
) -> tuple[CycleContext, Framework]:
    """A cycle context where job i is ``jobs_spec[i]`` and filler jobs hold ``used`` GPUs per node."""
    b = JobTableBuilder()
    for i, spec in enumerate(jobs_spec):
        b.add(f"job{i}", submit=0.0, duration=10.0, **spec)
    for node, gpus in used.items():
        b.add(f"fill{node}", submit=0.0, duration=10.0, gpus_per_worker=gpus)
    jobs = b.build()
    env = SchedulerEnv(cluster, jobs, seed)
    fw = Framework(env, plugins)
    state = ClusterState(cluster)
    for k, (node, gpus) in enumerate(used.items()):
        state.allocate(len(jobs_spec) + k, Placement((node,), gpus))
    index = ShapeIndex()
    index.extend(env.jobs)
    queue = PendingQueue(env.jobs, index, fw.static_key)
    return CycleContext(env, state, queue, 0.0, {}, Statement(state)), fw


def easy_policy(placer: str, max_jobs: int) -> Any:
    """Blocking allocate then EASY backfill walking at most ``max_jobs`` jobs, priority then FIFO order,
    placed by ``placer`` (the backfill walk tests' policy)."""
    return parse_policy({
        "name": "bf", "plugins": [{"name": "priority"}, {"name": "fifo"}, {"name": placer}],
        "actions": [{"name": "allocate", "args": {"blocking": True}},
                    {"name": "backfill", "args": {"mode": "easy", "max_jobs": max_jobs}}],
    })


def record_reasons(sched: Any) -> list[dict[int, str]]:
    """Wrap ``sched.cycle`` so that after every cycle the shapes' reasons are appended (as strings) to
    the list returned."""
    reasons: list[dict[int, str]] = []
    cycle = sched.cycle

    def recorded(now: float) -> Any:
        result = cycle(now)
        reasons.append({shape: str(status) for shape, status in sched._reasons.items()})
        return result

    sched.cycle = recorded
    return reasons


def record_cycles(sched: Any) -> list[Any]:
    """Wrap ``sched.cycle`` so that after every cycle (its time, its starts as (job, nodes), the shapes'
    reasons as strings) is appended to the list returned."""
    cycles: list[Any] = []
    cycle = sched.cycle

    def recorded(now: float) -> Any:
        result = cycle(now)
        cycles.append((now, [(job, p.nodes) for job, p in result.started],
                       {shape: str(status) for shape, status in sched._reasons.items()}))
        return result

    sched.cycle = recorded
    return cycles


def random_queue(data: st.DataObject, n: int) -> PendingQueue:
    """The pending queue of ``n`` drawn jobs (1/2/4 GPUs, priority 0-2) under Priority then Fifo,
    nothing queued yet."""
    from kant.plugins.fifo import Fifo
    from kant.plugins.priority import Priority

    specs: list[dict[str, Any]] = [
        {"gpus_per_worker": data.draw(st.sampled_from([1, 2, 4])), "priority": data.draw(st.integers(0, 2))}
        for _ in range(n)]
    ctx, _fw = make_ctx(Cluster.uniform(2, 8), specs, {}, [Priority(), Fifo()])
    return ctx.queue


def drive_queue(data: st.DataObject, queue: PendingQueue, n: int, check: Callable[[], None]) -> None:
    """Drawn pushes and removals on ``queue`` (of jobs ``0..n-1``; a removal picks a queued job by its
    index in the queue's order, often the first: the head starts), ``check()`` after those the draw
    asks after."""
    ops = data.draw(st.lists(st.tuples(st.booleans(), st.integers(0, n - 1), st.booleans()), max_size=60))
    for push, pick, ask in ops:
        queued = sorted(queue.queued, key=queue.key)
        if push:
            waiting = [j for j in range(n) if j not in queue.queued]
            if not waiting:
                continue
            queue.push(waiting[pick % len(waiting)])
        elif queued:
            queue.remove(queued[pick % len(queued)])
        if ask:
            check()
