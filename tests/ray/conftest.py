"""Fixtures of the Ray executor tests: one local multi-node Ray cluster per module (Ray's own test
utility starts one raylet per node on this machine; each node declares its GPUs, no real GPU is
needed) and one ``kant serve --executor ray`` process driving it.

The cluster: a head node with no GPU (kant sees it as a CPU-only node) and three nodes of 2 "V100"
each, labelled ``kant.node`` n0..n2, ``kant.leaf`` l0, l0, l1 and ``kant.spine`` s0. Node deaths are
noticed within about a second (the GCS's health check is shortened).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kant_ray_cluster import RayNodes, kant_on_ray, raylets

from service.serve_proc import Server

POLICY = Path(__file__).parent / "quota-policy.yaml"


@pytest.fixture(scope="module")
def ray_nodes() -> Iterator[RayNodes]:
    nodes = RayNodes()
    session = nodes.session_dir
    try:
        yield nodes
    finally:
        nodes.shutdown()
        deadline = time.monotonic() + 30
        while raylets(session) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not raylets(session), f"raylets left running after the cluster's shutdown: {raylets(session)}"


@pytest.fixture(scope="module")
def kant(ray_nodes: RayNodes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``kant serve --executor ray`` on the module's Ray cluster with a policy with the quota plugin;
    gangs that cannot start within 5 s go back to the queue."""
    with kant_on_ray(ray_nodes, tmp_path_factory.mktemp("kant-ray"), str(POLICY), 5.0) as server:
        yield server
