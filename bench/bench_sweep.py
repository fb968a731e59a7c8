"""Wall time of one policy study run in local processes and on a local Ray cluster of several nodes.

The study: 4 policies (kant, volcano-binpack, k8s-default, random) x 3 cluster sizes x 3 seeds on
Philly = 36 runs. It is run twice into fresh folders: in ``--jobs`` local processes, then on a local
Ray cluster (``ray.cluster_utils.Cluster``: a head that runs nothing and ``--ray-nodes`` nodes of
``--cpus-per-node`` CPUs). Prints both wall times and whether the two results tables are the same bytes.

    python bench/bench_sweep.py                  # the first 20,000 Philly jobs
    python bench/bench_sweep.py --limit 0        # the full trace (82,247 jobs)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import yaml

from kant.sweep import load_study, run_study

POLICIES = ["kant", "volcano-binpack", "k8s-default", "random"]


def study_text(limit: int, nodes: list[int], seeds: int) -> str:
    trace: dict[str, object] = {"name": "philly"}
    if limit:
        trace["limit"] = limit
    return yaml.safe_dump({
        "name": "bench-philly",
        "description": f"{len(POLICIES)} policies x {len(nodes)} cluster sizes x {seeds} seeds on Philly"
                       + (f" (first {limit:,} jobs)" if limit else ""),
        "traces": [trace],
        "policies": POLICIES,
        "clusters": [f"{n}x8:V100,leaf=8,spine=4" for n in nodes],
        "seeds": list(range(seeds)),
    }, sort_keys=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=20_000, help="first N Philly jobs (0 = all)")
    ap.add_argument("--nodes", type=int, nargs="+", default=[48, 64, 80], help="cluster sizes, 8-GPU nodes")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="local processes")
    ap.add_argument("--ray-nodes", type=int, default=2, help="Ray nodes that run tasks (besides the head)")
    ap.add_argument("--cpus-per-node", type=int, default=1)
    args = ap.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        root = Path(tmp)
        path = root / "study.yaml"
        path.write_text(study_text(args.limit, args.nodes, args.seeds))
        study = load_study(path)
        print(f"study: {study.description}: {len(study)} runs")

        t0 = time.perf_counter()
        local = run_study(study, root / "local", workers=args.jobs)
        t_local = time.perf_counter() - t0
        print(f"local, {args.jobs} processes: {t_local:.1f} s wall ({local.done} done, {len(local.failed)} failed)")

        t0 = time.perf_counter()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
        for _ in range(args.ray_nodes):
            cluster.add_node(num_cpus=args.cpus_per_node)
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        t_up = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            remote = run_study(study, root / "ray", use_ray=True)
            t_ray = time.perf_counter() - t0
        finally:
            ray.shutdown()
            cluster.shutdown()
        print(f"Ray, {args.ray_nodes} nodes x {args.cpus_per_node} CPU (+ a head running nothing): {t_ray:.1f} s wall "
              f"({remote.done} done, {len(remote.failed)} failed); cluster start {t_up:.1f} s not included")
        same = local.table.read_bytes() == remote.table.read_bytes()
        print(f"results.parquet identical: {same}")


if __name__ == "__main__":
    main()
