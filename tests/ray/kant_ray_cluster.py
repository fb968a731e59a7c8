"""The local multi-node Ray cluster of the Ray executor tests (Ray's ``cluster_utils.Cluster``)."""

from __future__ import annotations

import subprocess
from typing import Any

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
