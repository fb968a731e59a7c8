"""Clusters from a spec string, a node inventory file, or a built-in name.

Accepted forms (see docs/clusters.md):

* a built-in name: ``philly`` (see :data:`BUILTIN_CLUSTERS`);
* a compact spec: ``64x8:V100,leaf=8,spine=4`` or several groups ``100x8:H100+20x4:A10,leaf=32``;
* a spelled-out spec: ``1,000 nodes x 8 H100, 32 nodes per leaf, 8 leaves per spine``;
* an inventory CSV with columns ``name,gpu_type,gpus`` and optional ``cpu_milli,memory_mib,leaf,
  spine``, or the Alibaba openb node list (``sn,cpu_milli,memory_mib,gpu,model``);
* a YAML file: ``nodes: [{count, gpus, gpu_type, cpu_milli, memory_mib}]`` and optional
  ``topology: {nodes_per_leaf, leaves_per_spine}``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from kant.errors import InputError
from kant.model.cluster import (
    DEFAULT_LEAVES_PER_SPINE,
    DEFAULT_NODES_PER_LEAF,
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    Cluster,
    NodeSpec,
)
from kant.traces._csv import Problems, csv_rows, parse_int

__all__ = ["BUILTIN_CLUSTERS", "parse_cluster_spec", "read_inventory", "load_cluster"]

#: Named clusters. ``philly``: 512 V100 GPUs, near Gavel's Philly cluster spec (500 GPUs); the Philly
#: trace's mean demand is about 374 GPUs, but its bursts keep jobs waiting during 69 % of the window
#: under the Kant policy (median wait 2.3 days).
BUILTIN_CLUSTERS: dict[str, str] = {
    "philly": "64x8:V100,leaf=8,spine=4",
    # the default of ``kant simulate``: 640 V100 GPUs, loaded by the Philly trace but not saturated (jobs
    # wait during 38 % of the window, median wait 24 min, P90 20 h under the Kant policy; figures for both
    # clusters in docs/concepts.md, "The default run")
    "philly-80": "80x8:V100,leaf=8,spine=5",
    "tiny": "4x8:GPU,leaf=2,spine=2",
}

_GROUP = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*(?::\s*([A-Za-z0-9_.\-]+))?\s*$")
_WORDY_GROUP = re.compile(r"([\d,_]+)\s*nodes?\s*(?:x|\*|of|with)\s*(\d+)\s*(?:x\s*)?([A-Za-z][A-Za-z0-9_.\-]*)?")
_WORDY_LEAF = re.compile(r"([\d,_]+)\s*nodes?\s*per\s*leaf", re.I)


def _num(text: str, source: str, what: str) -> int:
    try:
        value = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise InputError(source, f"{what} is not a whole number", value=text) from None
    if value < 1:
        raise InputError(source, f"{what} must be >= 1", value=text)
    return value


def _check_group(source: str, where: str, count: int, gpus: int, before: int) -> None:
    """A node group's size is within the limits (docs/clusters.md); ``before`` nodes came earlier."""
    if gpus < 0:
        raise InputError(source, f"{where}: GPUs per node must be >= 0", value=gpus)
    if gpus > MAX_GPUS_PER_NODE:
        raise InputError(source, f"{where}: at most {MAX_GPUS_PER_NODE:,} GPUs per node", value=gpus)
    if before + count > MAX_NODES:
        raise InputError(source, f"{where}: at most {MAX_NODES:,} nodes in a cluster", value=before + count)


def _no_gpus(source: str, nodes: list[NodeSpec]) -> None:
    """A cluster of CPU-only nodes has nothing for kant to schedule."""
    if not any(n.gpus for n in nodes):
        raise InputError(source, "the cluster has no GPUs (0-GPU nodes are CPU-only; at least one node needs GPUs)")


def parse_cluster_spec(spec: str) -> Cluster:
    """Build a cluster from a compact or spelled-out spec string (see the module docstring)."""
    source = "cluster spec"
    text = spec.strip()
    if not text:
        raise InputError(source, "empty cluster spec")
    if re.search(r"nodes?\s", text, re.I) and not _GROUP.match(text.split(",")[0].split("+")[0]):
        return _parse_wordy(text, source)
    head, *opts = [p.strip() for p in text.split(",")]
    options = {"leaf": DEFAULT_NODES_PER_LEAF, "spine": DEFAULT_LEAVES_PER_SPINE}
    for opt in opts:
        key, sep, val = opt.partition("=")
        key = key.strip().lower()
        if not sep or key not in options:
            raise InputError(source, f"unknown option {opt!r}; expected leaf=<nodes per leaf> or "
                             "spine=<leaves per spine>", value=spec)
        options[key] = _num(val.strip(), source, key)
    groups: list[tuple[int, int, str]] = []
    total = 0
    for group in head.split("+"):  # every group is checked before any node is built
        m = _GROUP.match(group)
        if not m:
            raise InputError(source, f"bad node group {group.strip()!r}; expected <nodes>x<gpus>[:<type>], "
                             "e.g. 64x8:V100", value=spec)
        count, gpus, gtype = int(m.group(1)), int(m.group(2)), m.group(3) or "GPU"
        if count < 1:
            raise InputError(source, "node count must be >= 1", value=group)
        _check_group(source, f"node group {group.strip()!r}", count, gpus, total)
        total += count
        groups.append((count, gpus, gtype))
    nodes: list[NodeSpec] = []
    for count, gpus, gtype in groups:
        start = len(nodes)
        nodes.extend(NodeSpec(f"{gtype.lower()}-{start + i}", gtype, gpus) for i in range(count))
    _no_gpus(source, nodes)
    return Cluster.from_nodes(nodes, nodes_per_leaf=options["leaf"], leaves_per_spine=options["spine"])


