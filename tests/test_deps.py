"""Job dependencies in the core (kant.model.deps) and the simulator: Slurm's after/afterok/afternotok/
afterany, a dependency that can never be met, kill_on_invalid_dep, refusals at load, and a Hypothesis
property that a random dependency graph runs in an order that respects it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.config import load_policy
from kant.errors import InputError, KantError
from kant.metrics.recorder import JobStatus
from kant.model import Cluster, JobTable, JobTableBuilder
from kant.model.deps import (
    Clause,
    DepType,
    EdgeState,
    Outcome,
    edge_state,
    find_cycle,
    format_dependency,
    parse_dependency,
)
from kant.sim import simulate
from kant.traces._csv import Problems
from kant.traces.parquet import jobs_equal, jobs_to_arrow, read_parquet, write_parquet
from kant.traces.registry import read_path


def _run(jobs: JobTable, gpus: int = 8):  # type: ignore[no-untyped-def]
    return simulate(Cluster.uniform(1, gpus), jobs, load_policy("fifo-strict"))


# --- the rule -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "outcome", "want"),
    [
        (DepType.AFTER, Outcome.WAITING, EdgeState.WAIT),
        (DepType.AFTER, Outcome.STARTED, EdgeState.MET),
        (DepType.AFTER, Outcome.NOTOK, EdgeState.MET),  # cancelled before it started: Slurm releases too
        (DepType.AFTEROK, Outcome.STARTED, EdgeState.WAIT),
        (DepType.AFTEROK, Outcome.OK, EdgeState.MET),
        (DepType.AFTEROK, Outcome.NOTOK, EdgeState.NEVER),
        (DepType.AFTERNOTOK, Outcome.OK, EdgeState.NEVER),
        (DepType.AFTERNOTOK, Outcome.NOTOK, EdgeState.MET),
        (DepType.AFTERANY, Outcome.STARTED, EdgeState.WAIT),
        (DepType.AFTERANY, Outcome.OK, EdgeState.MET),
        (DepType.AFTERANY, Outcome.NOTOK, EdgeState.MET),
    ],
)
def test_edge_state_is_slurms(kind: DepType, outcome: Outcome, want: EdgeState) -> None:
    assert edge_state(kind, outcome) == want


def test_parse_and_format() -> None:
    clauses = parse_dependency(" afterok:41:42, AFTERANY:7 ")
    assert clauses == (Clause(DepType.AFTEROK, ("41", "42")), Clause(DepType.AFTERANY, ("7",)))
    assert format_dependency(clauses) == "afterok:41:42,afterany:7"
    assert parse_dependency("") == ()
    for bad, words in [
        ("afterok", "expected afterok:<job>"),
        ("afterok:1::2", "expected"),
        ("before:1", "unknown dependency type 'before'"),
        ("afterok:1?afterany:2", "'?'"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_dependency(bad)


def test_find_cycle() -> None:
    assert find_cycle({0: [1], 1: [2], 2: []}) is None
    assert find_cycle({0: [1], 1: [2], 2: [0]}) == [0, 1, 2, 0]
    # a chain far deeper than Python's recursion limit
    chain = {i: [i + 1] for i in range(50_000)}
    assert find_cycle(chain) is None


# --- the simulator ------------------------------------------------------------------------------
def test_afterok_waits_for_completion_and_after_for_the_start() -> None:
    b = JobTableBuilder()
    b.add("a", submit=0, duration=100, gpus_per_worker=4)
    b.add("ok", submit=0, duration=10, gpus_per_worker=4, depends_on="afterok:a")
    b.add("any", submit=5, duration=10, gpus_per_worker=1, depends_on="afterany:a,afterok:ok")
    b.add("started", submit=0, duration=10, gpus_per_worker=1, depends_on="after:a")
    res = _run(b.build())
    assert list(res.status) == [JobStatus.FINISHED] * 4
    # 'ok' could fit beside 'a' at 0 (4 + 4 of 8 GPUs) but waits for a's end at 100
    assert res.first_start.tolist() == [0.0, 100.0, 110.0, 0.0]


def test_a_dependency_that_can_never_be_met_leaves_the_job_waiting_with_the_reason() -> None:
    b = JobTableBuilder()
    b.add("big", submit=0, duration=10, gpus_per_worker=16)  # never fits on 8 GPUs: refused
    b.add("good", submit=0, duration=10)
    b.add("needs-big", submit=1, duration=10, depends_on="afterok:big")
    b.add("needs-good-to-fail", submit=1, duration=10, depends_on="afternotok:good")
    b.add("cleanup", submit=1, duration=10, depends_on="afternotok:big")
    res = _run(b.build())
    st = res.status.tolist()
    assert st[0] == JobStatus.UNSCHEDULABLE and st[1] == JobStatus.FINISHED and st[4] == JobStatus.FINISHED
    assert st[2] == st[3] == JobStatus.UNSCHEDULABLE
    assert res.reasons[2] == "never started; DependencyNeverSatisfied: afterok:big (big did not complete)"
    assert res.reasons[3] == "never started; DependencyNeverSatisfied: afternotok:good (good completed)"
    assert math.isnan(res.first_start[2])


def test_kill_on_invalid_dep_cancels_and_the_cancel_counts_as_not_ok() -> None:
    b = JobTableBuilder()
    b.add("a", submit=0, duration=10)
    b.add("b", submit=0, duration=10, depends_on="afternotok:a", kill_on_invalid_dep=True)
    b.add("c", submit=50, duration=10, depends_on="afternotok:a", kill_on_invalid_dep=True)  # after a ended
    b.add("d", submit=0, duration=10, depends_on="afternotok:b")  # b's cancel is its 'not ok'
    b.add("e", submit=0, duration=10, depends_on="afterok:c")  # e stays (no kill): never satisfied
    res = _run(b.build())
    assert res.status.tolist() == [
        JobStatus.FINISHED,
        JobStatus.STOPPED,
        JobStatus.STOPPED,
        JobStatus.FINISHED,
        JobStatus.UNSCHEDULABLE,
    ]
    assert res.reasons[1] == "cancelled (kill_on_invalid_dep): DependencyNeverSatisfied: afternotok:a (a completed)"
    assert res.first_start[3] == 10.0  # d started when b was cancelled, at a's end
    assert "afterok:c (c did not complete)" in res.reasons[4]


def test_unknown_job_self_and_cycle_are_refused() -> None:
    for deps, words in [
        ({"b": "afterok:zz"}, "job 'b': depends on unknown job 'zz'"),
        ({"b": "after:b"}, "job 'b': depends on itself"),
        ({"a": "afterok:c", "b": "afterany:a", "c": "afterok:b"}, "dependency cycle 'a' -> "),
    ]:
        bld = JobTableBuilder(source="t.csv")
        for nm in "abc":
            bld.add(nm, submit=0, duration=1, depends_on=deps.get(nm, ""))
        with pytest.raises(KantError, match=words):
            _run(bld.build())


def test_take_keeps_dependencies_by_name() -> None:
    b = JobTableBuilder()
    b.add("a", submit=5, duration=1)
    b.add("b", submit=0, duration=1, depends_on="afterok:a", kill_on_invalid_dep=True)
    t = b.build()
    s = t.sorted_by_submit()
    assert s.names == ("b", "a") and s.deps is not None
    assert s.deps.spec == ("afterok:a", "") and s.deps.kill_on_invalid.tolist() == [True, False]
    assert t.take(np.array([0])).deps is None  # no row left with a dependency


# --- the property -------------------------------------------------------------------------------
@st.composite
def dags(draw: st.DrawFn) -> JobTable:
    """A random DAG of up to 12 jobs: each job may depend on earlier-numbered ones (any type)."""
    n = draw(st.integers(2, 12))
    b = JobTableBuilder()
    for i in range(n):
        parts = []
        if i:
            for kind in ("after", "afterok", "afterany", "afternotok"):
                ids = draw(st.lists(st.integers(0, i - 1), max_size=2, unique=True))
                if ids:
                    parts.append(":".join([kind, *(f"j{d}" for d in ids)]))
        gpus = draw(st.sampled_from([1, 2, 4, 8, 16]))  # 16 never fits: refused, a 'not ok'
        b.add(
            f"j{i}",
            submit=draw(st.integers(0, 30)),
            duration=draw(st.integers(1, 20)),
            gpus_per_worker=gpus,
            depends_on=",".join(parts),
            kill_on_invalid_dep=draw(st.booleans()),
        )
    return b.build()


@settings(max_examples=60, deadline=None)
@given(jobs=dags(), policy=st.sampled_from(["fifo-strict", "volcano-binpack"]))
def test_random_dependency_graph_runs_in_an_order_that_respects_it(jobs: JobTable, policy: str) -> None:
    res = simulate(Cluster.uniform(1, 8), jobs, load_policy(policy))
    if jobs.deps is None:
        return
    index = {nm: i for i, nm in enumerate(jobs.names)}
    ok = res.status == JobStatus.FINISHED
    # ended without success during the run: refused at submit, or cancelled; not those still waiting at the end
    left = np.array([res.reasons.get(j, "").startswith("never started") for j in range(len(jobs))])
    notok = ((res.status == JobStatus.UNSCHEDULABLE) | (res.status == JobStatus.STOPPED)) & ~left
    for j, text in enumerate(jobs.deps.spec):
        clauses = parse_dependency(text)
        started = not math.isnan(res.first_start[j])
        # a job that started had every clause met by then
        met_all = True
        for clause in clauses:
            for name in clause.jobs:
                d = index[name]
                if clause.kind == DepType.AFTER:
                    met = ok[d] or notok[d] or not math.isnan(res.first_start[d])
                    if started and not math.isnan(res.first_start[d]):
                        assert res.first_start[d] <= res.first_start[j]
                elif clause.kind == DepType.AFTEROK:
                    met = bool(ok[d])
                    if started:
                        assert ok[d] and res.end[d] <= res.first_start[j]
                elif clause.kind == DepType.AFTERNOTOK:
                    met = bool(notok[d])
                    if started:
                        assert notok[d] and math.isnan(res.end[d])
                else:
                    met = bool(ok[d] or notok[d])
                    if started:
                        assert ok[d] or notok[d]
                        if ok[d]:
                            assert res.end[d] <= res.first_start[j]
                met_all = met_all and met
        # and the simulation drains: a job whose clauses were all met ran (or was refused for its size)
        if met_all and jobs.gpus_per_worker[j] <= 8:
            assert res.status[j] == JobStatus.FINISHED, (j, text, res.reasons.get(j))
        if not met_all:
            assert not started
            assert res.status[j] in (JobStatus.UNSCHEDULABLE, JobStatus.STOPPED)
            assert "Dependency" in res.reasons[j]


# --- traces -------------------------------------------------------------------------------------
def _csv(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "jobs.csv"
    p.write_text("name,submit,duration,gpus_per_worker,depends_on,kill_on_invalid_dep\n" + body)
    return p


def test_schema_csv_reads_dependencies_and_parquet_keeps_them(tmp_path: Path) -> None:
    p = _csv(tmp_path, "prep,0,10,1,,\ntrain,0,100,4,afterok:prep,true\nreport,0,5,1,AFTERANY:train:prep,\n")
    jobs = read_path(p)
    assert isinstance(jobs, JobTable) and jobs.deps is not None
    assert jobs.deps.spec == ("", "afterok:prep", "afterany:train:prep")
    assert jobs.deps.kill_on_invalid.tolist() == [False, True, False]
    out = tmp_path / "jobs.parquet"
    write_parquet(jobs, out)
    back = read_parquet(out)
    assert isinstance(back, JobTable) and jobs_equal(jobs, back)
    res = _run(jobs)
    assert res.first_start.tolist() == [0.0, 10.0, 110.0]
    # a table without dependencies writes no dependency columns (files as before)
    plain = JobTableBuilder()
    plain.add("x", submit=0, duration=1)
    assert "depends_on" not in jobs_to_arrow(plain.build()).column_names


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("a,0,1,1,,\nb,0,1,1,afterok:zz,\n", "jobs.csv:3: column 'depends_on': depends on unknown job 'zz'"),
        ("a,0,1,1,afterok:b,\nb,0,1,1,afterany:a,\n", "jobs.csv:2: column 'depends_on': dependency cycle a -> b -> a"),
        ("a,0,1,1,,\nb,0,1,1,before:a,\n", "jobs.csv:3: column 'depends_on': bad dependency: unknown dependency type"),
        ("a,0,1,1,,maybe\n", "jobs.csv:2: column 'kill_on_invalid_dep': expected true or false"),
        ("a,0,1,1,after:a,\n", "jobs.csv:2: column 'depends_on': depends on itself"),
    ],
)
def test_bad_dependencies_in_a_trace_name_the_line(tmp_path: Path, body: str, words: str) -> None:
    with pytest.raises(InputError) as err:
        read_path(_csv(tmp_path, body))
    assert words in str(err.value)


def test_skipping_bad_rows_drops_their_dependents(tmp_path: Path) -> None:
    problems = Problems(skip=True)
    jobs = read_path(
        _csv(tmp_path, "a,0,-1,1,,\nb,0,1,1,afterok:a,\nc,0,1,1,afterok:b,\nd,0,1,1,,\n"), problems=problems
    )
    assert isinstance(jobs, JobTable) and jobs.names == ("d",) and jobs.deps is None
