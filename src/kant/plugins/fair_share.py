"""Fair share over time: jobs of the queue whose decayed usage is lowest against its share go first
(Slurm's classic fair-share factor on a tree of queues).

For every queue ``q`` of the tree (:mod:`kant.model.queues`; the same ``queues:`` document as the
``queues`` plugin):

* **share** ``S_q``: its weight over the sum of its siblings' weights, times its parent's share (the
  root's is 1), so the leaves' shares add up to 1;
* **usage** ``U_q``: GPU-seconds its subtree's running jobs held, each second weighted by
  ``2^(-age / half_life_s)`` (decayed exactly: with ``g`` GPUs held over ``dt`` seconds,
  ``D <- D 2^(-dt/h) + g h / ln 2 (1 - 2^(-dt/h))``), over the same sum for the whole cluster (0
  before anything ran);
* **fair-share factor** ``F_q = 2^(-U_q / S_q)``: 1 for a queue that used nothing, 0.5 for one that
  used exactly its share, towards 0 above it.

The queue order: a job's key is ``-F`` of its leaf (higher factor first); a tenant in no leaf sorts
after every queue's jobs (key 0). Keys of a cycle are those at the cycle's time (``DYNAMIC``: the queue
is re-sorted each cycle). Put it first in a policy (after ``priority`` if priorities should still win),
with any placement plugin. ``kant simulate --queues FILE`` with ``fair_share:`` in the file does that.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from kant.errors import ConfigError
from kant.framework.context import SchedulerEnv
from kant.framework.plugin import JobListener, QueueSort
from kant.framework.registry import register_plugin
from kant.model.queues import ROOT, QueueTree
from kant.model.state import Placement
from kant.model.store import grow
from kant.plugins.queues import FairShareSpec, QueuesArgs

__all__ = ["NAME", "FairShare", "fair_share_factor"]

NAME = "fair-share"

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def fair_share_factor(usage: FloatArray, share: FloatArray) -> FloatArray:
    """Slurm's classic factor ``2^(-U/S)`` (``U``, ``S`` normalised; a zero share gives 0 unless the
    usage is 0 too)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(share > 0, usage / np.where(share > 0, share, 1.0), np.where(usage > 0, np.inf, 0.0))
    out: FloatArray = np.exp2(-ratio)
    return out


