"""FGD experiment speed: per-policy time of one run on an openb pod list (median of N runs).

    python bench/bench_fgd.py [--pods default] [--policy fgd --policy ...] [--runs 3] [--order creation]

One run = the placement loop of :func:`kant.experiments.fgd.core.run_core` (the core scheduler; arrivals with 1.3x
inflation, every pod placed or failed; trace loading excluded, timed separately). Reports wall time
and the process's CPU time (less sensitive to other load on the machine), pods per second, and
whether the median wall time meets the 2 s target. Prints a table and writes
bench/results/fgd.json. Figures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from kant.experiments.fgd.core import POLICY_NAMES, load_cluster_and_pods, run_core
from kant.experiments.fgd.run import load_inventory, load_workload, never_fits, openb_dir

TARGET_S = 2.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", default="default")
    ap.add_argument("--policy", action="append", default=None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--inflate", type=float, default=1.3)
    ap.add_argument("--order", choices=("creation", "shuffle"), default="creation")
    ap.add_argument("--trace-dir", default=None)
    args = ap.parse_args()
    d = openb_dir(args.trace_dir)
    nodes = str(d / "openb_node_list_gpu_node.csv")
    t0 = time.perf_counter()
    inv = load_inventory(nodes)
    wl = load_workload(str(d / f"openb_pod_list_{args.pods}.csv"), nodes)
    cluster, pods = load_cluster_and_pods(str(d / f"openb_pod_list_{args.pods}.csv"), nodes)
    never = never_fits(inv, wl)
    load_s = time.perf_counter() - t0
    rows = []
    for name in args.policy or list(POLICY_NAMES):
        walls, cpus = [], []
        for _ in range(args.runs):
            c0 = time.process_time()
            r = run_core(cluster, pods, wl, name, args.seed, pods_label=args.pods, inflate=args.inflate,
                         order=args.order, never=never)
            cpus.append(time.process_time() - c0)
            walls.append(r.time_s)
        wall = statistics.median(walls)
        rows.append({
            "policy": name,
            "arrivals": r.n_arrivals,
            "placed": int(np.count_nonzero(r.placed)),
            "wall_s": round(wall, 3),
            "wall_min_s": round(min(walls), 3),
            "wall_max_s": round(max(walls), 3),
            "cpu_s": round(statistics.median(cpus), 3),
            "pods_per_s": round(r.n_arrivals / wall),
            "meets_target": wall <= TARGET_S,
        })
    print(f"FGD experiment on openb {args.pods} ({inv.n_nodes} nodes, {inv.total_gpu_milli // 1000} GPUs), "
          f"{args.order} order, inflate {args.inflate:g}, median of {args.runs} run(s); load {load_s:.2f} s; "
          f"Python {platform.python_version()}, {os.cpu_count()} CPU(s)")
    print(f"{'policy':<16}{'arrivals':>9}{'placed':>8}{'wall s':>8}{'min':>7}{'max':>7}{'cpu s':>8}"
          f"{'pods/s':>8}  <= {TARGET_S:g} s")
    for r in rows:
        print(f"{r['policy']:<16}{r['arrivals']:>9}{r['placed']:>8}{r['wall_s']:>8}{r['wall_min_s']:>7}"
              f"{r['wall_max_s']:>7}{r['cpu_s']:>8}{r['pods_per_s']:>8}  {'yes' if r['meets_target'] else 'NO'}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "fgd.json").write_text(json.dumps({
        "machine": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
        "pods": args.pods, "order": args.order, "inflate": args.inflate, "seed": args.seed, "runs": args.runs,
        "load_s": round(load_s, 3), "target_s": TARGET_S, "rows": rows,
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
