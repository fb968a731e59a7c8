"""``Framework.static_key_function`` (the queue's key per push, docs/performance.md step 18) gives
exactly :meth:`Framework.static_key`: the same tuples, element by element and of the same types, for
every bundled policy (none, one, two and more sorters, shape-keyed ones) and for sorter lists of
each length up to three, on random workloads."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kant.config import Policy, bundled_policies, load_policy, parse_policy
from kant.framework.context import SchedulerEnv
from kant.framework.plugin import QueueSort
from kant.framework.registry import plugin_class
from kant.framework.runner import Framework
from kant.model import JobTable
from kant.model.store import JobStore
from kant.scheduler import Scheduler
from kant.traces import load_cluster
from strategies import workloads

CLUSTER = load_cluster("philly-80")
SORTERS = ["priority", "fifo", "sjf", "qssf"]


def _same(policy: Policy, jobs: JobTable) -> None:
    fw = Scheduler(policy, CLUSTER, JobStore.from_table(jobs), seed=0, trace=jobs).framework
    fast = fw.static_key_function()
    for job in range(len(jobs)):
        got, want = fast(job), fw.static_key(job)
        assert got == want and [type(v) for v in got] == [type(v) for v in want], (job, got, want)


@settings(max_examples=30, deadline=None)
@given(workloads(), st.sampled_from(sorted(bundled_policies())))
def test_bundled_policies(jobs: JobTable, name: str) -> None:
    _same(load_policy(name), jobs)


@settings(max_examples=60, deadline=None)
@given(workloads(), st.lists(st.sampled_from(SORTERS), max_size=3, unique=True))
def test_sorter_lists(jobs: JobTable, sorters: list[str]) -> None:
    _same(parse_policy({"name": "p", "plugins": [{"name": s} for s in sorters], "actions": [{"name": "allocate"}]}),
          jobs)


class NowKey(QueueSort):
    """A static key that reads ``now`` (the job's submit time, for a static key) and the row."""

    NAME = "now-key"

    def key(self, env: SchedulerEnv, job: int, now: float) -> float:
        return now * 3.0 - job


@settings(max_examples=60, deadline=None)
@given(workloads(), st.lists(st.sampled_from(["now", "priority", "fifo"]), min_size=1, max_size=3, unique=True))
def test_sorters_that_read_now(jobs: JobTable, names: list[str]) -> None:
    plugins = [NowKey() if n == "now" else plugin_class(n)() for n in names]  # type: ignore[misc]
    fw = Framework(SchedulerEnv(CLUSTER, JobStore.from_table(jobs), 0, jobs), plugins)
    fast = fw.static_key_function()
    for job in range(len(jobs)):
        assert fast(job) == fw.static_key(job)