def _parse_wordy(text: str, source: str) -> Cluster:
    groups = _WORDY_GROUP.findall(text)
    if not groups:
        raise InputError(source, "expected '<N> nodes x <G> <type>'", value=text)
    leaf_m = _WORDY_LEAF.search(text)
    spine_m = re.search(r"([\d,_]+)\s*(?:leaf|leaves)\s*per\s*spine", text, re.I)
    total = 0
    for count_s, gpus_s, _ in groups:  # every group is checked before any node is built
        count = _num(count_s, source, "node count")
        _check_group(source, f"node group '{count_s} nodes x {gpus_s}'", count, int(gpus_s), total)
        total += count
    nodes: list[NodeSpec] = []
    for count_s, gpus_s, gtype in groups:
        count = _num(count_s, source, "node count")
        gpus = int(gpus_s)
        gtype = gtype or "GPU"
        start = len(nodes)
        nodes.extend(NodeSpec(f"{gtype.lower()}-{start + i}", gtype, gpus) for i in range(count))
    _no_gpus(source, nodes)
    return Cluster.from_nodes(
        nodes,
        nodes_per_leaf=_num(leaf_m.group(1), source, "nodes per leaf") if leaf_m else DEFAULT_NODES_PER_LEAF,
        leaves_per_spine=_num(spine_m.group(1), source, "leaves per spine") if spine_m else DEFAULT_LEAVES_PER_SPINE,
    )


def read_inventory(
    path: str | Path,
    *,
    nodes_per_leaf: int = DEFAULT_NODES_PER_LEAF,
    leaves_per_spine: int = DEFAULT_LEAVES_PER_SPINE,
    gpu_nodes_only: bool = True,
    problems: Problems | None = None,
) -> Cluster:
    """Read a node inventory CSV (kant's columns or the openb node list) into a :class:`Cluster`.

    With ``gpu_nodes_only`` (default), nodes with 0 GPUs are left out of the cluster: kant schedules
    GPU work, and CPU-only nodes would only dilute the node-count metrics.
    """
    p = Path(path)
    source = str(p)
    problems = problems if problems is not None else Problems()
    with_header = _peek_header(p)
    openb = "sn" in with_header and "model" in with_header
    cols = ("sn", "gpu", "model") if openb else ("name", "gpus", "gpu_type")
    name_c, gpus_c, type_c = cols
    nodes: list[NodeSpec] = []
    seen: dict[str, int] = {}
    spine_of: dict[str, tuple[str | None, int]] = {}  # leaf label -> (its spine label, line that set it)
    for line, row in csv_rows(p, cols, problems=problems):
        try:
            name = row[name_c].strip()
            if not name:
                raise InputError(source, "empty node name", line=line, column=name_c, value="")
            if name in seen:
                raise InputError(source, f"duplicate node name (first on line {seen[name]})", line=line,
                                 column=name_c, value=name)
            gpus = parse_int(source, line, gpus_c, row[gpus_c], minimum=0)
            if gpus > MAX_GPUS_PER_NODE:
                raise InputError(source, f"at most {MAX_GPUS_PER_NODE:,} GPUs per node", line=line, column=gpus_c,
                                 value=row[gpus_c])
            gtype = row[type_c].strip() or ("CPU" if gpus == 0 else "")
            if not gtype:
                raise InputError(source, "empty GPU type on a GPU node", line=line, column=type_c, value="")
            cpu = parse_int(source, line, "cpu_milli", row["cpu_milli"], minimum=0) if row.get("cpu_milli") else 0
            mem = parse_int(source, line, "memory_mib", row["memory_mib"], minimum=0) if row.get("memory_mib") else 0
            leaf, spine = (row.get("leaf") or "").strip() or None, (row.get("spine") or "").strip() or None
            if leaf is not None and spine is not None and leaf in spine_of and spine_of[leaf][0] != spine:
                first_spine, first_line = spine_of[leaf]
                raise InputError(source, f"leaf {leaf!r} is already under spine {first_spine or '(none)'!r} (line "
                                 f"{first_line}); a leaf sits under one spine", line=line, column="spine",
                                 value=spine or "")
            if len(nodes) >= MAX_NODES:
                raise InputError(source, f"at most {MAX_NODES:,} nodes in a cluster", line=line)
        except InputError as err:
            problems.add(err)
            continue
        seen[name] = line
        if gpus == 0 and gpu_nodes_only:
            continue
        if leaf is not None:
            spine_of.setdefault(leaf, (spine, line))
        nodes.append(NodeSpec(name, gtype, gpus, cpu, mem, leaf=leaf, spine=spine))
    if not nodes:
        raise InputError(source, "no GPU nodes in inventory")
    return Cluster.from_nodes(nodes, nodes_per_leaf=nodes_per_leaf, leaves_per_spine=leaves_per_spine)


