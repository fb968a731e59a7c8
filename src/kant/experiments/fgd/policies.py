"""Placement policies of the FGD experiment, one class each, vectorised over the feasible nodes.

Every policy gets the pod and the indices of the nodes that can host it now (``nodes``, from
:meth:`~kant.experiments.fgd.model.GpuShareState.fit_mask`), and returns ``(node, gpus)``: the node
and the GPU slot(s) of that node to use. Node choice minimises a per-node key (the exact rule of
each policy is in its docstring); several nodes with the same best key are a tie, broken like the
Kubernetes scheduler's ``selectHost`` by a uniformly random pick from the seeded ``rng``
(``tie: random``, default) or by the lowest node index (``tie: first``).

Unless a policy says otherwise, GPUs within the chosen node are: for a fractional pod, the GPU
with the least free share that still holds it (best fit, lowest index on ties); for a whole-GPU
pod, the lowest-index completely free GPUs (which free GPUs are taken does not change any measure:
they are interchangeable).

Names: ``random``, ``best-fit``, ``dot-product``, ``gpu-packing``, ``gpu-clustering``, ``fgd``,
``e-binpack``. Build one with :func:`make_policy`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from kant.config.validation import validate
from kant.errors import ConfigError, SchedulingError
from kant.experiments.fgd.model import MILLI, GpuShareState, IntArray, Pod, Workload
from kant.plugins.fgd import FragMeasure, TypicalPods, typical_types

__all__ = [
    "POLICIES",
    "POLICY_NAMES",
    "BestFitPolicy",
    "DotProductPolicy",
    "EBinpackPolicy",
    "FgdPolicy",
    "FragMeasure",
    "GpuClusteringPolicy",
    "GpuPackingPolicy",
    "Policy",
    "RandomPolicy",
    "TypicalPods",
    "make_policy",
    "typical_pods",
]

Choice = tuple[int, tuple[int, ...]]


class TieArgs(BaseModel):
    """Arguments every policy takes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tie: Literal["random", "first"] = "random"


class Policy(ABC):
    """Base class. ``reset`` is called once per run (after the state is built, before the first pod);
    ``choose`` once per pod that fits somewhere; ``observe`` after each placement."""

    NAME: ClassVar[str]
    Args: ClassVar[type[TieArgs]] = TieArgs

    def __init__(self, args: TieArgs | None = None) -> None:
        self.args = args if args is not None else self.Args()
        self.rng = np.random.default_rng(0)

    def reset(self, state: GpuShareState, target: Workload, rng: np.random.Generator) -> None:
        self.rng = rng

    @abstractmethod
    def choose(self, state: GpuShareState, pod: Pod, nodes: IntArray) -> Choice: ...

    def observe(self, state: GpuShareState, node: int) -> None:  # noqa: B027 - optional hook
        """Called after each placement on ``node`` (policies with caches override it)."""

    def _best(self, nodes: IntArray, key: npt.NDArray[Any]) -> int:
        """The node with the smallest ``key``; ties broken per ``tie``."""
        best = key.min()
        cand = nodes[key == best]
        if cand.size == 1 or self.args.tie == "first":
            return int(cand[0])
        return int(cand[int(self.rng.integers(cand.size))])


# ---------------------------------------------------------------------------------------------
class RandomPolicy(Policy):
    """``random``: a node drawn uniformly from the feasible nodes; a fractional pod gets a GPU drawn
    uniformly from that node's GPUs that hold it (the FGD artifact's ``random`` GPU selection)."""

    NAME = "random"

    def choose(self, state: GpuShareState, pod: Pod, nodes: IntArray) -> Choice:
        node = int(nodes[int(self.rng.integers(nodes.size))])
        if pod.ngpu == 1 and pod.milli < MILLI:
            fits = np.flatnonzero(state.gpu_free[node] >= pod.milli)
            return node, (int(fits[int(self.rng.integers(fits.size))]),)
        return node, state.default_gpus(node, pod)


# ---------------------------------------------------------------------------------------------
class BestFitArgs(TieArgs):
    cpu_weight: float = Field(0.5, ge=0)
    gpu_weight: float = Field(0.5, ge=0)
    mem_weight: float = Field(0.0, ge=0)


