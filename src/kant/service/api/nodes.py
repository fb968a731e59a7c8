"""Nodes: list them (with GPUs in use, from the loop while it runs), read one, and, for admins,
register one, cordon, drain, uncordon, fail, repair or remove it."""

from __future__ import annotations

from fastapi import APIRouter

from kant.model.cluster import NodeSpec
from kant.service.api.deps import Admin, Svc, Who
from kant.service.errors import NotFound
from kant.service.schemas import NodeAction, NodeIn, NodeOut

__all__ = ["NODE_OPS", "router"]

router = APIRouter(tags=["nodes"])

NODE_OPS = ("cordon", "uncordon", "drain", "fail", "repair")


@router.get("/v1/nodes", response_model=list[NodeOut])
def list_nodes(p: Who, svc: Svc) -> list[NodeOut]:
    """Every node with its state and GPUs in use."""
    loop = svc.loop
    if loop is not None and loop.alive:
        views = loop.call(lambda lp: lp.node_views())
        reasons = {n.name: n.reason for n in svc.db.nodes.list()}
        return [NodeOut(name=v.name, gpu_type=v.gpu_type, gpus=v.gpus, used_gpus=v.used_gpus, state=v.state,
                        reason=reasons.get(v.name), leaf=v.leaf, spine=v.spine, cpu_milli=v.cpu_milli,
                        memory_mib=v.memory_mib) for v in views]
    return [NodeOut.of_row(r) for r in svc.db.nodes.list() if r.state != "removed"]


@router.get("/v1/nodes/{name}", response_model=NodeOut)
def get_node(name: str, p: Who, svc: Svc) -> NodeOut:
    for node in list_nodes(p, svc):
        if node.name == name:
            return node
    raise NotFound(f"no node {name!r}")


@router.post("/v1/nodes", status_code=201, response_model=NodeOut)
def add_node(body: NodeIn, p: Admin, svc: Svc) -> NodeOut:
    """Register a node (the scheduler is rebuilt on the new inventory; running jobs stay)."""
    svc.leading().add_node(NodeSpec(body.name, body.gpu_type, body.gpus, body.cpu_milli, body.memory_mib, body.leaf,
                                    body.spine))
    return get_node(body.name, p, svc)


@router.post("/v1/nodes/{name}/{op}", response_model=NodeOut)
def node_op(name: str, op: str, p: Admin, svc: Svc, body: NodeAction | None = None) -> NodeOut:
    """cordon (no new work), drain (cordon; 'drained' once empty), uncordon, fail (its jobs go back to
    the queue) or repair (up and uncordoned)."""
    if op not in NODE_OPS:
        raise NotFound(f"no node operation {op!r}; operations: {', '.join(NODE_OPS)}")
    svc.leading().node_op(name, op, reason=body.reason if body else None)
    return get_node(name, p, svc)


@router.delete("/v1/nodes/{name}", response_model=dict[str, str])
def remove_node(name: str, p: Admin, svc: Svc, force: bool = False) -> dict[str, str]:
    """Remove a node: it must run nothing (drain it first) unless force, which requeues its jobs."""
    svc.leading().node_op(name, "remove", force=force)
    return {"name": name, "state": "removed"}
