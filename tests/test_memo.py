"""FailedRequests (the failure memo) against a direct replay of every return on every request."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.framework.memo import FailedRequests
from kant.framework.replay import ReleaseReplay
from kant.framework.status import Status
from kant.model.store import JobStore

N_NODES = 6
NODE_TYPES = [0, 0, 1, 1, 2, 0]


def _env(jobs: list[tuple[int, int, int, bool]]) -> SimpleNamespace:
    """jobs: (workers, GPUs per worker, job GPU-type code (-1 any; 0/1/2 one type; 3 = types 1|2), CPU)."""
    cols = SimpleNamespace(
        workers=np.array([j[0] for j in jobs]), gpus_per_worker=np.array([j[1] for j in jobs]),
        gpu_type=np.array([j[2] for j in jobs]), cpu_milli=np.array([1000 if j[3] else 0 for j in jobs]),
        memory_mib=np.zeros(len(jobs), dtype=np.int64), gpu_milli=np.full(len(jobs), 1000, dtype=np.int64),
    )
    cols.list_of = lambda column: getattr(cols, column).tolist()  # (as JobStore.list_of: the column as a list)
    return SimpleNamespace(jobs=cols, cluster_types_of=lambda t: [1, 2] if t == 3 else [t])


@dataclass
class _State:
    release_log: list[tuple[int, int, int]] = field(default_factory=list)
    release_log_start: int = 0
    node_types: list[int] = field(default_factory=lambda: list(NODE_TYPES))

    @property
    def release_count(self) -> int:
        return self.release_log_start + len(self.release_log)


class _Naive:
    """The memo's rule applied literally: each request keeps its room and adds every return's gain."""

    def __init__(self) -> None:
        self.entries: dict[int, list] = {}  # request -> [room, workers, g, types, other]
        self.seen = 0

    def add(self, env: SimpleNamespace, request: int, job: int, room: int) -> None:
        j = env.jobs
        t = int(j.gpu_type[job])
        types = None if t < 0 else set(env.cluster_types_of(t))
        self.entries[request] = [room, int(j.workers[job]), int(j.gpus_per_worker[job]), types,
                                 bool(j.cpu_milli[job])]

    def refresh(self, state: _State) -> None:
        new = state.release_log[self.seen - state.release_log_start:]
        self.seen = state.release_count
        if not new:
            return
        for request, (room, w, g, types, other) in list(self.entries.items()):
            if room >= w:
                del self.entries[request]
                continue
            helped = False
            for node, before, after in new:
                if types is not None and state.node_types[node] not in types:
                    continue
                if other:  # CPU or memory may have come back too: retry
                    helped = True
                    break
                room += after // g - before // g if g > 0 else 1
            if helped or room >= w:
                del self.entries[request]
            else:
                self.entries[request][0] = room


job_st = st.tuples(st.integers(1, 4), st.integers(0, 4), st.sampled_from([-1, 0, 1, 2, 3]), st.booleans())
op_st = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 7), st.integers(0, 5)),  # request (= job), room
    st.tuples(st.just("release"), st.integers(0, N_NODES - 1), st.integers(0, 8), st.integers(0, 8)),
    st.tuples(st.just("refresh")),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(job_st, min_size=8, max_size=8), st.lists(op_st, max_size=60))
def test_memo_forgets_exactly_what_a_direct_replay_forgets(jobs: list, ops: list) -> None:
    env = _env(jobs)
    state = _State()
    memo, naive = FailedRequests(), _Naive()
    ok = Status.unschedulable("no room", "test")
    for op in ops:
        if op[0] == "add":
            _, request, room = op
            memo.add(env, request, request, ok, room)  # type: ignore[arg-type]
            naive.add(env, request, request, room)
        elif op[0] == "release":
            _, node, a, b = op
            state.release_log.append((node, min(a, b), max(a, b)))
        else:
            memo.refresh(state)  # type: ignore[arg-type]
            naive.refresh(state)
        assert set(memo) == set(naive.entries)
        assert memo.get(next(iter(naive.entries), -1)) in (None, ok)


def test_memo_starts_afresh_when_it_fell_behind_the_trimmed_log() -> None:
    env = _env([(4, 8, -1, False)])
    state = _State()
    memo = FailedRequests()
    memo.add(env, 0, 0, Status.unschedulable("no room", "test"), 0)  # type: ignore[arg-type]
    changes = memo.changes
    state.release_log_start = 10  # the log was trimmed past what the memo has seen
    state.release_log = [(0, 0, 1)]
    memo.refresh(state)  # type: ignore[arg-type]
    assert 0 not in memo and memo.changes > changes


shared_op_st = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 1), st.integers(0, 7), st.integers(0, 5)),  # memo, request, room
    st.tuples(st.just("release"), st.integers(0, N_NODES - 1), st.integers(0, 8), st.integers(0, 8)),
    st.tuples(st.just("refresh"), st.integers(0, 1)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(job_st, min_size=8, max_size=8), st.lists(shared_op_st, max_size=80))
def test_memos_sharing_one_replay_forget_what_each_direct_replay_forgets(jobs: list, ops: list) -> None:
    """Two memos on one ReleaseReplay (as allocate's and backfill's share the environment's), each
    refreshed and failed at its own times: each forgets exactly what its own direct replay forgets,
    whichever memo replayed the returns first."""
    env = _env(jobs)
    env.release_replay = ReleaseReplay()
    state = _State()
    memos, naives = (FailedRequests(), FailedRequests()), (_Naive(), _Naive())
    ok = Status.unschedulable("no room", "test")
    for op in ops:
        if op[0] == "add":
            _, k, request, room = op
            memos[k].add(env, request, request, ok, room)  # type: ignore[arg-type]
            naives[k].add(env, request, request, room)
        elif op[0] == "release":
            _, node, a, b = op
            state.release_log.append((node, min(a, b), max(a, b)))
        else:
            memos[op[1]].refresh(state)  # type: ignore[arg-type]
            naives[op[1]].refresh(state)
        for memo, naive in zip(memos, naives, strict=True):
            assert set(memo) == set(naive.entries)
    assert memos[0]._replay is memos[1]._replay or not (memos[0]._due and memos[1]._due)


def test_a_failure_already_paid_for_by_returns_the_other_memo_replayed_is_forgotten() -> None:
    """Memo 0 last checked its heaps before a return that only a kind no memo watched gains; memo 1
    replays it; then memo 0 remembers a failure of that kind that the return pays for: its next
    refresh forgets it, though no total grew since memo 0 last looked."""
    env = _env([(4, 4, 0, False), (1, 1, -1, False)])  # job 0: 4 x 4 GPUs of type 0; job 1: 1 GPU, any type
    env.release_replay = ReleaseReplay()
    state = _State()
    memo0, memo1 = FailedRequests(), FailedRequests()
    ok = Status.unschedulable("no room", "test")
    memo0.add(env, 0, 0, ok, 0)  # type: ignore[arg-type]
    memo1.add(env, 0, 0, ok, 0)  # type: ignore[arg-type]
    state.release_log.append((5, 0, 0))  # (type 0, frees nothing)
    memo0.refresh(state)  # type: ignore[arg-type]  # checks its heaps
    state.release_log.append((2, 0, 1))  # one GPU of type 1: only job 1's kind gains
    memo1.refresh(state)  # type: ignore[arg-type]  # replays it (no watched total grows)
    memo0.add(env, 1, 1, ok, 0)  # type: ignore[arg-type]  # lacks one slot, which the return gave
    memo0.refresh(state)  # type: ignore[arg-type]
    assert 1 not in memo0 and 0 in memo0 and 0 in memo1


def test_memo_reads_jobs_added_to_the_store_after_its_first_failure() -> None:
    """``add`` reads the store's own column lists (:meth:`JobStore.list_of`), which grow with it: a job
    appended after the memo's first failure is read as it is (fails if the memo copied the columns)."""
    store = JobStore()
    store.add("a", submit=0.0, workers=1, gpus_per_worker=1)
    env = SimpleNamespace(jobs=store, cluster_types_of=lambda t: [t])
    state = _State()
    memo = FailedRequests()
    no = Status.unschedulable("no room", "test")
    memo.add(env, 0, 0, no, 0)  # type: ignore[arg-type]
    store.add("b", submit=1.0, workers=2, gpus_per_worker=8)
    memo.add(env, 1, 1, no, 1)  # type: ignore[arg-type]  (2 x 8 GPUs, room for 1: lacks one 8-GPU slot)
    state.release_log.append((0, 0, 4))  # 4 GPUs back: a slot for job 0, none for job 1
    memo.refresh(state)  # type: ignore[arg-type]
    assert set(memo) == {1}
    state.release_log.append((1, 0, 8))  # 8 GPUs back on one node: job 1's missing slot
    memo.refresh(state)  # type: ignore[arg-type]
    assert set(memo) == set()