class BestFitPolicy(Policy):
    """``best-fit`` (Kubernetes-style best fit, as the FGD artifact's BestFit): minimise the weighted
    normalised residual left on the node after placing the pod,

        key(n) = w_cpu (cpu_free - cpu) / CPU_MAX + w_gpu (gpu_free - ngpu x milli) / GPU_MAX
                 + w_mem (mem_free - mem) / MEM_MAX,

    with ``gpu_free`` the node's total free milli-GPU and ``*_MAX`` the largest node capacity of the
    inventory (openb: 128 CPUs, 8 GPUs, 1 TiB). Defaults w_cpu = w_gpu = 0.5, w_mem = 0."""

    NAME = "best-fit"
    Args = BestFitArgs

    def reset(self, state: GpuShareState, target: Workload, rng: np.random.Generator) -> None:
        super().reset(state, target, rng)
        inv = state.inv
        a = self.args
        assert isinstance(a, BestFitArgs)
        self._wc = a.cpu_weight / max(int(inv.cpu.max()), 1)
        self._wg = a.gpu_weight / max(inv.max_gpus * MILLI, 1)
        self._wm = a.mem_weight / max(int(inv.mem.max()), 1)

    def choose(self, state: GpuShareState, pod: Pod, nodes: IntArray) -> Choice:
        key = self._wc * (state.cpu_free[nodes] - pod.cpu) + self._wg * (state.total_free[nodes] - pod.gpu_milli)
        if self._wm:
            key = key + self._wm * (state.mem_free[nodes] - pod.mem)
        node = self._best(nodes, key)
        return node, state.default_gpus(node, pod)


# ---------------------------------------------------------------------------------------------
class DotProductArgs(TieArgs):
    prefer: Literal["min", "max"] = "min"


class DotProductPolicy(Policy):
    """``dot-product`` (Tetris alignment, as the FGD artifact's DotProd): score each node by the dot
    product of its free vector and the pod's request vector, both normalised by the largest node
    capacity (CPU_MAX, GPU_MAX = max GPUs x 1000):

        dot(n) = (cpu_free / CPU_MAX)(cpu / CPU_MAX) + gpu_term,

    ``gpu_term`` = (f / 1000)(milli / 1000) for a fractional pod, with f the free share of the GPU
    it would use; (gpu_free / GPU_MAX)(ngpu x 1000 / GPU_MAX) for a whole-GPU pod; 0 for a CPU pod.
    ``prefer: min`` (default, as the FGD artifact, which scores 1 - dot) picks the smallest dot
    product, i.e. the node whose leftover is least aligned with the pod (packing), and the
    best-fitting GPU (smallest f); ``prefer: max`` is Tetris' original rule (largest alignment) and
    takes the GPU with the largest free share."""

    NAME = "dot-product"
    Args = DotProductArgs

    def reset(self, state: GpuShareState, target: Workload, rng: np.random.Generator) -> None:
        super().reset(state, target, rng)
        self._cmax = float(max(int(state.inv.cpu.max()), 1))
        self._gmax = float(state.inv.max_gpus * MILLI)
        a = self.args
        assert isinstance(a, DotProductArgs)
        self._sign = 1.0 if a.prefer == "min" else -1.0

    def choose(self, state: GpuShareState, pod: Pod, nodes: IntArray) -> Choice:
        cm = self._cmax
        dot = (state.cpu_free[nodes] / cm) * (pod.cpu / cm)
        if pod.ngpu == 1 and pod.milli < MILLI:
            free = state.gpu_free[nodes]
            f = np.where(free >= pod.milli, free, MILLI + 1).min(axis=1) if self._sign > 0 else free.max(axis=1)
            dot = dot + (f / MILLI) * (pod.milli / MILLI)
            node = self._best(nodes, self._sign * dot)
            fv = state.gpu_free[node]
            g = int(np.argmin(np.where(fv >= pod.milli, fv, MILLI + 1))) if self._sign > 0 else int(np.argmax(fv))
            return node, (g,)
        if pod.ngpu:
            dot = dot + (state.total_free[nodes] / self._gmax) * (pod.gpu_milli / self._gmax)
        node = self._best(nodes, self._sign * dot)
        return node, state.default_gpus(node, pod)


