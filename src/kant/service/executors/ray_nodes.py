"""kant's view of a Ray cluster's nodes: which Ray node is which kant node (one name, one node), and
the spec of each (GPUs, GPU type, leaf and spine) from its resources and ``kant.*`` labels. The Ray
executor (:mod:`.ray_exec`) lists Ray's nodes and reads them through :func:`node_specs`."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kant.model.cluster import NodeSpec

__all__ = ["node_specs", "NAME_LABEL", "LEAF_LABEL", "SPINE_LABEL", "GPU_TYPE_LABEL", "DEFAULT_LEAF", "DEFAULT_SPINE",
           "DEFAULT_GPU_TYPE"]

log = logging.getLogger("kant.serve.ray")

NAME_LABEL = "kant.node"
LEAF_LABEL = "kant.leaf"
SPINE_LABEL = "kant.spine"
GPU_TYPE_LABEL = "kant.gpu-type"
DEFAULT_LEAF = "ray"
DEFAULT_SPINE = "ray"
DEFAULT_GPU_TYPE = "GPU"
_ACCELERATOR = "accelerator_type:"


def _gpu_type(info: Mapping[str, Any]) -> str:
    labels = info.get("Labels") or {}
    if labels.get(GPU_TYPE_LABEL):
        return str(labels[GPU_TYPE_LABEL])
    for key in sorted(info.get("Resources") or {}):
        if key.startswith(_ACCELERATOR):
            return str(key[len(_ACCELERATOR):])
    return str(labels.get("ray.io/accelerator-type") or DEFAULT_GPU_TYPE)


def node_specs(infos: Iterable[Mapping[str, Any]], names: dict[str, str],
               refused: dict[str, str] | None = None) -> dict[str, NodeSpec]:
    """kant's view of Ray's alive nodes (``ray.nodes()``), Ray node id -> spec.

    A node is its name: its ``kant.node`` label, else Ray's node name (its IP or ``--node-name``).
    ``names`` (Ray node id -> name) keeps the names of the alive nodes given so far: a node keeps its
    name while it lives, and the entries of nodes that died are dropped, so a raylet that comes back
    under the same name (a new Ray node id) is that node again. A name that an alive node holds
    already is refused to a second one (it is not used; the reason goes in ``refused``, node id ->
    reason, and the log, once). GPUs: Ray's ``GPU`` resource (whole GPUs); type: the
    ``kant.gpu-type`` label, else Ray's ``accelerator_type:X`` resource, else ``GPU``; leaf and
    spine: the ``kant.leaf`` and ``kant.spine`` labels, else ``ray`` (every unlabelled node under one
    switch).
    """
    refused = {} if refused is None else refused
    alive = {str(i["NodeID"]): i for i in infos if i.get("Alive")}
    for node_id in [n for n in names if n not in alive]:
        del names[node_id]  # a dead Ray node id is never kept
    for node_id in [n for n in refused if n not in alive]:
        del refused[node_id]
    # nodes named before keep their names; then the new ones, oldest first
    order = sorted(alive, key=lambda n: (n not in names, float(alive[n].get("StartTime") or 0.0), n))
    out: dict[str, NodeSpec] = {}
    for node_id in order:
        info = alive[node_id]
        labels = info.get("Labels") or {}
        res = info.get("Resources") or {}
        if node_id not in names:
            want = str(labels.get(NAME_LABEL) or info.get("NodeName") or node_id[:12])
            holder = next((n for n, name in names.items() if name == want), None)
            if holder is not None:
                if node_id not in refused:
                    refused[node_id] = (f"Ray node {node_id[:12]} is refused: its name {want!r} is held by the alive "
                                        f"Ray node {holder[:12]} (one name, one node: stop one of them)")
                    log.warning("%s", refused[node_id])
                continue
            names[node_id] = want
            refused.pop(node_id, None)
        out[node_id] = NodeSpec(names[node_id], _gpu_type(info), int(res.get("GPU", 0)),
                                int(res.get("CPU", 0) * 1000), int(res.get("memory", 0) // (1 << 20)),
                                str(labels.get(LEAF_LABEL) or DEFAULT_LEAF),
                                str(labels.get(SPINE_LABEL) or DEFAULT_SPINE))
    return out
