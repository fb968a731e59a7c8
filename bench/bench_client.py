"""The command-line client on a large queue: ``kant queue --limit N`` (the table, into a pipe) and
``kant queue --limit N --json`` against a ``kant serve`` whose database holds ``--jobs`` (100,000)
pending jobs, and ``kant acct`` over them (per tenant, and per job as CSV).

    python bench/bench_client.py [--jobs 100000] [--db sqlite|postgresql] [--runs 1]

Each command is one process (as a user runs it), timed from its start to its exit, with its CPU time
(user + sys, from ``os.wait4``) and the server's CPU time meanwhile beside (the server is a real
``kant serve`` process on 127.0.0.1, pinned to core 0 as in bench_serve.py; the wall time includes
its side: paging through the API, and on a busy machine mostly waiting for a core). Printed, never asserted; written to
bench/results/client.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_serve import Served, _fill, database  # noqa: E402


def timed(args: list[str], env: dict[str, str]) -> dict[str, float]:
    """Wall and CPU seconds of one client process (its output thrown away, as into a pipe)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kant.cli.main", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out = bytearray()
    assert proc.stdout is not None
    while chunk := proc.stdout.read(1 << 20):
        out += chunk
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"kant {' '.join(args)} failed: {err}")
    return {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "lines": out.count(b"\n")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    results: dict[str, Any] = {"jobs": args.jobs, "db": args.db}
    with tempfile.TemporaryDirectory(prefix="kant-bench-client-") as tmp, database(args.db, args.pg, Path(tmp)) as url:
        work = Path(tmp)
        results["fill_s"] = round(_fill(url, args.jobs, finished=False), 1)
        s = Served(url, work, cluster="10x8:H100")  # (a few jobs start: most stay pending)
        try:
            env = {**os.environ, "KANT_URL": s.url, "KANT_TOKEN": s.token}
            cases = {
                "queue": ["queue", "--limit", str(args.jobs)],
                "queue --json": ["queue", "--limit", str(args.jobs), "--json"],
                "queue (default limit)": ["queue"],
                "acct --report tenant": ["acct", "--report", "tenant"],
                "acct --format csv": ["acct", "--format", "csv"],
            }
            for name, cmd in cases.items():
                runs = []
                for _ in range(args.runs):
                    before = s.cpu_s()
                    runs.append(timed(cmd, env))
                    runs[-1]["server_cpu_s"] = round(s.cpu_s() - before, 2)
                results[name] = min(runs, key=lambda r: r["wall_s"])
                print(f"{name:24s} {json.dumps(results[name])}", flush=True)
        finally:
            s.stop()
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "client.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