def _peek_header(path: Path) -> list[str]:
    from kant.traces._csv import open_text

    with open_text(path) as fh:
        first = fh.readline()
    return [h.strip() for h in first.strip().split(",")]


def _read_cluster_yaml(path: Path) -> Cluster:
    source = str(path)
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(source, f"not valid YAML: {getattr(exc, 'problem', exc)}",
                         line=mark.line + 1 if mark else None) from None
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not data["nodes"]:
        raise InputError(source, "expected a mapping with a non-empty 'nodes' list")
    unknown = set(data) - {"nodes", "topology", "name", "description"}
    if unknown:
        raise InputError(source, f"unknown key(s) {sorted(unknown)}")
    nodes: list[NodeSpec] = []
    groups: list[tuple[int, int, int, int, str, str]] = []
    total = 0
    for i, group in enumerate(data["nodes"]):
        where = f"nodes[{i}]"
        if not isinstance(group, dict):
            raise InputError(source, f"{where}: expected a mapping")
        bad = set(group) - {"count", "gpus", "gpu_type", "cpu_milli", "memory_mib", "name_prefix"}
        if bad:
            raise InputError(source, f"{where}: unknown key(s) {sorted(bad)}")
        try:
            count = int(group.get("count", 1))
            gpus = int(group["gpus"])
            cpu = int(group.get("cpu_milli", 0))
            mem = int(group.get("memory_mib", 0))
        except KeyError:
            raise InputError(source, f"{where}.gpus: required") from None
        except (TypeError, ValueError):
            raise InputError(source, f"{where}: count, gpus, cpu_milli, memory_mib must be integers") from None
        if count < 1 or gpus < 0 or cpu < 0 or mem < 0:
            raise InputError(source, f"{where}: count must be >= 1 and resources >= 0")
        _check_group(source, where, count, gpus, total)
        total += count
        gtype = str(group.get("gpu_type", "GPU"))
        prefix = str(group.get("name_prefix", gtype.lower()))
        groups.append((count, gpus, cpu, mem, gtype, prefix))
    for count, gpus, cpu, mem, gtype, prefix in groups:  # built once every group passed its checks
        start = len(nodes)
        nodes.extend(NodeSpec(f"{prefix}-{start + k}", gtype, gpus, cpu, mem) for k in range(count))
    topo = data.get("topology") or {}
    if not isinstance(topo, dict) or set(topo) - {"nodes_per_leaf", "leaves_per_spine"}:
        raise InputError(source, "topology: expected {nodes_per_leaf, leaves_per_spine}")
    try:
        npl = int(topo.get("nodes_per_leaf", DEFAULT_NODES_PER_LEAF))
        lps = int(topo.get("leaves_per_spine", DEFAULT_LEAVES_PER_SPINE))
    except (TypeError, ValueError):
        raise InputError(source, "topology: values must be integers") from None
    if npl < 1 or lps < 1:
        raise InputError(source, "topology: values must be >= 1")
    _no_gpus(source, nodes)
    return Cluster.from_nodes(nodes, nodes_per_leaf=npl, leaves_per_spine=lps)


def load_cluster(arg: str) -> Cluster:
    """Resolve a ``--cluster`` argument: built-in name, file (CSV/YAML inventory) or spec string."""
    if arg in BUILTIN_CLUSTERS:
        return parse_cluster_spec(BUILTIN_CLUSTERS[arg])
    path = Path(arg)
    suffixes = "".join(path.suffixes).lower()
    if path.suffix.lower() in (".yaml", ".yml"):
        if not path.exists():
            raise InputError(arg, "file not found")
        return _read_cluster_yaml(path)
    if suffixes.endswith((".csv", ".csv.gz")) or path.exists():
        return read_inventory(path)
    return parse_cluster_spec(arg)