# ---------------------------------------------------------------------------------------------
class GpuPackingPolicy(Policy):
    """``gpu-packing`` (the FGD artifact's GpuPacking): prefer, in this order,

    1. a partly used GPU (a fractional pod fitting on a GPU with less than 1000 free): score
       100 - f/100, f the least free share that holds the pod (the fuller the GPU, the better);
    2. a completely free GPU on a node already in use: score 50 - (free GPUs it takes), at least 33;
    3. a node whose GPUs are all free: score 33 - (its free GPUs), i.e. smaller idle nodes first.

    The highest score wins (key = -score). CPU pods score 0 everywhere (a random feasible node).
    The GPU is the best-fitting one (the least free share that holds the pod)."""

    NAME = "gpu-packing"

    def choose(self, state: GpuShareState, pod: Pod, nodes: IntArray) -> Choice:
        if pod.ngpu == 0:
            node = self._best(nodes, np.zeros(nodes.size))
            return node, ()
        idle = state.idle[nodes]
        full = state.full_free[nodes]
        case3 = (100 // 3) - full
        if pod.milli < MILLI:
            free = state.gpu_free[nodes]
            f = np.where(free >= pod.milli, free, MILLI + 1).min(axis=1)
            used = np.where(f < MILLI, 100.0 - f / 100.0, 50.0 - 1.0)
        else:
            used = np.full(nodes.size, float(max(50 - pod.ngpu, 100 // 3)))
        score = np.where(idle, case3, used)
        node = self._best(nodes, -score)
        return node, state.default_gpus(node, pod)


# ---------------------------------------------------------------------------------------------
class GpuClusteringPolicy(Policy):
    """``gpu-clustering`` (the FGD artifact's GpuClustering): keep pods of the same kind of GPU load
    together. Kinds: share, 1, 2, 4, 8 whole GPUs, other counts (:func:`~kant.experiments.fgd.model.
    load_kind`); a node's kinds are those of the GPU pods placed on it. With u = (GPU_MAX - gpu_free)
    / GPU_MAX (GPU_MAX = max GPUs x 1000), a GPU pod scores

        75 + 25u  if the node holds only the pod's kind,
        50 + 25u  if it holds the pod's kind and others,
        25 + 25u  if it holds no GPU pod yet,
         0 + 25u  if it holds only other kinds;

    the highest score wins. CPU pods score 0 everywhere (a random feasible node)."""

    NAME = "gpu-clustering"

    def reset(self, state: GpuShareState, target: Workload, rng: np.random.Generator) -> None:
        super().reset(state, target, rng)
        self._gmax = float(state.inv.max_gpus * MILLI)

    def choose(self, state: GpuShareState, pod: Pod, nodes: IntArray) -> Choice:
        if pod.ngpu == 0:
            return self._best(nodes, np.zeros(nodes.size)), ()
        kinds = state.kinds[nodes]
        bit = 1 << pod.kind
        same = (kinds & bit) != 0
        tier = np.where(same, np.where(kinds == bit, 75.0, 50.0), np.where(kinds == 0, 25.0, 0.0))
        score = tier + 25.0 * (self._gmax - state.total_free[nodes]) / self._gmax
        node = self._best(nodes, -score)
        return node, state.default_gpus(node, pod)


# ---------------------------------------------------------------------------------------------
def typical_pods(target: Workload, threshold: float = 95.0, include_cpu_pods: bool = True) -> TypicalPods:
    """Pod types of ``target`` by decreasing count (ties: smaller (cpu, ngpu, milli, spec) first),
    keeping the shortest prefix whose counts reach ``threshold`` percent of the pods (the core
    :func:`kant.plugins.fgd.typical_types`, which the core ``fgd`` plugin uses too)."""
    return typical_types(target.cpu, target.ngpu, target.milli, target.spec, threshold, include_cpu_pods)


class FgdArgs(TieArgs):
    popularity_threshold: float = Field(100.0, gt=0, le=100)
    include_cpu_pods: bool = True
    score: Literal["exact", "artifact"] = "exact"


_MISSING = np.iinfo(np.int64).min


class FgdPolicy(Policy):
    """``fgd`` (Fragmentation Gradient Descent, Weng et al. ATC'23): place the pod where the node
    fragmentation :class:`FragMeasure` w.r.t. the target workload (:func:`typical_pods` of the
    pod list being replayed) grows the least, over all feasible (node, GPU) choices:

        choose argmin_{n, g} F(node n after placing the pod on GPU(s) g) - F(node n now).

    A fractional pod tries every GPU of the node that holds it (equal free shares are the same
    choice; among equal increases the GPU with the least free share wins); a whole-GPU pod takes
    completely free GPUs (all choices are equivalent); a CPU pod only changes the node's free CPU.
    Ties between nodes: ``tie``. ``score: exact`` (default) compares the exact integer increase;
    ``score: artifact`` ranks nodes like the FGD artifact, by ``int(100 sigmoid(-delta/1000))``
    with delta the increase per unit of target weight (the artifact's frequencies sum to 1), so
    increases within ~0.04 GPU tie and go to ``tie``. The artifact's own setting is
    ``score: artifact``, ``tie: first`` (its scheduler takes the smallest node name among equal
    scores; openb's node list is in name order) and ``popularity_threshold`` 95.

    ``popularity_threshold`` (percent, default 100 = every pod type of the list, as the paper
    defines the target workload) keeps only the most frequent pod types that cover that share of
    the pods; the FGD artifact runs with 95, which drops the rare multi-GPU types (see
    docs/experiments.md for what that does).

    Speed: F depends on a node only through (model, free CPU, sorted free shares), so nodes are
    grouped into such *states*; the increase is cached per (state, pod shape) and only states not
    seen before with that shape are evaluated, in one vectorised batch per pod, from the state's
    per-share-size counts (:meth:`FragMeasure.counts`) updated for the one GPU that changes. The F of
    a state reached by a placement is the F before plus the chosen increase (no re-evaluation)."""

    NAME = "fgd"
    Args = FgdArgs

    def reset(self, state: GpuShareState, target: Workload, rng: np.random.Generator) -> None:
        super().reset(state, target, rng)
        a = self.args
        assert isinstance(a, FgdArgs)
        inv = state.inv
        self.typical = typical_pods(target, a.popularity_threshold, a.include_cpu_pods)
        self.measure = FragMeasure(self.typical, target.allowed, len(inv.model_names) or 1)
        self._exact = a.score == "exact"
        g = inv.max_gpus
        nd = len(self.measure.dvals)
        self._keys: dict[tuple[int, int, tuple[int, ...]], int] = {}
        cap = max(64, 2 * inv.n_nodes)
        self._st_gpu = np.zeros((cap, g), dtype=np.int64)
        self._st_cpu = np.zeros(cap, dtype=np.int64)
        self._st_model = np.zeros(cap, dtype=np.int64)
        self._st_s = np.zeros(cap, dtype=np.int64)
        self._st_f = np.full(cap, _MISSING, dtype=np.int64)
        self._st_cnt = np.zeros((cap, nd), dtype=np.int64)
        self._st_use = np.zeros((cap, nd), dtype=np.int64)
        self._st_has = np.zeros(cap, dtype=bool)
        self._n_states = 0
        self._delta: dict[int, IntArray] = {}
        self._choice: dict[int, IntArray] = {}
        self._node_sid = np.zeros(inv.n_nodes, dtype=np.int64)
        self._next_f = _MISSING
        for n in range(inv.n_nodes):
            self._node_sid[n] = self._sid(state, n)

    # --- state registry --------------------------------------------------------------------------
    def _sid(self, state: GpuShareState, node: int) -> int:
        row = sorted(state.gpu_free[node].tolist(), reverse=True)
        key = (int(state.inv.model[node]), int(state.cpu_free[node]), tuple(row))
        sid = self._keys.get(key)
        if sid is None:
            sid = self._n_states
            if sid == len(self._st_cpu):
                self._grow()
            self._keys[key] = sid
            self._st_gpu[sid] = row
            self._st_cpu[sid] = key[1]
            self._st_model[sid] = key[0]
            self._st_s[sid] = sum(row)
            self._n_states += 1
        return sid

    def _grow(self) -> None:
        def double(a: npt.NDArray[Any], fill: Any) -> npt.NDArray[Any]:
            return np.concatenate([a, np.full_like(a, fill)])

        self._st_gpu = double(self._st_gpu, 0)
        self._st_cpu = double(self._st_cpu, 0)
        self._st_model = double(self._st_model, 0)
        self._st_s = double(self._st_s, 0)
        self._st_f = double(self._st_f, _MISSING)
        self._st_cnt = double(self._st_cnt, 0)
        self._st_use = double(self._st_use, 0)
        self._st_has = double(self._st_has, False)

    def _cache(self, shape: int) -> tuple[IntArray, IntArray]:
        d = self._delta.get(shape)
        cap = len(self._st_cpu)
        if d is None or len(d) < cap:
            old = 0 if d is None else len(d)
            nd = np.full(cap, _MISSING, dtype=np.int64)
            nc = np.zeros(cap, dtype=np.int64)
            if d is not None:
                nd[:old] = d
                nc[:old] = self._choice[shape]
            self._delta[shape], self._choice[shape] = nd, nc
            return nd, nc
        return d, self._choice[shape]

    def _prepare(self, sids: IntArray) -> None:
        """Make sure counts and F are known for states ``sids``."""
        todo = sids[~self._st_has[sids]]
        if todo.size:
            cnt, use = self.measure.counts(self._st_gpu[todo])
            self._st_cnt[todo] = cnt
            self._st_use[todo] = use
            self._st_has[todo] = True
        todo = sids[self._st_f[sids] == _MISSING]
        if todo.size:
            self._st_f[todo] = self.measure.from_counts(
                self._st_cnt[todo], self._st_use[todo], self._st_s[todo], self._st_cpu[todo], self._st_model[todo])

    def _evaluate(self, sids: IntArray, pod: Pod) -> tuple[IntArray, IntArray]:
        """Best increase of F and the free share of the GPU to use, for states ``sids``."""
        self._prepare(sids)
        m = self.measure
        cnt, use = self._st_cnt[sids], self._st_use[sids]
        s = self._st_s[sids]
        cpu = self._st_cpu[sids] - pod.cpu
        model = self._st_model[sids]
        f0 = self._st_f[sids]
        if pod.ngpu == 0:
            return m.from_counts(cnt, use, s, cpu, model) - f0, np.full(sids.size, -1, dtype=np.int64)
        if pod.milli >= MILLI:
            k = pod.ngpu  # k whole GPUs (1000 >= every share size) go from free to used
            f1 = m.from_counts(cnt - k, use - k * MILLI, s - k * MILLI, cpu, model)
            return f1 - f0, np.full(sids.size, MILLI, dtype=np.int64)
        x = self._st_gpu[sids]
        ok = x >= pod.milli
        ok[:, 1:] &= x[:, 1:] != x[:, :-1]  # one candidate per distinct free share
        r, j = np.nonzero(ok)
        f = x[r, j][:, None]
        after = f - pod.milli
        dv = m.dvals[None, :]
        was, now = f >= dv, after >= dv
        c1 = cnt[r] - was + now
        u1 = use[r] - f * was + after * now
        delta = m.from_counts(c1, u1, s[r] - pod.milli, cpu[r], model[r]) - f0[r]
        fval = f[:, 0]
        order = np.lexsort((fval, delta, r))
        rs = r[order]
        first = np.ones(rs.size, dtype=bool)
        first[1:] = rs[1:] != rs[:-1]
        sel = order[first]
        return delta[sel], fval[sel]

    def artifact_key(self, delta: IntArray) -> npt.NDArray[np.float64]:
        """The FGD artifact's node score for increases ``delta`` (weighted milli-GPU), negated so that
        the smallest key wins: -int(100 sigmoid(-(delta / W) / 1000)), W the total target weight."""
        x = delta / (1000.0 * self.measure.w_all)
        key: npt.NDArray[np.float64] = -np.floor(100.0 / (1.0 + np.exp(x)))
        return key

    # --- policy ------------------------------------------------------------------------------------
    def choose(self, state: GpuShareState, pod: Pod, nodes: IntArray) -> Choice:
        sids = self._node_sid[nodes]
        dcache, ccache = self._cache(pod.shape)
        d = dcache[sids]
        miss = d == _MISSING
        if miss.any():
            todo = np.unique(sids[miss])
            dd, cc = self._evaluate(todo, pod)
            dcache[todo] = dd
            ccache[todo] = cc
            d = dcache[sids]
        node = self._best(nodes, d if self._exact else self.artifact_key(d))
        sid = int(self._node_sid[node])
        f_before = int(self._st_f[sid])
        self._next_f = f_before + int(dcache[sid]) if f_before != _MISSING else _MISSING
        if pod.ngpu == 1 and pod.milli < MILLI:
            return node, (state.gpu_with_free(node, int(ccache[sid])),)
        return node, state.default_gpus(node, pod)

    def observe(self, state: GpuShareState, node: int) -> None:
        sid = self._sid(state, node)
        self._node_sid[node] = sid
        if self._st_f[sid] == _MISSING and self._next_f != _MISSING:
            self._st_f[sid] = self._next_f  # F(after) = F(before) + the increase just chosen
        self._next_f = _MISSING

    def fragmentation(self, state: GpuShareState) -> IntArray:
        """F of every node now (weighted milli-GPU; divide by the total weight for milli-GPU)."""
        return self.measure(state.gpu_free, state.cpu_free, state.inv.model)

    def check(self, state: GpuShareState) -> None:
        """Verify the caches from scratch (tests, debugging): every node's state matches the node,
        and every known F and per-size count equals a fresh evaluation."""
        for n in range(state.inv.n_nodes):
            sid = int(self._node_sid[n])
            row = sorted(state.gpu_free[n].tolist(), reverse=True)
            if self._st_gpu[sid].tolist() != row or int(self._st_cpu[sid]) != int(state.cpu_free[n]):
                raise SchedulingError(f"fgd: node {n} has a stale state")
        k = self._n_states
        known = np.flatnonzero(self._st_f[:k] != _MISSING)
        fresh = self.measure(self._st_gpu[known], self._st_cpu[known], self._st_model[known])
        if not np.array_equal(fresh, self._st_f[known]):
            raise SchedulingError("fgd: a cached fragmentation is stale")
        has = np.flatnonzero(self._st_has[:k])
        cnt, use = self.measure.counts(self._st_gpu[has])
        if not (np.array_equal(cnt, self._st_cnt[has]) and np.array_equal(use, self._st_use[has])):
            raise SchedulingError("fgd: cached share counts are stale")


# ---------------------------------------------------------------------------------------------
class EBinpackPolicy(Policy):
    """``e-binpack``: Kant's E-Binpack (fill partly used nodes first, prefer exact fits, keep empty
    nodes whole for big requests) adapted to fractional GPUs. Lexicographic key, smallest first:

    * fractional pod (share m), with f the least free share of the node's GPUs that holds it:
      (GPU tier: 0 exact fit f = m, 1 partly used GPU f < 1000, 2 fresh GPU f = 1000;
      node tier: 0 node already in use, 1 idle node; f - m; node free milli-GPU - m);
      so a share goes to an exactly fitting GPU, else the fullest partly used GPU, and breaks a
      fresh GPU only when no used GPU holds it, and then preferably on a node already in use;
    * whole-GPU pod (k GPUs): (tier: 0 the pod takes the node's last free GPU shares, 1 node in use,
      2 idle node; free whole GPUs left; node free milli-GPU left): best fit over nodes, never
      breaking an idle node while a used node fits, unless the pod fills the idle node exactly;
    * CPU pod: (node free milli-GPU; free CPU left): CPU pods go where they strand the fewest
      GPUs (fully allocated nodes first).

    GPU choice: the best-fitting GPU (share), lowest-index free GPUs (whole)."""

    NAME = "e-binpack"

    def choose(self, state: GpuShareState, pod: Pod, nodes: IntArray) -> Choice:
        total = state.total_free[nodes]
        gmax = state.inv.max_gpus * MILLI + 1
        if pod.ngpu == 0:
            cpu_left = state.cpu_free[nodes] - pod.cpu
            cmax = int(cpu_left.max()) + 1
            key = total * cmax + cpu_left
        elif pod.milli < MILLI:
            free = state.gpu_free[nodes]
            f = np.where(free >= pod.milli, free, MILLI + 1).min(axis=1)
            gpu_tier = np.where(f == pod.milli, 0, np.where(f < MILLI, 1, 2))
            node_tier = state.idle[nodes].astype(np.int64)
            key = ((gpu_tier * 2 + node_tier) * (MILLI + 1) + (f - pod.milli)) * gmax + (total - pod.milli)
        else:
            left_total = total - pod.gpu_milli
            tier = np.where(left_total == 0, 0, np.where(state.idle[nodes], 2, 1))
            left_full = state.full_free[nodes] - pod.ngpu
            key = (tier * (state.inv.max_gpus + 1) + left_full) * gmax + left_total
        node = self._best(nodes, key)
        return node, state.default_gpus(node, pod)


# ---------------------------------------------------------------------------------------------
POLICIES: dict[str, type[Policy]] = {
    p.NAME: p
    for p in (
        RandomPolicy, BestFitPolicy, DotProductPolicy, GpuPackingPolicy, GpuClusteringPolicy, FgdPolicy,
        EBinpackPolicy,
    )
}
POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)


def make_policy(name: str, args: dict[str, Any] | None = None) -> Policy:
    """A policy by name with validated ``args``; bad names or args raise :class:`ConfigError`
    naming the key path (``<policy>.args.<key>``)."""
    cls = POLICIES.get(name)
    if cls is None:
        raise ConfigError("fgd experiment", "policy", f"unknown policy {name!r}; expected one of {', '.join(POLICIES)}")
    return cls(validate(cls.Args, args or {}, "fgd experiment", f"{name}.args"))