@register_plugin
class FairShare(QueueSort, JobListener):
    """Queue order by Slurm's fair-share factor over a tree of queues (see the module docstring)."""

    NAME = NAME
    Args = QueuesArgs
    DYNAMIC = True
    SHAPE_KEYED = True  # (a job's key is its tenant's leaf's: the tenant is in its shape)

    def setup(self, env: SchedulerEnv) -> None:
        args = self.args
        assert isinstance(args, QueuesArgs)
        try:
            tree = QueueTree(args.defs(), float(env.cluster.total_gpus))
        except ValueError as exc:
            raise ConfigError(args.source, "queues", str(exc)) from None
        self.tree = tree
        spec = args.fair_share or FairShareSpec()
        self.half_life = float(spec.half_life_s)
        n = len(tree)
        share = np.ones(n, dtype=np.float64)
        for q in range(1, n):  # parents come first
            p = int(tree.parent[q])
            siblings = tree.children[p]
            share[q] = share[p] * tree.weight[q] / float(tree.weight[list(siblings)].sum())
        self.share = share
        self._all_shares = bool((share > 0).all())
        self._parent = [int(x) for x in tree.parent]
        self.leaves = np.flatnonzero(tree.is_leaf)
        self.decayed = np.zeros(n, dtype=np.float64)  # per leaf (inner queues: summed on demand)
        self.held = np.zeros(n, dtype=np.float64)  # GPUs held now, per leaf
        self.t0 = 0.0
        self.leaf = np.full(0, -1, dtype=np.int64)
        self._map(env)
        self.job_leaf = np.full(len(env.jobs), -1, dtype=np.int64)
        self._keys_at = math.nan
        self._leaf_key = np.zeros(n + 1, dtype=np.float64)  # index -1: a tenant in no leaf

    def _map(self, env: SchedulerEnv) -> None:
        names = env.jobs.tenant_names
        extra = [self.tree.leaf_of.get(name, -1) for name in names[len(self.leaf) :]]
        self.leaf = np.concatenate((self.leaf, np.asarray(extra, dtype=np.int64)))

    def jobs_added(self, env: SchedulerEnv, start: int) -> None:
        self.job_leaf = grow(self.job_leaf, len(env.jobs), -1)
        if len(env.jobs.tenant_names) > len(self.leaf):
            self._map(env)

    def advance(self, now: float) -> None:
        """Decay the usage up to ``now`` (adding what the running jobs held meanwhile)."""
        dt = now - self.t0
        if dt <= 0:
            return
        h = self.half_life
        d = math.exp2(-dt / h)
        self.decayed *= d
        self.decayed += self.held * (h / math.log(2.0)) * (1.0 - d)
        self.t0 = now

    def job_started(self, env: SchedulerEnv, job: int, now: float, placement: Placement) -> None:
        leaf = int(self.leaf[int(env.jobs.tenant[job])])
        if leaf < 0:
            return
        self.advance(now)
        self.job_leaf[job] = leaf
        self.held[leaf] += placement.total_gpus

    def job_stopped(self, env: SchedulerEnv, job: int, now: float, placement: Placement, finished: bool) -> None:
        leaf = int(self.job_leaf[job])
        if leaf < 0:
            return
        self.advance(now)
        self.job_leaf[job] = -1
        self.held[leaf] -= placement.total_gpus

    # --- kept over a rebuild or a restart --------------------------------------------------------------
    def saved_state(self, now: float) -> dict[str, Any] | None:
        """The decayed GPU-seconds of each leaf at ``now`` (by name), and ``now``: what the running jobs
        do not give back to a scheduler rebuilt from a snapshot. None before anything ran."""
        self.advance(now)
        names = self.tree.names
        decayed = {names[q]: float(self.decayed[q]) for q in self.leaves.tolist() if self.decayed[q] > 0}
        if not decayed:
            return None
        return {"t": float(self.t0), "half_life_s": self.half_life, "decayed": decayed}

    def load_state(self, state: Any) -> None:
        """Start from a saved usage (leaves by name; a leaf no longer in the tree is dropped). It decays
        from the saved time on, and the running jobs the snapshot starts again count from then: a
        service that was down for ``d`` seconds finds each queue's usage decayed by ``2^(-d / half_life)``
        plus what the jobs still running through it held."""
        index = self.tree.index
        for name, value in dict(state.get("decayed", {})).items():
            q = index.get(str(name))
            if q is not None and self.tree.is_leaf[q]:
                self.decayed[q] = float(value)
        self.t0 = float(state.get("t", 0.0))
        self._keys_at = math.nan

    # --- the factor ----------------------------------------------------------------------------
    def usage(self, now: float) -> FloatArray:
        """Per queue, its subtree's decayed usage over the cluster's (0 when nothing ran yet)."""
        self.advance(now)
        total = self.decayed.tolist()  # (a few dozen queues: Python floats, the same sums as NumPy's)
        parent = self._parent
        for q in range(len(total) - 1, 0, -1):  # children come after their parents: add them upwards
            total[parent[q]] += total[q]
        all_ = total[ROOT]
        arr = np.asarray(total, dtype=np.float64)
        out: FloatArray = arr / all_ if all_ > 0 else np.zeros_like(arr)
        return out

    def factors(self, now: float) -> FloatArray:
        """Per queue, ``F = 2^(-U/S)``."""
        if self._all_shares:  # (fair_share_factor's values, without its cases for a zero share)
            out: FloatArray = np.exp2(-(self.usage(now) / self.share))
            return out
        return fair_share_factor(self.usage(now), self.share)

    def key(self, env: SchedulerEnv, job: int, now: float) -> float:
        return float(self.keys(env, np.asarray([job], dtype=np.int64), now)[0])

    def keys(self, env: SchedulerEnv, jobs: IntArray, now: float) -> FloatArray:
        if now != self._keys_at:
            self._leaf_key[:-1] = -self.factors(now)
            self._keys_at = now
        out: FloatArray = self._leaf_key[self.leaf[env.jobs.tenant[jobs]]]
        return out

    def report(self, now: float) -> dict[str, dict[str, Any]]:
        """Per queue: share, usage (normalised decayed) and fair-share factor at ``now``."""
        u = self.usage(now)
        f = fair_share_factor(u, self.share)
        return {
            self.tree.names[q]: {"share": float(self.share[q]), "usage": float(u[q]), "factor": float(f[q])}
            for q in range(1, len(self.tree))
        }
