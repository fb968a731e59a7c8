"""Readers for the Alibaba "openb" GPU-sharing trace (cluster-trace-gpu-v2023, FGD paper, ATC'23).

Pod lists (every variant: ``default``, ``cpu*``, ``gpushare*``, ``gpuspec*``, ``multigpu*``) have
columns ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time``; the ``multigpu*`` variants have only the first five.

Kept, per pod (one pod = one job of one worker):

* ``name`` -> job name; ``cpu_milli``/``memory_mib`` -> per-worker CPU and memory;
* ``num_gpu`` -> ``gpus_per_worker`` (0 = a CPU-only pod, kept as a job with no GPU);
* ``gpu_milli`` -> ``gpu_milli``, the share of one GPU a 1-GPU pod needs (fractional GPUs); pods
  with 2+ GPUs must ask for whole GPUs (1000) and CPU pods for 0;
* ``gpu_spec`` -> ``gpu_type``: empty = any type, ``T4`` = that type, ``V100M16|V100M32`` = any of
  the listed types, kept as that string (repeats removed, order kept) in ``gpu_type_names`` (see
  :func:`kant.traces.schema.gpu_type_alternatives`); each listed type must exist in the node list
  (by default the ``openb_node_list_gpu_node.csv`` next to the pod list), else the row is an error;
* ``qos`` -> ``priority`` via :data:`QOS_PRIORITY` (Guaranteed 3 > LS 2 > Burstable 1 > BE 0);
* ``creation_time`` -> ``submit`` (seconds from trace start; the trace has no real dates, so
  ``origin_epoch`` is None); ``deletion_time - scheduled_time`` -> ``duration`` for pods that were
  scheduled (the time they held resources), ``deletion_time - creation_time`` for pods that never
  were (``pod_phase`` Pending: their whole wait is the only length the trace knows).

Dropped: ``pod_phase`` (the outcome of the original run, which a replay recomputes) and
``scheduled_time`` itself (the original scheduler's decision; only used for the duration). The
``multigpu*`` variants carry no times at all: as in the FGD paper's own simulator, their pods all
arrive at time 0 in file order (a stable sort keeps that order) and never leave
(``duration = inf``).

Node lists (``sn,cpu_milli,memory_mib,gpu,model``) are read by :func:`read_openb_nodes`: name, CPU,
memory, GPU count and model are kept; CPU-only nodes are left out by default (``gpu_nodes_only``),
because kant schedules GPU work. The trace has no topology, so nodes are grouped in file order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from kant.errors import InputError
from kant.model.cluster import DEFAULT_LEAVES_PER_SPINE, DEFAULT_NODES_PER_LEAF, Cluster, NodeSpec
from kant.model.job import FULL_GPU_MILLI, JobTable
from kant.traces._csv import Problems
from kant.traces.columns import float_column, int_column, text_column
from kant.traces.raw import read_raw
from kant.traces.schema import build_job_table, gpu_type_alternatives

__all__ = [
    "OPENB_NODE_COLUMNS",
    "OPENB_POD_COLUMNS",
    "OPENB_VARIANTS",
    "QOS_PRIORITY",
    "openb_gpu_types",
    "read_openb_nodes",
    "read_openb_pods",
]

#: columns of the node lists
OPENB_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
#: columns every pod list has
OPENB_POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
#: the pod-list variants shipped in the trace (``openb_pod_list_<variant>.csv``)
OPENB_VARIANTS = (
    "default",
    "cpu0", "cpu037", "cpu050", "cpu072", "cpu100", "cpu200", "cpu235", "cpu250", "cpu300",
    "gpushare20", "gpushare40", "gpushare60", "gpushare80", "gpushare100",
    "gpuspec05", "gpuspec10", "gpuspec20", "gpuspec25",
    "multigpu20", "multigpu30", "multigpu40",
)  # fmt: skip
#: QoS class -> kant priority (higher is more important)
QOS_PRIORITY: dict[str, int] = {"Guaranteed": 3, "LS": 2, "Burstable": 1, "BE": 0}
_TIMED = ("qos", "creation_time", "deletion_time", "scheduled_time")


def openb_gpu_types(node_list: str | Path) -> tuple[str, ...]:
    """GPU types present in an openb node list (nodes with at least one GPU)."""
    return read_openb_nodes(node_list).gpu_type_names


def _default_node_list(pods: Path) -> Path | None:
    cand = pods.parent / "openb_node_list_gpu_node.csv"
    return cand if cand.exists() else None


def read_openb_pods(
    path: str | Path,
    *,
    gpu_types: Iterable[str] | None = None,
    node_list: str | Path | None = None,
    problems: Problems | None = None,
) -> JobTable:
    """Read an openb pod list into a :class:`JobTable` (see the module docstring for the mapping).

    GPU-type constraints are checked against ``gpu_types`` if given, else against the types of
    ``node_list`` (default: the GPU node list beside the pod list, when present); a ``gpu_spec``
    naming a type no node has is an error. Errors name file, line, column and value; with
    ``Problems(skip=True)`` bad rows are dropped and recorded.
    """
    p = Path(path)
    raw = read_raw(p)
    raw.require(OPENB_POD_COLUMNS)
    timed = all(c in raw.columns for c in _TIMED)
    if not timed and any(c in raw.columns for c in _TIMED):
        raw.require(_TIMED)
    check = raw.check(problems)
    names = text_column(raw, "name")
    check.flag(np.array([not s for s in names], dtype=bool), "name", "empty pod name", raw.columns["name"])
    cpu = int_column(raw, check, "cpu_milli", minimum=0)
    mem = int_column(raw, check, "memory_mib", minimum=0)
    num_gpu = int_column(raw, check, "num_gpu", minimum=0)
    milli = int_column(raw, check, "gpu_milli", minimum=0)
    check.flag(milli > FULL_GPU_MILLI, "gpu_milli", "a GPU share must be <= 1000 milli", raw.columns["gpu_milli"])
    check.flag((num_gpu >= 1) & (milli == 0), "gpu_milli", "zero GPUs for a GPU pod (gpu_milli is 0)",
               raw.columns["gpu_milli"])
    check.flag((num_gpu == 0) & (milli > 0), "gpu_milli", "a GPU share on a pod with no GPU",
               raw.columns["gpu_milli"])
    check.flag((num_gpu > 1) & (milli != FULL_GPU_MILLI), "gpu_milli", "a multi-GPU pod needs whole GPUs (1000)",
               raw.columns["gpu_milli"])
    n = len(raw)
    spec = [""] * n
    priority = np.zeros(n, dtype=np.int64)
    if timed:
        if "gpu_spec" in raw.columns:
            spec = ["|".join(dict.fromkeys(gpu_type_alternatives(s))) for s in text_column(raw, "gpu_spec")]
        if gpu_types is None:
            nl = Path(node_list) if node_list is not None else _default_node_list(p)
            known = set(openb_gpu_types(nl)) if nl is not None else None
        else:
            known = set(gpu_types)
        if known is not None:
            unknown = np.array([bool(s) and not all(a in known for a in s.split("|")) for s in spec], dtype=bool)
            check.flag(unknown, "gpu_spec", f"a GPU type no node has (known: {', '.join(sorted(known))})",
                       raw.columns.get("gpu_spec", spec))
        check.flag(np.array([bool(s) for s in spec], dtype=bool) & (num_gpu == 0), "gpu_spec",
                   "a GPU-type constraint on a pod with no GPU",
                   raw.columns.get("gpu_spec", spec))
        qos = text_column(raw, "qos")
        pr = np.array([QOS_PRIORITY.get(q, -1) for q in qos], dtype=np.int64)
        check.flag(pr < 0, "qos", f"unknown QoS class (expected {', '.join(QOS_PRIORITY)})", raw.columns["qos"])
        priority = np.maximum(pr, 0)
        created = float_column(raw, check, "creation_time", minimum=0)
        deleted = float_column(raw, check, "deletion_time", minimum=0)
        scheduled = float_column(raw, check, "scheduled_time", default=math.nan, minimum=0)
        with np.errstate(invalid="ignore"):
            check.flag(scheduled < created, "scheduled_time", "scheduled before it was created",
                       raw.columns["scheduled_time"])
            start = np.where(np.isnan(scheduled), created, scheduled)
            duration = deleted - start
            check.flag(duration < 0, "deletion_time", "negative duration (deleted before it started)",
                       raw.columns["deletion_time"])
        submit = created
    else:
        submit = np.zeros(n)
        duration = np.full(n, math.inf)
    keep = check.finish()
    rows = np.flatnonzero(keep)
    if not rows.size:
        raise InputError(str(p), "no valid pod rows")
    return build_job_table(
        names=[names[i] for i in rows.tolist()],
        submit=submit[rows],
        duration=duration[rows],
        workers=np.ones(rows.size, dtype=np.int64),
        gpus_per_worker=num_gpu[rows],
        gpu_milli=milli[rows],
        cpu_milli=cpu[rows],
        memory_mib=mem[rows],
        gpu_type=np.asarray(spec, dtype=object)[rows],
        priority=priority[rows],
        source=str(p),
        origin_epoch=None,
    )


def read_openb_nodes(
    path: str | Path,
    *,
    gpu_nodes_only: bool = True,
    nodes_per_leaf: int = DEFAULT_NODES_PER_LEAF,
    leaves_per_spine: int = DEFAULT_LEAVES_PER_SPINE,
    problems: Problems | None = None,
) -> Cluster:
    """Read an openb node list (``sn,cpu_milli,memory_mib,gpu,model``) into a :class:`Cluster`.

    Kept: node name, CPU (milli-cores), memory (MiB), GPU count and model. The trace has no
    topology, so nodes are grouped in file order (``nodes_per_leaf``, ``leaves_per_spine``).
    CPU-only nodes (``gpu`` 0, empty ``model``) are dropped unless ``gpu_nodes_only=False`` (then
    their type is ``CPU``). The result equals :func:`kant.traces.inventory.read_inventory`'s.
    """
    p = Path(path)
    raw = read_raw(p)
    raw.require(OPENB_NODE_COLUMNS)
    check = raw.check(problems)
    names = text_column(raw, "sn")
    check.flag(np.array([not s for s in names], dtype=bool), "sn", "empty node name", raw.columns["sn"])
    first: dict[str, int] = {}
    dup = np.zeros(len(raw), dtype=bool)
    for i, nm in enumerate(names):
        if nm in first:
            dup[i] = True
        else:
            first[nm] = i
    check.flag(dup, "sn", "duplicate node name", raw.columns["sn"])
    cpu = int_column(raw, check, "cpu_milli", minimum=0)
    mem = int_column(raw, check, "memory_mib", minimum=0)
    gpus = int_column(raw, check, "gpu", minimum=0)
    models = text_column(raw, "model")
    check.flag(np.array([not m for m in models], dtype=bool) & (gpus > 0), "model", "empty GPU type on a GPU node",
               raw.columns["model"])
    keep = check.finish()
    nodes = [
        NodeSpec(names[i], models[i] or "CPU", int(gpus[i]), int(cpu[i]), int(mem[i]))
        for i in np.flatnonzero(keep).tolist()
        if gpus[i] > 0 or not gpu_nodes_only
    ]
    if not nodes:
        raise InputError(str(p), "no GPU nodes in inventory")
    return Cluster.from_nodes(nodes, nodes_per_leaf=nodes_per_leaf, leaves_per_spine=leaves_per_spine)
