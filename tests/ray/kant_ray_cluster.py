"""The local multi-node Ray cluster of the Ray executor tests (Ray's ``cluster_utils.Cluster``), and
``kant serve --executor ray`` started on it (:func:`kant_on_ray`)."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from service.serve_proc import Server, free_port

LEAVES = ("l0", "l0", "l1")


def raylets(session_dir: str) -> list[str]:
    """Raylet processes of the Ray session in ``session_dir`` (none may be left after a module's
    cluster shut down; other Ray sessions on the machine are not this test's)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=False).stdout
    return [line for line in out.splitlines() if "raylet" in line and session_dir in line]


class RayNodes:
    """The local Ray cluster of a module: ``nodes[name]`` is Ray's node object of each GPU node."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "num_gpus": 0, "include_dashboard": False,
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 2,
                               "health_check_initial_delay_ms": 0}})
        self.nodes: dict[str, Any] = {}
        for i, leaf in enumerate(LEAVES):
            self.add(f"n{i}", leaf)

    @property
    def session_dir(self) -> str:
        return str(self.cluster.head_node.get_session_dir_path())

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def add(self, name: str, leaf: str) -> Any:
        node = self.cluster.add_node(num_cpus=1, num_gpus=2, resources={"accelerator_type:V100": 1},
                                     labels={"kant.node": name, "kant.leaf": leaf, "kant.spine": "s0"})
        self.nodes[name] = node
        return node

    def remove(self, name: str) -> None:
        self.cluster.remove_node(self.nodes.pop(name))

    def shutdown(self) -> None:
        self.cluster.shutdown()


@contextlib.contextmanager
def kant_on_ray(ray_nodes: RayNodes, work: Path, policy: str, start_timeout: float) -> Iterator[Server]:
    """``kant serve --executor ray`` on ``ray_nodes`` (nodes from Ray, wall clock, SQLite in ``work``,
    policy ``policy``; a gang that cannot start within ``start_timeout`` s goes back to the queue)."""
    port = free_port()
    token = f"kant_test_{secrets.token_hex(16)}"
    args = [sys.executable, "-m", "kant.cli.main", "serve", "--db", f"sqlite:///{work / 'kant.db'}", "--port",
            str(port), "--executor", "ray", "--ray-address", ray_nodes.address, "--policy", policy,
            "--clock", "wall", "--no-predict", "--ray-start-timeout", f"{start_timeout:g}", "--log-dir",
            str(work / "logs"), "--checkpoint-dir", str(work / "ckpt"), "--log-level", "warning"]
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
