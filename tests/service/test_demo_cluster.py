"""``kant serve --demo philly`` without ``--cluster`` replays Philly on the cluster ``kant simulate``
uses by default (``philly-80``, issue 31): a real ``kant serve`` subprocess, its nodes read back."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from kant.cli._common import DEFAULT_CLUSTER
from kant.cli.main import cli
from kant.traces.registry import load_nodes
from service.serve_proc import Server, free_port


def test_the_demo_uses_the_simulators_default_cluster(tmp_path: Path) -> None:
    simulate = next(p for p in cli.commands["simulate"].params if p.name == "cluster").default
    assert simulate == DEFAULT_CLUSTER == "philly-80"
    port, token = free_port(), f"kant_test_{secrets.token_hex(16)}"
    args = [sys.executable, "-m", "kant.cli.main", "serve", "--demo", "philly", "--demo-limit", "5",
            "--port", str(port), "--db", f"sqlite:///{tmp_path / 'kant.db'}", "--log-level", "warning", "--no-predict"]
    log = tmp_path / "serve.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(args, cwd=tmp_path, env={**os.environ, "KANT_ADMIN_TOKEN": token},
                                stdout=out, stderr=subprocess.STDOUT)
    srv = Server(proc, port, token, log, args)
    try:
        srv.wait_ready()
        nodes = srv.admin.get("/v1/nodes").json()
        want = load_nodes(DEFAULT_CLUSTER)
        assert (len(nodes), sum(n["gpus"] for n in nodes)) == (want.n_nodes, want.total_gpus) == (80, 640)
    finally:
        srv.stop()
