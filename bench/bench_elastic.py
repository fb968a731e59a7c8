"""Elastic vs rigid gangs on the Pollux (OSDI'21) and Sia (SOSP'23) workloads (docs/elastic.md).

    python bench/bench_elastic.py [--trace pollux|sia] [--loads 1.0,2.0] [--cluster 16x4:T4]

Each workload file (Pollux: ``pollux-workloads/workloads{,-0.5,-1.5,-2.0}/workload-1..8.csv``, 160 jobs
each at 1.0x; Sia: ``sia-workloads/philly/workload-1..8.csv``) is read by
:func:`kant.traces.pollux.read_pollux` (semi-synthetic durations, seed 0) and run to the end on the
cluster (default 16 nodes x 4 GPUs = 64 GPUs, our choice) in these configurations:

* **rigid**: every job a rigid gang of ``num_replicas`` GPUs, policy ``kant`` (blocking allocate + EASY
  backfill, E-Binpack);
* **elastic**: the same jobs with ``min_workers`` 1 and ``max_workers`` 2 x ``num_replicas``, linear
  speed, policy ``elastic`` (kant + elastic-shrink + elastic-grow), 30 s per resize;
* **elastic-amdahl**: as elastic, with each job's speed-up table from Amdahl's law at a 5% serial
  fraction (the rigid run is unchanged: it runs every job at its reference size);
* **elastic-cost120**: as elastic, 120 s per resize (the scheduler's grow test told the same).

Printed per load and configuration, over the 8 files together: jobs, JCT mean and P90 (hours, submit to
end), GAR (time-weighted allocated / total GPUs from the first submit to the last end, the mean over
the files), resizes (total, and per job), the mean makespan (hours), and the change of the JCT mean and
P90 against rigid. Figures, never asserts.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from kant.config import load_policy, parse_policy
from kant.metrics.summary import summarize
from kant.sim import ExecutionModel, simulate
from kant.traces import load_cluster
from kant.traces.pollux import read_pollux
from kant.traces.registry import shared_traces_dir

CONFIGS = (
    # name, elastic, serial fraction, policy, resize cost
    ("rigid", False, 0.0, "kant", 30.0),
    ("elastic", True, 0.0, "elastic", 30.0),
    ("elastic-amdahl", True, 0.05, "elastic", 30.0),
    ("elastic-cost120", True, 0.0, "elastic", 120.0),
)


def files(trace: str, load: str) -> list[Path]:
    base = shared_traces_dir()
    if base is None:
        raise SystemExit("the shared traces folder was not found; set KANT_TRACES_DIR")
    if trace == "pollux":
        folder = base / "pollux-workloads" / ("workloads" if load == "1.0" else f"workloads-{load}")
    else:
        folder = base / "sia-workloads" / "philly"
    return sorted(folder.glob("workload-*.csv"), key=lambda p: int(p.stem.split("-")[1]))


def run(paths: list[Path], cluster: str, elastic: bool, serial: float, policy_name: str,
        cost: float) -> dict[str, float]:
    cl = load_cluster(cluster)
    policy = load_policy(policy_name)
    if cost != 30.0:  # the scheduler's grow test is told the same cost
        data = policy.to_dict()
        for action in data["actions"]:
            if action["name"] in ("elastic-shrink", "elastic-grow"):
                action.setdefault("args", {})["resize_cost_s"] = cost
        policy = parse_policy(data)
    jcts: list[np.ndarray] = []
    gars: list[float] = []
    spans: list[float] = []
    resizes = 0
    for p in paths:
        jobs = read_pollux(p, elastic=elastic, serial_fraction=serial)
        r = simulate(cl, jobs, policy, execution=ExecutionModel(resize_cost_s=cost))
        end = float(np.nanmax(r.end))
        jcts.append(r.end - jobs.submit)
        gar = summarize(r, window=(float(jobs.submit.min()), end)).gar.window
        gars.append(float("nan") if gar is None else gar)
        spans.append(end - float(jobs.submit.min()))
        resizes += int(r.resizes.sum()) if r.resizes is not None else 0
    jct = np.concatenate(jcts)
    return {"jobs": float(len(jct)), "jct_mean_h": float(np.mean(jct)) / 3600,
            "jct_p90_h": float(np.percentile(jct, 90)) / 3600, "gar": float(np.mean(gars)),
            "resizes": float(resizes), "makespan_h": float(np.mean(spans)) / 3600}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", choices=("pollux", "sia"), default="pollux")
    ap.add_argument("--loads", default="1.0,2.0", help="Pollux load folders (1.0, 0.5, 1.5, 2.0); Sia has one")
    ap.add_argument("--cluster", default="16x4:T4")
    args = ap.parse_args()
    loads = args.loads.split(",") if args.trace == "pollux" else ["1.0"]
    print(f"{args.trace} workloads on {args.cluster}; semi-synthetic durations (seed 0), see kant.traces.pollux")
    print(f"{'load':>5} {'config':<16} {'jobs':>5} {'JCT mean h':>10} {'JCT P90 h':>9} {'GAR':>6} "
          f"{'resizes':>7} {'/job':>5} {'makespan h':>10} {'mean vs rigid':>13} {'P90 vs rigid':>12}")
    for load in loads:
        paths = files(args.trace, load)
        base: dict[str, float] = {}
        for name, elastic, serial, policy, cost in CONFIGS:
            t0 = time.perf_counter()
            m = run(paths, args.cluster, elastic, serial, policy, cost)
            base = base or m  # the first configuration, rigid
            print(f"{load:>5} {name:<16} {int(m['jobs']):>5} {m['jct_mean_h']:>10.2f} {m['jct_p90_h']:>9.2f} "
                  f"{m['gar']:>6.3f} {int(m['resizes']):>7} {m['resizes'] / m['jobs']:>5.2f} "
                  f"{m['makespan_h']:>10.2f} {m['jct_mean_h'] / base['jct_mean_h'] - 1:>+13.0%} "
                  f"{m['jct_p90_h'] / base['jct_p90_h'] - 1:>+12.0%}   ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
