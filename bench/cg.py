"""The first JOBS Philly jobs by submit time (0: all) under POLICY on CLUSTER, in ``simulate``; prints
the cluster, policy, jobs, cycles and a digest of first starts and ends. The run the instruction
counts of docs/performance.md are taken on:

    PYTHONHASHSEED=0 PYTHONPATH=<tree>/src valgrind --tool=callgrind python bench/cg.py philly-80 kant 20000
"""

from __future__ import annotations

import hashlib
import sys

import numpy as np

from kant.config import load_policy
from kant.sim import simulate
from kant.traces import load_cluster, read_philly


def main(argv: list[str]) -> None:
    cluster, pol, limit = argv[0], argv[1], int(argv[2])
    jobs = read_philly()
    if limit:
        jobs = jobs.take(np.sort(np.argsort(jobs.submit, kind="stable")[:limit]))
    r = simulate(load_cluster(cluster), jobs, load_policy(pol))
    h = hashlib.sha256(np.nan_to_num(r.first_start, nan=-1).tobytes()
                       + np.nan_to_num(r.end, nan=-1).tobytes()).hexdigest()[:16]
    print(cluster, pol, limit, r.cycles, h)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python bench/cg.py CLUSTER POLICY JOBS")
    main(sys.argv[1:])
