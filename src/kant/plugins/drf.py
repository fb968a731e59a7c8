"""DRF fair share as a queue order: jobs of the tenant with the lowest dominant share go first.

Rule: ``key(job) = dominant_share(tenant(job)) / weight(tenant(job))``, lower first, where

    dominant_share(t) = max(GPUs held by t / cluster GPUs,
                            CPU held by t / cluster CPU      (only if the cluster models CPU),
                            memory held by t / cluster memory (only if the cluster models memory))

(Dominant Resource Fairness, Ghodsi et al. 2011; Volcano's ``drf`` plugin and Kueue's fair sharing
order queues the same way). ``weights`` turns it into weighted DRF: a tenant of weight 2 is entitled
to twice the share; ``weights_from: gpu-time-share`` sets each tenant's weight to its share of the
trace's GPU-time (see :func:`kant.plugins.quota.gpu_time_share`), so that tenants are compared by
share used relative to share of demand. Explicit ``weights`` win; unlisted tenants weigh 1 (or their
derived weight).

The shares are those at the start of the cycle: the queue is sorted once per cycle (``DYNAMIC``),
so jobs started during the cycle change the order from the next cycle on. Ties keep the rest of the
policy's order (then submit time, then job row). Usage is tracked by listening to job starts and
stops.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from kant.errors import ConfigError
from kant.framework.context import SchedulerEnv
from kant.framework.plugin import JobListener, QueueSort
from kant.framework.registry import register_plugin
from kant.model.state import Placement
from kant.plugins.quota import gpu_time_share

__all__ = ["NAME", "Drf", "DrfArgs"]

NAME = "drf"

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class DrfArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    weights: dict[str, float] = Field(default_factory=dict)
    weights_from: Literal["gpu-time-share"] | None = None


@register_plugin
class Drf(QueueSort, JobListener):
    NAME = NAME
    Args = DrfArgs
    DYNAMIC = True

    def setup(self, env: SchedulerEnv) -> None:
        args = self.args
        assert isinstance(args, DrfArgs)
        jobs, cluster = env.jobs, env.cluster
        n_t = len(jobs.tenant_names)
        index = {name: i for i, name in enumerate(jobs.tenant_names)}
        if args.weights_from == "gpu-time-share":
            weights = gpu_time_share(env.require_trace(NAME, "weights_from: gpu-time-share reads the trace's GPU-time"))
        else:
            weights = np.ones(n_t)
        for name, w in args.weights.items():
            if name not in index:
                raise ConfigError(f"{NAME} plugin", f"args.weights.{name}",
                                  f"no such tenant in the trace; tenants: {', '.join(jobs.tenant_names)}")
            if not w > 0:
                raise ConfigError(f"{NAME} plugin", f"args.weights.{name}", "a weight must be > 0")
            weights[index[name]] = w
        # a tenant with no GPU-time in the trace still gets a tiny positive weight
        self.weights = np.maximum(weights, 1e-12)
        self.capacity = np.array(
            [cluster.total_gpus, int(cluster.cpu_milli.sum()), int(cluster.memory_mib.sum())], dtype=np.float64
        )
        self.modelled = self.capacity > 0
        self._dims = [k for k in range(3) if self.modelled[k]]
        self._cap = [float(c) for c in self.capacity]
        self.usage = np.zeros((n_t, 3), dtype=np.float64)  # GPUs, CPU milli, memory MiB
        self.shares = np.zeros(n_t, dtype=np.float64)

    def jobs_added(self, env: SchedulerEnv, start: int) -> None:
        """New tenants (a live submit) weigh their configured weight, else 1, and hold nothing yet."""
        names = env.jobs.tenant_names
        n_old = len(self.shares)
        if len(names) > n_old:
            args = self.args
            assert isinstance(args, DrfArgs)
            extra = np.array([args.weights.get(name, 1.0) for name in names[n_old:]], dtype=np.float64)
            self.weights = np.concatenate((self.weights, extra))
            self.usage = np.concatenate((self.usage, np.zeros((len(extra), 3))))
            self.shares = np.concatenate((self.shares, np.zeros(len(extra))))

    def _change(self, env: SchedulerEnv, job: int, placement: Placement, sign: float) -> None:
        t = int(env.jobs.tenant[job])
        n = len(placement.nodes)
        use = self.usage[t]
        use[0] += sign * placement.gpus * n
        use[1] += sign * placement.cpu_milli * n
        use[2] += sign * placement.memory_mib * n
        share = 0.0
        for k in self._dims:
            share = max(share, float(use[k]) / self._cap[k])
        self.shares[t] = share / float(self.weights[t])

    def job_started(self, env: SchedulerEnv, job: int, now: float, placement: Placement) -> None:
        self._change(env, job, placement, 1.0)

    def job_stopped(self, env: SchedulerEnv, job: int, now: float, placement: Placement, finished: bool) -> None:
        self._change(env, job, placement, -1.0)

    def dominant_share(self, tenant: int) -> float:
        """The tenant's current (weighted) dominant share."""
        return float(self.shares[tenant])

    def key(self, env: SchedulerEnv, job: int, now: float) -> float:
        return float(self.shares[env.jobs.tenant[job]])

    def keys(self, env: SchedulerEnv, jobs: IntArray, now: float) -> FloatArray:
        return self.shares[env.jobs.tenant[jobs]]
