"""FGD (``fgd``, a Place plugin): Fragmentation Gradient Descent (Weng et al., ATC'23) on the core
cluster state, GPU shares included (see docs/gpu-sharing.md).

A node's GPU fragmentation w.r.t. a target workload, :class:`FragMeasure`, is in weighted milli-GPU

    F(node) = sum_t w_t frag_t(node),   frag_t = S if type t cannot run on the node,
                                                 sum_g f_g [f_g < d_t] if it can,

with f_g GPU g's free milli, S their sum, d_t the milli of type t (1000 for whole-GPU types). The
target workload is the trace being replayed (``env.trace``; a live scheduler: the jobs known at
setup), as typical pod types (:func:`typical_types`) weighted by their counts. A one-worker job goes
where F grows the least over every fitting (node, GPU) choice: a share tries each distinct free
milli of the node's GPUs that holds it (among equal increases the GPU with the least free milli), a
whole-GPU job takes completely free GPUs, a CPU job changes only the node's free CPU. Ties between
nodes go to the lowest node index (``tie: first``, default) or to a uniform pick from the run's
``env.rng`` (``tie: random``, what the FGD experiment uses); ``score: exact`` compares the exact
increase, ``score: artifact`` ranks nodes like the FGD artifact, by ``int(100 sigmoid(-delta/1000))``
with delta per unit of target weight. Gangs of
several workers are placed by the runner's filter+score greedy (``fw.place_workers``).

The plugin keeps every node's sorted free milli per GPU, its per-share-size counts and its F, and
refreshes the nodes whose free GPUs, free CPU, GPU slots (``ClusterState.shares.version``) or up
state changed since the last placement (one vectorised comparison per placement); the increase is
cached per (node, request shape) until the node changes.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from kant.framework.context import CycleContext, SchedulerEnv
from kant.framework.plugin import Place, Placer
from kant.framework.registry import register_plugin
from kant.framework.status import Status
from kant.model.fit import FULL_GPU_MILLI
from kant.model.state import ClusterState, Placement
from kant.plugins.share_place import smallest

__all__ = ["Fgd", "FgdArgs", "FragMeasure", "TypicalPods", "typical_types"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
MILLI = FULL_GPU_MILLI
_BIG = np.iinfo(np.int64).max // 4  # free CPU of a node that does not model CPU


class TypicalPods:
    """The target workload as FGD sees it: distinct pod types t = (cpu, ngpu, milli, spec) with
    integer weights w_t (their counts in the target workload); ``spec`` is a job-side GPU-type code
    (-1 = any)."""

    def __init__(self, cpu: IntArray, ngpu: IntArray, milli: IntArray, spec: IntArray, weight: IntArray) -> None:
        self.cpu = cpu
        self.ngpu = ngpu
        self.milli = milli
        self.spec = spec
        self.weight = weight

    def __len__(self) -> int:
        return len(self.weight)


def typical_types(cpu: IntArray, ngpu: IntArray, milli: IntArray, spec: IntArray, threshold: float = 95.0,
                  include_cpu_pods: bool = True) -> TypicalPods:
    """Pod types by decreasing count (ties: smaller (cpu, ngpu, milli, spec) first), keeping the
    shortest prefix whose counts reach ``threshold`` percent of the pods (the FGD artifact:
    ``podPopularityThreshold: 95``, ``isInvolvedCpuPods: true``). ``milli`` is 0 for CPU pods."""
    counts: Counter[tuple[int, int, int, int]] = Counter()
    for c, g, m, s in zip(cpu.tolist(), ngpu.tolist(), milli.tolist(), spec.tolist(), strict=True):
        if g == 0 and not include_cpu_pods:
            continue
        counts[(c, g, m, s)] += 1
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    total = sum(counts.values())
    need = threshold / 100.0 * total
    kept: list[tuple[tuple[int, int, int, int], int]] = []
    cum = 0
    for key, n in items:
        if cum >= need and kept:
            break
        kept.append((key, n))
        cum += n
    arr = np.array([[*k, n] for k, n in kept], dtype=np.int64).reshape(-1, 5)
    return TypicalPods(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4])


class FragMeasure:
    """Node GPU fragmentation w.r.t. a target workload (FGD paper, section 4; artifact's
    ``NodeGpuShareFragAmountScore``), in weighted milli-GPU (see the module docstring).

    Type t *can run* when it asks for GPUs, the node's model is allowed for t, the node has cpu_t
    free CPU and at least ngpu_t GPUs with f_g >= d_t. CPU-only types never use GPUs, so for them
    every free GPU share is a fragment (frag = S). Memory is not part of the measure (as in the
    artifact). Equivalently F = W S - sum_{t runs} w_t U_t with W = sum_t w_t and U_t = sum_g f_g
    [f_g >= d_t] the share usable by t.

    The node enters only through, per distinct share size d of the GPU types, ``cnt[d]`` (GPUs
    with f_g >= d) and ``usable[d]`` (their free shares), plus S, free CPU and model:
    :meth:`counts` computes those, :meth:`from_counts` F from them, :meth:`__call__` both, for a
    batch of nodes at once. ``allowed[spec, model]``: may a type with that spec use that model."""

    def __init__(self, typical: TypicalPods, allowed: BoolArray, n_models: int) -> None:
        self.w_all = int(typical.weight.sum())
        gpu = typical.ngpu > 0
        self.c = typical.cpu[gpu]
        self.k = typical.ngpu[gpu]
        d = typical.milli[gpu]
        self.w = typical.weight[gpu]
        dvals, di = np.unique(d, return_inverse=True)
        self.dvals: IntArray = dvals.astype(np.int64)
        self.di: IntArray = di.reshape(-1)
        spec = typical.spec[gpu]
        ok = np.ones((n_models, len(self.w)), dtype=bool)
        for j, s in enumerate(spec.tolist()):
            if s >= 0:
                ok[:, j] = allowed[s]
        self.ok = ok

    def counts(self, free: IntArray) -> tuple[IntArray, IntArray]:
        """``cnt`` (B, D) and ``usable`` (B, D) for ``free`` (B, G) free milli per GPU."""
        ge = free[:, None, :] >= self.dvals[None, :, None]
        cnt: IntArray = ge.sum(axis=2)
        usable: IntArray = (free[:, None, :] * ge).sum(axis=2)
        return cnt, usable

    def from_counts(self, cnt: IntArray, usable: IntArray, s: IntArray, cpu: IntArray, model: IntArray) -> IntArray:
        """F from per-share-size counts (B, D), total free ``s`` (B,), free CPU and model (B,)."""
        di = self.di
        fit = (cnt[:, di] >= self.k) & (cpu[:, None] >= self.c) & self.ok[model]
        e: IntArray = (fit * usable[:, di]) @ self.w
        return self.w_all * s - e

    def __call__(self, free: IntArray, cpu: IntArray, model: IntArray) -> IntArray:
        """F for a batch: ``free`` (B, G) free milli per GPU, ``cpu`` (B,) free CPU, ``model`` (B,)."""
        cnt, usable = self.counts(free)
        return self.from_counts(cnt, usable, free.sum(axis=1), cpu, model)

    def increase(self, free: IntArray, cpu: IntArray, model: IntArray, f0: IntArray, ngpu: int, milli: int,
                 cpu_req: int, cnt_use: tuple[IntArray, IntArray] | None = None) -> tuple[IntArray, IntArray]:
        """For nodes (rows of ``free``, sorted largest first, with F ``f0`` and, if known, ``counts``
        ``cnt_use``), the least increase of F from placing one worker of (``ngpu`` GPUs at ``milli``,
        ``cpu_req`` CPU) and the free milli of the GPU it uses (1000 for whole GPUs, -1 for none)."""
        cnt, use = self.counts(free) if cnt_use is None else cnt_use
        s = free.sum(axis=1)
        cpu1 = cpu - cpu_req
        n = len(free)
        if ngpu == 0:
            return self.from_counts(cnt, use, s, cpu1, model) - f0, np.full(n, -1, dtype=np.int64)
        if milli >= MILLI:
            k = ngpu  # k whole GPUs (1000 >= every share size) go from free to used
            f1 = self.from_counts(cnt - k, use - k * MILLI, s - k * MILLI, cpu1, model)
            return f1 - f0, np.full(n, MILLI, dtype=np.int64)
        ok = free >= milli
        ok[:, 1:] &= free[:, 1:] != free[:, :-1]  # one candidate per distinct free share
        r, j = np.nonzero(ok)
        f = free[r, j][:, None]
        after = f - milli
        dv = self.dvals[None, :]
        was, now = f >= dv, after >= dv
        c1 = cnt[r] - was + now
        u1 = use[r] - f * was + after * now
        delta = self.from_counts(c1, u1, s[r] - milli, cpu1[r], model[r]) - f0[r]
        fval = f[:, 0]
        order = np.lexsort((fval, delta, r))
        rs = r[order]
        first = np.ones(rs.size, dtype=bool)
        first[1:] = rs[1:] != rs[:-1]
        sel = order[first]
        return delta[sel], fval[sel]


class FgdArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    #: percent of the target's pods the kept pod types cover (100 = every type, the paper's definition)
    popularity_threshold: float = Field(100.0, gt=0, le=100)
    include_cpu_pods: bool = True
    score: Literal["exact", "artifact"] = "exact"
    #: equal best keys: the lowest node index, or a uniform pick from the run's ``env.rng``
    tie: Literal["first", "random"] = "first"


@register_plugin
class Fgd(Place):
    NAME = "fgd"
    Args = FgdArgs
    SHARES = True

    def setup(self, env: SchedulerEnv) -> None:
        a = self.args
        assert isinstance(a, FgdArgs)
        cluster = env.cluster
        src = env.trace if env.trace is not None else env.jobs
        ngpu = np.asarray(src.gpus_per_worker, dtype=np.int64)
        milli = np.where(ngpu > 0, np.asarray(src.gpu_milli, dtype=np.int64), 0)
        spec = np.asarray(src.gpu_type, dtype=np.int64)
        self.typical = typical_types(np.asarray(src.cpu_milli, dtype=np.int64), ngpu, milli, spec,
                                     a.popularity_threshold, a.include_cpu_pods)
        n_models = max(len(cluster.gpu_type_names), 1)
        names = src.gpu_type_names
        allowed = np.zeros((max(len(names), 1), n_models), dtype=bool)
        for code, name in enumerate(names):
            for t in name.split("|"):
                c = cluster.gpu_type_code(t.strip())
                if c >= 0:
                    allowed[code, c] = True
        self.measure = FragMeasure(self.typical, allowed, n_models)
        self._exact = a.score == "exact"
        self._random_tie = a.tie == "random"
        n, g = cluster.n_nodes, max(cluster.max_gpus_per_node, 1)
        self._model = cluster.gpu_type.copy()
        self._cpu_unmodelled = env.cpu_unmodelled
        self._free = np.where(np.arange(g)[None, :] < cluster.gpus[:, None], MILLI, 0).astype(np.int64)
        self._cpu = np.where(env.cpu_unmodelled, _BIG, cluster.cpu_milli).astype(np.int64)
        self._cnt, self._use = self.measure.counts(self._free)
        self._f = self.measure.from_counts(self._cnt, self._use, self._free.sum(axis=1), self._cpu, self._model)
        #: per node, bumped whenever its row changes; per request shape, the increase and GPU pick of
        #: every node and the stamp they were computed at (only stale nodes are evaluated again)
        self._stamp = np.zeros(n, dtype=np.int64)
        self._cache: dict[tuple[int, int, int], tuple[IntArray, IntArray, IntArray]] = {}
        # what each node's cached row was computed from
        self._seen: ClusterState | None = None
        self._at_free = cluster.gpus.copy()
        self._at_cpu = cluster.cpu_milli.copy()
        self._at_share = np.zeros(n, dtype=np.int64)
        self._at_up = np.ones(n, dtype=bool)

    def _sync(self, state: ClusterState) -> None:
        """Refresh the cached rows of nodes that changed since they were computed."""
        if self._seen is not state:  # another state (a planning view): compare everything afresh
            self._seen = state
            changed = np.ones(len(self._at_free), dtype=bool)
        else:
            changed = ((state.free != self._at_free) | (state.free_cpu != self._at_cpu)
                       | (state.shares.version != self._at_share) | (state.up != self._at_up))
        nodes = np.flatnonzero(changed)
        if not nodes.size:
            return
        g = self._free.shape[1]
        for n in nodes.tolist():
            row = state.gpu_free_milli(n) if state.up[n] else []
            self._free[n] = row + [0] * (g - len(row))
        self._cpu[nodes] = np.where(self._cpu_unmodelled[nodes], _BIG, state.free_cpu[nodes])
        rows = self._free[nodes]
        cnt, use = self.measure.counts(rows)
        self._cnt[nodes], self._use[nodes] = cnt, use
        self._f[nodes] = self.measure.from_counts(cnt, use, rows.sum(axis=1), self._cpu[nodes], self._model[nodes])
        self._stamp[nodes] += 1
        self._at_free[nodes] = state.free[nodes]
        self._at_cpu[nodes] = state.free_cpu[nodes]
        self._at_share[nodes] = state.shares.version[nodes]
        self._at_up[nodes] = state.up[nodes]

    def artifact_key(self, delta: IntArray) -> npt.NDArray[np.float64]:
        """The FGD artifact's node score for increases ``delta``, negated (smallest key wins)."""
        x = delta / (1000.0 * self.measure.w_all)
        key: npt.NDArray[np.float64] = -np.floor(100.0 / (1.0 + np.exp(x)))
        return key

    def place(self, ctx: CycleContext, job: int, fw: Placer) -> Placement | Status:
        if fw.job_workers[job] != 1:
            return fw.place_workers(ctx, job)
        nodes = np.flatnonzero(fw.candidate_mask(ctx, job))
        if not nodes.size:
            return fw.place_workers(ctx, job)  # says why, the runner's way
        self._sync(ctx.state)
        g, milli = fw.job_gpus[job], fw.job_milli[job]
        share = fw.is_share(job)
        m = milli if share else MILLI
        c = fw.job_cpu[job]
        shape = (g, m, c)
        cached = self._cache.get(shape)
        if cached is None:
            n = len(self._stamp)
            cached = self._cache[shape] = (np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                                           np.full(n, -1, dtype=np.int64))
        d_all, p_all, at = cached
        stale = nodes[at[nodes] != self._stamp[nodes]]
        if stale.size:
            d, p = self.measure.increase(self._free[stale], self._cpu[stale], self._model[stale], self._f[stale],
                                         g, m, c, (self._cnt[stale], self._use[stale]))
            d_all[stale], p_all[stale], at[stale] = d, p, self._stamp[stale]
        delta, pick = d_all[nodes], p_all[nodes]
        key = delta if self._exact else self.artifact_key(delta)
        i = smallest(ctx, key, self._random_tie)
        node = int(nodes[i])
        if share:
            return Placement((node,), 1, fw.job_cpu[job], fw.job_mem[job], milli, (int(pick[i]),))
        return Placement((node,), g, fw.job_cpu[job], fw.job_mem[job])
