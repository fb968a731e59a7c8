"""Reader for the Alibaba PAI GPU cluster trace v2020 machine inventory (``pai_machine_spec.csv``).

The file has no header; its columns (from ``pai_machine_spec.header``) are
``machine,gpu_type,cap_cpu,cap_mem,cap_gpu``. Kept: the machine id as node name, GPU type
(``P100``, ``T4``, ``V100``, ``V100M32``, ``MISC``; ``CPU`` for machines without GPUs), GPUs,
CPU (``cap_cpu`` cores -> milli-cores) and memory (``cap_mem`` GiB -> MiB). Dropped: nothing per
machine; but CPU-only machines are left out of the cluster by default (``gpu_nodes_only``), as
for every inventory, because kant schedules GPU work. The trace has no topology: machines are
grouped in file order into leaves and spines.

The PAI job, task and instance tables are not in the shared snapshot (only their headers are);
their 100K-job simulator sample can be read with a mapping file (docs/traces.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kant.errors import InputError
from kant.model.cluster import DEFAULT_LEAVES_PER_SPINE, DEFAULT_NODES_PER_LEAF, Cluster, NodeSpec
from kant.traces._csv import Problems
from kant.traces.columns import int_column, text_column
from kant.traces.raw import read_raw

__all__ = ["PAI_MACHINE_COLUMNS", "is_pai_machines", "read_pai_machines"]

#: columns of pai_machine_spec.csv (the file itself has no header line)
PAI_MACHINE_COLUMNS = ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")


def is_pai_machines(path: Path, first_line: str | None) -> bool:
    """Does the file's first line look like a row of ``pai_machine_spec.csv`` (it has no header): five
    fields, an alphanumeric GPU type, then numbers?"""
    if first_line is None:
        return False
    fields = first_line.split(",")
    return len(fields) == len(PAI_MACHINE_COLUMNS) and fields[1].strip().isalnum() and all(
        f.strip().replace(".", "").isdigit() for f in fields[2:])


def read_pai_machines(
    path: str | Path,
    *,
    gpu_nodes_only: bool = True,
    nodes_per_leaf: int = DEFAULT_NODES_PER_LEAF,
    leaves_per_spine: int = DEFAULT_LEAVES_PER_SPINE,
    problems: Problems | None = None,
) -> Cluster:
    """Read ``pai_machine_spec.csv`` into a :class:`Cluster` (see the module docstring)."""
    p = Path(path)
    raw = read_raw(p, format="csv", header=list(PAI_MACHINE_COLUMNS))
    check = raw.check(problems)
    names = text_column(raw, "machine")
    types = text_column(raw, "gpu_type")
    check.flag(np.array([not s for s in names], dtype=bool), "machine", "empty machine id", raw.columns["machine"])
    cpu = int_column(raw, check, "cap_cpu", scale=1000, minimum=0, round_scaled=True)
    mem = int_column(raw, check, "cap_mem", scale=1024, minimum=0, round_scaled=True)
    gpus = int_column(raw, check, "cap_gpu", minimum=0)
    no_type = np.array([not t for t in types], dtype=bool)
    check.flag(no_type, "gpu_type", "empty GPU type", raw.columns["gpu_type"])
    cpu_type = np.array([t == "CPU" for t in types], dtype=bool)
    check.flag(cpu_type & (gpus > 0), "cap_gpu", "GPUs on a machine of type CPU", raw.columns["cap_gpu"])
    check.flag(~cpu_type & ~no_type & (gpus == 0), "cap_gpu", "zero GPUs on a GPU machine", raw.columns["cap_gpu"])
    seen: set[str] = set()
    dup = np.zeros(len(raw), dtype=bool)
    for i, nm in enumerate(names):
        dup[i] = nm in seen
        seen.add(nm)
    check.flag(dup, "machine", "duplicate machine id", raw.columns["machine"])
    keep = check.finish()
    nodes = [
        NodeSpec(names[i], types[i], int(gpus[i]), int(cpu[i]), int(mem[i]))
        for i in np.flatnonzero(keep).tolist()
        if gpus[i] > 0 or not gpu_nodes_only
    ]
    if not nodes:
        raise InputError(str(p), "no GPU machines in the inventory")
    return Cluster.from_nodes(nodes, nodes_per_leaf=nodes_per_leaf, leaves_per_spine=leaves_per_spine)
