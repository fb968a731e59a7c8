"""The FGD experiment's placement: the arrivals of :func:`~kant.experiments.fgd.run.make_arrivals`,
placed by the core :class:`~kant.framework.runner.Framework` on the core
:class:`~kant.model.state.ClusterState` (GPU shares in the core, see docs/gpu-sharing.md).

Each experiment policy is a core plugin (:data:`CORE_POLICIES`): ``random`` -> ``random-pick``,
``best-fit`` -> ``residual-fit``, ``dot-product``, ``gpu-packing``, ``gpu-clustering`` (all in
:mod:`kant.plugins.share_place`), ``fgd`` -> the core ``fgd``, ``e-binpack`` -> the core
``e-binpack`` with ``share_aware: true``; and ``best-fit-core`` -> the core ``best-fit`` score (whole
free GPUs left, not the CPU+GPU weighted residual). Ties go to a uniform pick from the run's policy
stream (``tie: random``, the experiment's default; ``--arg '*.tie=first'``: the lowest node index).
:func:`run_core` builds a :class:`~kant.scheduler.Scheduler` with the policy's one plugin
(:func:`core_policy`) and offers each arriving pod once to its placement
(:meth:`~kant.scheduler.Scheduler.offer`); a pod that does not fit is dropped (no queue, nothing
leaves), as in the FGD artifact.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from kant.config.policy import PluginEntry, Policy
from kant.errors import ConfigError
from kant.experiments.fgd.model import Inventory, Workload
from kant.experiments.fgd.run import Order, RunResult, make_arrivals, never_fits
from kant.framework.plugin import Plugin
from kant.model.cluster import Cluster
from kant.model.job import JobTable
from kant.model.state import Placement
from kant.scheduler import Scheduler

__all__ = ["CORE_POLICIES", "POLICY_NAMES", "core_plugin", "core_policy", "load_cluster_and_pods", "run_core"]

#: experiment policy name -> (core plugin name, its arguments the experiment sets)
CORE_POLICIES: dict[str, tuple[str, dict[str, Any]]] = {
    "random": ("random-pick", {}),
    "best-fit": ("residual-fit", {"tie": "random"}),
    "dot-product": ("dot-product", {"tie": "random"}),
    "gpu-packing": ("gpu-packing", {"tie": "random"}),
    "gpu-clustering": ("gpu-clustering", {"tie": "random"}),
    "fgd": ("fgd", {"tie": "random"}),
    "e-binpack": ("e-binpack", {"share_aware": True, "tie": "random"}),
    "best-fit-core": ("best-fit", {}),
}
#: the experiment's seven policies (the default set; ``best-fit-core`` on request)
POLICY_NAMES: tuple[str, ...] = tuple(p for p in CORE_POLICIES if p != "best-fit-core")


def _core_entry(name: str, args: dict[str, Any] | None) -> PluginEntry:
    """The core plugin class and parsed arguments for experiment policy ``name``; bad names or args
    raise :class:`ConfigError`."""
    from kant.framework.registry import plugin_class

    entry = CORE_POLICIES.get(name)
    cls = plugin_class(entry[0]) if entry is not None else None
    if cls is None or entry is None:
        raise ConfigError("fgd experiment", "policy",
                          f"no core plugin for {name!r}; expected one of {', '.join(CORE_POLICIES)}")
    a = {**entry[1], **(args or {})}
    tie = a.pop("tie", "first") if name in ("random", "best-fit-core") else "first"
    if tie != "first" and name == "best-fit-core":
        raise ConfigError("fgd experiment", f"{name}.args.tie", "the core best-fit score breaks ties by node "
                          "index: use tie=first")
    try:
        parsed = cls.Args.model_validate(a)
    except ValidationError as exc:
        err = exc.errors()[0]
        path = ".".join(str(p) for p in (name, "args", *err["loc"]))
        raise ConfigError("fgd experiment", path, err["msg"]) from None
    return PluginEntry(cls, parsed, 1.0)


def core_plugin(name: str, args: dict[str, Any] | None) -> Plugin:
    """The core plugin for experiment policy ``name``; bad names or args raise :class:`ConfigError`."""
    return _core_entry(name, args).build()


def core_policy(name: str, args: dict[str, Any] | None) -> Policy:
    """The scheduler policy of experiment policy ``name``: its one core plugin and no action (pods are
    offered to placement one by one, never queued; see :meth:`Scheduler.offer`)."""
    entry = _core_entry(name, args)
    return Policy(f"fgd-{name}", f"FGD experiment policy {name}: core plugin {entry.cls.NAME}", (), (entry,))


@lru_cache(maxsize=32)
def load_cluster_and_pods(path: str, nodes: str, limit: int | None = None) -> tuple[Cluster, JobTable]:
    """The openb node list as a :class:`Cluster` and the pod list as a :class:`JobTable` (the same
    rows, in the same order, as :func:`~kant.experiments.fgd.run.load_workload`)."""
    from kant.traces.openb import read_openb_nodes, read_openb_pods

    cluster = read_openb_nodes(nodes)
    jobs = read_openb_pods(path, gpu_types=cluster.gpu_type_names)
    if limit is not None:
        jobs = jobs.take(np.arange(min(limit, len(jobs))))
    return cluster, jobs


def run_core(cluster: Cluster, pods: JobTable, workload: Workload, policy: str, seed: int, *,
             pods_label: str = "", inflate: float = 1.3, order: Order = "creation",
             policy_args: dict[str, Any] | None = None, check: bool = False,
             never: npt.NDArray[np.bool_] | None = None) -> RunResult:
    """Run ``policy`` on the pod list ``pods`` (``workload`` is the same list as the experiment's
    :class:`Workload`, for the arrivals) arriving on ``cluster``, through the core scheduler."""
    inventory = Inventory.from_cluster(cluster)
    wl_seq, pol_seq = np.random.SeedSequence(seed).spawn(2)
    arr = make_arrivals(workload, inventory.total_gpu_milli, inflate, order, np.random.default_rng(wl_seq))
    jobs = pods.take(arr.rows)
    sched = Scheduler(core_policy(policy, policy_args), cluster, jobs, seed=seed, trace=pods)
    sched.env.rng = np.random.default_rng(pol_seq)  # random picks and ties: the experiment's policy stream
    n = len(jobs)
    placed = np.zeros(n, dtype=bool)
    where = np.full(n, -1, dtype=np.int64)
    t0 = time.perf_counter()
    for job in range(n):
        result = sched.offer(job, 0.0)
        if isinstance(result, Placement):
            placed[job] = True
            where[job] = result.nodes[0]
    elapsed = time.perf_counter() - t0
    if check:
        sched.state.check()
    if never is None:
        never = never_fits(inventory, workload)
    return RunResult(
        pods=pods_label, policy=policy, seed=seed, capacity_milli=inventory.total_gpu_milli,
        gpu_milli=workload.gpu_milli[arr.rows], placed=placed, node=where, never=never[arr.rows],
        sampled=arr.sampled, time_s=elapsed, n_list=len(workload),
        extra={"allocated_milli": sched.state.allocated_milli},
    )
