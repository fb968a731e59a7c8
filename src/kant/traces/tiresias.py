"""Readers for the Tiresias (NSDI'19) simulator sample inputs.

* Jobs, ``60_job.csv``: ``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``.
  Kept: ``job_id`` (name ``tiresias-<job_id>``), ``num_gpu`` (gang size, split into workers of at
  most ``max_gpus_per_worker``), ``submit_time`` and ``duration`` (seconds). Dropped:
  ``iterations`` and ``model_name`` (the Tiresias simulator's own progress model; the duration
  already says how long the job runs) and ``interval`` (the gap to the previous arrival, which
  the submit times already give).
* Cluster specs, ``cluster_spec.csv`` and ``n*g*.csv``: one row
  ``num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node``. Each switch is a
  leaf of ``num_node_p_switch`` nodes and all switches sit under one spine; CPUs are cores
  (-> milli-cores), memory GB (-> MiB, x1024). The spec names no GPU model, so the type is
  ``GPU``.
* ``yarn-gput*.csv``: one column ``duration``, GPU-time samples of a production cluster's jobs
  (Tiresias uses them for its Gittins index); :func:`read_tiresias_gput` returns them as an array,
  e.g. as an empirical duration distribution for :mod:`kant.traces.synthetic`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from kant.errors import InputError
from kant.model.cluster import Cluster, NodeSpec
from kant.model.job import JobTable
from kant.traces._csv import Problems, split_gangs
from kant.traces.columns import float_column, int_column, text_column
from kant.traces.raw import read_raw
from kant.traces.schema import build_job_table

__all__ = ["TIRESIAS_JOB_COLUMNS", "TIRESIAS_SPEC_COLUMNS", "read_tiresias", "read_tiresias_cluster",
           "read_tiresias_gput"]

TIRESIAS_JOB_COLUMNS = ("job_id", "num_gpu", "submit_time", "duration")
TIRESIAS_SPEC_COLUMNS = ("num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node", "mem_p_node")


def read_tiresias(path: str | Path, *, max_gpus_per_worker: int = 8, problems: Problems | None = None) -> JobTable:
    """Read a Tiresias job CSV into a :class:`JobTable` sorted by submit time."""
    p = Path(path)
    raw = read_raw(p)
    raw.require(TIRESIAS_JOB_COLUMNS)
    check = raw.check(problems)
    ids = text_column(raw, "job_id")
    check.flag(np.array([not s for s in ids], dtype=bool), "job_id", "empty job id", raw.columns["job_id"])
    seen: set[str] = set()
    dup = np.zeros(len(raw), dtype=bool)
    for i, s in enumerate(ids):
        dup[i] = s in seen
        seen.add(s)
    check.flag(dup, "job_id", "duplicate job id", raw.columns["job_id"])
    gpus = int_column(raw, check, "num_gpu", minimum=0)
    check.flag(gpus == 0, "num_gpu", "zero GPUs for a GPU job", raw.columns["num_gpu"])
    submit = float_column(raw, check, "submit_time", minimum=0)
    duration = float_column(raw, check, "duration")
    with np.errstate(invalid="ignore"):
        check.flag(duration < 0, "duration", "negative duration", raw.columns["duration"])
    keep = check.finish()
    rows = np.flatnonzero(keep)
    if not rows.size:
        raise InputError(str(p), "no valid job rows")
    workers, per = split_gangs(gpus[rows], max_gpus_per_worker)
    return build_job_table(
        names=[f"tiresias-{ids[i]}" for i in rows.tolist()],
        submit=submit[rows],
        duration=duration[rows],
        workers=workers,
        gpus_per_worker=per,
        source=str(p),
        origin_epoch=None,
    )


def read_tiresias_cluster(path: str | Path, *, gpu_type: str = "GPU", problems: Problems | None = None) -> Cluster:
    """Read a Tiresias cluster spec (one row) into a :class:`Cluster` with switch topology.

    ``problems`` is taken for the form every reader is called in (:mod:`kant.traces.registry`) and
    not used: the spec's one row is never skipped, a bad value raises."""
    p = Path(path)
    raw = read_raw(p)
    raw.require(TIRESIAS_SPEC_COLUMNS)
    check = raw.check(None)
    switches = int_column(raw, check, "num_switch", minimum=1)
    per_switch = int_column(raw, check, "num_node_p_switch", minimum=1)
    gpus = int_column(raw, check, "num_gpu_p_node", minimum=0)
    cpus = int_column(raw, check, "num_cpu_p_node", scale=1000, minimum=0, round_scaled=True)
    mem = int_column(raw, check, "mem_p_node", scale=1024, minimum=0, round_scaled=True)
    check.finish()
    if len(raw) != 1:
        raise InputError(str(p), f"a cluster spec has exactly one row, found {len(raw)}")
    n_sw, n_per = int(switches[0]), int(per_switch[0])
    if n_sw * n_per > 1_000_000:
        raise InputError(str(p), "more than 1,000,000 nodes", line=int(raw.lines[0]), value=n_sw * n_per)
    width = len(str(n_sw * n_per - 1))
    nodes = [
        NodeSpec(f"n{k:0{width}d}", gpu_type, int(gpus[0]), int(cpus[0]), int(mem[0]), leaf=f"switch-{k // n_per}",
                 spine="spine-0")
        for k in range(n_sw * n_per)
    ]
    return Cluster.from_nodes(nodes, nodes_per_leaf=n_per, leaves_per_spine=n_sw)


def read_tiresias_gput(path: str | Path, *, problems: Problems | None = None) -> npt.NDArray[np.float64]:
    """The GPU-time samples (seconds) of a ``yarn-gput*.csv`` file, in file order."""
    p = Path(path)
    raw = read_raw(p)
    raw.require(("duration",))
    check = raw.check(problems)
    vals = float_column(raw, check, "duration", minimum=0)
    keep = check.finish()
    return vals[keep]
