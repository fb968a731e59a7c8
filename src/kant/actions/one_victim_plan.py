"""The one-victim plan of :func:`kant.actions.victims.choose_victims`: for a one-worker job of whole
GPUs, the exact lexicographic (highest rank, count, work lost, job rows) set of victims on one node,
found with a few NumPy passes over the candidates' (node, GPUs) entries instead of trial evictions."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from kant.framework.context import CycleContext

__all__ = ["MAX_ENUM", "Ranked", "single_worker_plan", "single_worker_plan_general"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: at most this many candidates on one node are enumerated exactly; above it the greedy plan is used
MAX_ENUM = 16


class Ranked(Protocol):
    """What the plan reads of the candidates (:class:`kant.actions.victims.Candidates`)."""

    @property
    def jobs(self) -> IntArray: ...
    @property
    def rank(self) -> FloatArray: ...
    @property
    def lost(self) -> FloatArray: ...


def single_worker_plan(ctx: CycleContext, job: int, cands: Ranked, idx: IntArray, node: IntArray,
                        gpus: IntArray) -> list[int] | None:
    """Exact lexicographic (max rank, count, work lost, rows) victim set for a one-worker job, GPUs
    only; returns indices into ``cands``."""
    need = int(ctx.env.jobs.gpus_per_worker[job]) - ctx.state.free[node]
    has_need = need > 0
    if has_need.any():
        # The common case in one step: no node's P* (see single_worker_plan_general) is under the
        # lowest rank r0 of the entries, so an entry of rank r0 that frees enough alone makes P* =
        # r0 and count 1 on its node, the best there is; the tied nodes are then exactly those with
        # such an entry, and the general rule's step 3 picks among these entries as below.
        i_n, g_n, need_n = idx[has_need], gpus[has_need], need[has_need]
        rank = cands.rank[i_n]
        one = np.flatnonzero((rank == rank.min()) & (g_n >= need_n))
        if len(one):
            rows = i_n[one]
            return [int(rows[np.lexsort((cands.jobs[rows], cands.lost[rows]))[0]])]
    return single_worker_plan_general(ctx, job, cands, idx, node, gpus)


def single_worker_plan_general(ctx: CycleContext, job: int, cands: Ranked, idx: IntArray, node: IntArray,
                                gpus: IntArray) -> list[int] | None:
    """:func:`single_worker_plan` by its whole rule (the reference for its one-step case)."""
    state = ctx.state
    g = int(ctx.env.jobs.gpus_per_worker[job])
    need_all = g - state.free
    has_need = need_all[node] > 0
    idx, node, gpus = idx[has_need], node[has_need], gpus[has_need]
    if len(idx) == 0:
        return None
    rank = cands.rank[idx]
    # 1. per node, the lowest achievable highest rank P*: take entries by rank until enough is freed
    order = np.lexsort((rank, node))
    n_s, r_s = node[order], rank[order]
    start1 = _group_start(n_s)
    cum = _cumsum_from(gpus[order], start1)
    enough = cum >= need_all[n_s]
    at = _first_per_group(n_s, enough)
    if len(at) == 0:
        return None
    p_of_node = np.full(len(state.free), np.inf)
    p_of_node[n_s[at]] = r_s[at]
    # 2. with ranks <= P*, the fewest entries: largest first
    elig = rank <= p_of_node[node]
    n2, g2 = node[elig], gpus[elig]
    order2 = np.lexsort((-g2, n2))
    n2s = n2[order2]
    start2 = _group_start(n2s)
    cum2 = _cumsum_from(g2[order2], start2)
    at2 = _first_per_group(n2s, cum2 >= need_all[n2s])
    nodes2 = n2s[at2]
    count = at2 - start2[at2] + 1
    best = np.lexsort((count, p_of_node[nodes2]))[0]
    best_p, best_c = p_of_node[nodes2[best]], int(count[best])
    tied = np.zeros(len(state.free), dtype=bool)
    tied[nodes2[(p_of_node[nodes2] == best_p) & (count == best_c)]] = True
    # 3. least work lost among sets of that size and rank on the tied nodes
    e_sel = elig & tied[node]
    sel = np.flatnonzero(e_sel)
    lost_e = cands.lost[idx[sel]]
    rows_e = cands.jobs[idx[sel]]
    if best_c == 1:  # any single entry that frees enough; least lost, then lowest row
        one = sel[gpus[sel] >= need_all[node[sel]]]
        pick = np.lexsort((cands.jobs[idx[one]], cands.lost[idx[one]]))[0]
        return [int(idx[one[pick]])]
    # several victims: enumerate the subsets of each tied node, cheapest lower bound first (the sum
    # of its best_c smallest losses), and stop once no node can beat the best set found
    order3 = np.lexsort((lost_e, node[sel]))
    n3, s3, l3, r3 = node[sel][order3], sel[order3], lost_e[order3], rows_e[order3]
    starts3 = np.flatnonzero(np.concatenate(([True], n3[1:] != n3[:-1])))
    stops3 = np.concatenate((starts3[1:], [len(n3)]))
    bounds = np.array([l3[a:a + best_c].sum() for a in starts3.tolist()])
    best_key: tuple[float, tuple[int, ...]] | None = None
    best_set: list[int] | None = None
    for gi in np.argsort(bounds, kind="stable").tolist():
        if best_key is not None and bounds[gi] > best_key[0]:
            break
        a, b = int(starts3[gi]), int(stops3[gi])
        if b - a > MAX_ENUM:
            return None
        combos = _combos(b - a, best_c)
        freed = gpus[s3[a:b]][combos].sum(axis=1)
        ok3 = freed >= need_all[int(n3[a])]
        if not ok3.any():
            continue
        lost_c = l3[a:b][combos].sum(axis=1)
        for c in np.flatnonzero(ok3 & (lost_c == lost_c[ok3].min())).tolist():
            members = combos[c]
            key = (float(lost_c[c]), tuple(sorted(int(x) for x in r3[a:b][members])))
            if best_key is None or key < best_key:
                best_key, best_set = key, [int(idx[s3[a + m]]) for m in members.tolist()]
    return best_set


_COMBOS: dict[tuple[int, int], IntArray] = {}


def _combos(n: int, k: int) -> IntArray:
    """All k-subsets of range(n) as rows of an array (cached)."""
    arr = _COMBOS.get((n, k))
    if arr is None:
        arr = _COMBOS[(n, k)] = np.array(list(itertools.combinations(range(n), k)), dtype=np.int64).reshape(-1, k)
    return arr


def _group_start(groups: IntArray) -> IntArray:
    """Index of the first element of each element's run of equal values (``groups`` sorted)."""
    if len(groups) == 0:
        return np.zeros(0, dtype=np.int64)
    new = np.ones(len(groups), dtype=bool)
    new[1:] = groups[1:] != groups[:-1]
    starts: IntArray = np.flatnonzero(new)
    out: IntArray = starts[np.cumsum(new) - 1]
    return out


def _cumsum_from(values: IntArray, start: IntArray) -> IntArray:
    """Cumulative sum of ``values`` restarting at each group (``start`` from :func:`_group_start`)."""
    cum = np.cumsum(values)
    out: IntArray = cum - (cum[start] - values[start])
    return out


def _first_per_group(groups: IntArray, mask: npt.NDArray[np.bool_]) -> IntArray:
    """Positions of the first True of ``mask`` in each run of equal values of the sorted ``groups``."""
    pos = np.flatnonzero(mask)
    if len(pos) == 0:
        return pos
    g = groups[pos]
    first = np.ones(len(pos), dtype=bool)
    first[1:] = g[1:] != g[:-1]
    out: IntArray = pos[first]
    return out
