"""Fixtures of the Ray executor tests: one local multi-node Ray cluster per module (Ray's own test
utility starts one raylet per node on this machine; each node declares its GPUs, no real GPU is
needed) and one ``kant serve --executor ray`` process driving it.

The cluster: a head node with no GPU (kant sees it as a CPU-only node) and three nodes of 2 "V100"
each, labelled ``kant.node`` n0..n2, ``kant.leaf`` l0, l0, l1 and ``kant.spine`` s0. Node deaths are
noticed within about a second (the GCS's health check is shortened).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kant_ray_cluster import RayNodes, raylets

from service.serve_proc import Server, free_port

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
    """``kant serve --executor ray`` on the module's Ray cluster (nodes from Ray, wall clock, SQLite,
    a policy with the quota plugin, gangs that cannot start within 5 s go back to the queue)."""
    import os
    import secrets

    work = tmp_path_factory.mktemp("kant-ray")
    port = free_port()
    token = f"kant_test_{secrets.token_hex(16)}"
    args = [sys.executable, "-m", "kant.cli.main", "serve", "--db", f"sqlite:///{work / 'kant.db'}", "--port",
            str(port), "--executor", "ray", "--ray-address", ray_nodes.address, "--policy", str(POLICY),
            "--clock", "wall", "--no-predict", "--ray-start-timeout", "5", "--log-dir", str(work / "logs"),
            "--checkpoint-dir", str(work / "ckpt"), "--log-level", "warning"]
    log = work / "serve.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(args, cwd=work, env={**os.environ, "KANT_ADMIN_TOKEN": token, "PYTHONUNBUFFERED": "1"},
                                stdout=out, stderr=subprocess.STDOUT)
    server = Server(proc, port, token, log, args)
    try:
        server.wait_ready(120.0)
        yield server
    finally:
        server.stop()
