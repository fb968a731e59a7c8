"""Write ``tests/golden/golden.json``: the outcome of fixed-seed runs that speed work must not change.

    PYTHONPATH=src python tests/golden/make_golden.py            # regenerate (only on purpose!)
    PYTHONPATH=src python tests/golden/make_golden.py --check    # compare, print differences

The fixture was generated before the performance work of docs/performance.md; every optimisation
since must reproduce it bit for bit (``tests/test_golden.py``). Regenerate it only for an intended
change of scheduling results (a policy's rule changed), and say so where the change is recorded.

Each case is (trace, cluster, policy). Recorded per case: a SHA-256 of the per-job outcome arrays
(first start, end, status, runs, preemptions, GPU-seconds, topology span) and of the cluster time
series, the cycle and event counts (all compared exactly), and headline metrics from
:func:`kant.metrics.summary.summarize` (wall-clock fields dropped; floats compared to 1e-12 relative,
see FLOAT_REL_TOL).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from kant.config import load_policy
from kant.metrics.recorder import SimResult
from kant.metrics.summary import summarize
from kant.model.cluster import Cluster
from kant.model.job import JobTable
from kant.sim import NodeFailure, simulate
from kant.traces import load_cluster, read_philly
from kant.traces.synthetic import PHILLY_GANG_MIX, SyntheticSpec, generate_jobs

HERE = Path(__file__).parent
FIXTURE = HERE / "golden.json"
#: full-size cases, too slow for the test suite: checked by hand with ``--large --check``
FIXTURE_LARGE = HERE / "golden_large.json"

#: Philly's first jobs in submit order (the real trace, on the Philly-sized cluster)
PHILLY_JOBS = 6_000
#: a synthetic trace with LLM-era gangs (up to 256 GPUs) on a 1,000-node, two-type cluster
SYNTH_SPEC = SyntheticSpec(jobs=6_000, seed=11, rate_per_h=2500.0, mean_gpus=5.7,
                           gang_mix={**PHILLY_GANG_MIX, 256: 40.0},
                           gpu_types={"H100": 0.6, "A100": 0.3, "A100|H100": 0.1})
SYNTH_CLUSTER = "600x8:H100+400x8:A100,leaf=32,spine=8"

POLICIES = ("volcano-binpack", "k8s-default", "best-fit", "kant-nobackfill", "fifo-strict", "topology-soft",
            "kant", "slurm-backfill")
#: the synthetic trace again, with node failures and repairs (seeded), on fewer policies
FAILURE_POLICIES = ("volcano-binpack", "k8s-default", "kant-nobackfill")
CASES = ([("philly", p) for p in POLICIES] + [("synthetic", p) for p in POLICIES]
         + [("failures", p) for p in FAILURE_POLICIES])


#: the bench traces: full Philly, and 100,000 synthetic jobs on the 10,000-node bench cluster
LARGE_CASES = ([("philly-full", p) for p in ("volcano-binpack", "kant-nobackfill", "kant")]
               + [("scale-100k", p) for p in ("volcano-binpack", "k8s-default", "kant-nobackfill")])


def failures(cluster: Cluster, jobs: JobTable) -> list[NodeFailure]:
    """60 node failures spread over the first half of the arrivals, repaired after 1-4 hours."""
    rng = np.random.default_rng(5)
    horizon = float(np.median(jobs.submit))
    times = np.sort(rng.uniform(0.0, horizon, 60))
    nodes = rng.integers(0, cluster.n_nodes, 60)
    repair = rng.uniform(3600.0, 4 * 3600.0, 60)
    return [NodeFailure(float(t), int(n), float(r)) for t, n, r in zip(times, nodes, repair, strict=True)]


def load_trace(name: str) -> tuple[Cluster, JobTable]:
    if name == "philly-full":
        return load_cluster("philly"), read_philly()
    if name == "scale-100k":
        sys.path.insert(0, str(HERE.parent.parent / "bench"))
        from bench_scale import scale_cluster, scale_jobs

        return scale_cluster(10_000), scale_jobs(100_000)
    if name == "philly":
        jobs = read_philly()
        order = np.argsort(jobs.submit, kind="stable")[:PHILLY_JOBS]
        return load_cluster("philly"), jobs.take(np.sort(order))
    return load_cluster(SYNTH_CLUSTER), generate_jobs(SYNTH_SPEC)


def _digest(*arrays: Any) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        # one NaN spelling for floats
        a = np.where(np.isnan(a), -1.0, a).astype("<f8") if a.dtype.kind == "f" else a.astype("<i8")
        h.update(a.tobytes())
    return h.hexdigest()


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """The metrics a results table shows (the per-job digests cover everything else)."""
    return {
        "counts": metrics["counts"],
        "gar": {k: metrics["gar"][k] for k in ("window", "run")},
        "sor": metrics["sor"],
        "gfr": metrics["gfr"],
        "queue": metrics["queue"],
        "jwtd": metrics["jwtd"]["overall"],
        "jct": metrics["jct"]["overall"],
        "topology": metrics["topology"],
    }


def outcome(result: SimResult) -> dict[str, Any]:
    """What a run produced, minus wall-clock time."""
    metrics = json.loads(json.dumps(summarize(result).to_dict(), default=str))
    return {
        "jobs_digest": _digest(result.first_start, result.end, result.status, result.runs, result.preemptions,
                               result.gpu_seconds, result.span_nodes, result.span_leaves, result.span_spines),
        "series_digest": _digest(result.times, *(result.series[k] for k in sorted(result.series))),
        "cycles": result.cycles,
        "events": result.events,
        "end_time": result.end_time,
        "metrics": headline(metrics),
    }


def run_case(trace: str, policy: str, loaded: dict[str, tuple[Cluster, JobTable]]) -> dict[str, Any]:
    if trace not in loaded:
        loaded[trace] = load_trace(trace)
    cluster, jobs = loaded[trace]
    extra = {"failures": failures(cluster, jobs)} if trace == "failures" else {}
    return outcome(simulate(cluster, jobs, load_policy(policy), seed=3, **extra))  # type: ignore[arg-type]


def compute(cases: list[tuple[str, str]] = CASES) -> dict[str, Any]:
    loaded: dict[str, tuple[Cluster, JobTable]] = {}
    return {f"{t}/{p}": run_case(t, p, loaded) for t, p in cases}


#: relative tolerance for float metrics. The digests (per-job outcomes, cluster series) and every integer
#: are compared exactly; summary metrics are weighted means, which were summed through ``np.dot`` (BLAS
#: sums in an order that depends on its thread count) when the golden files were made, so they may sit
#: one or two ulps from today's NumPy sums.
FLOAT_REL_TOL = 1e-12


def diff(expected: Any, got: Any, path: str = "") -> list[str]:
    """Paths where two outcomes differ (exact, except floats within FLOAT_REL_TOL; NaN equal to NaN)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        out = []
        for k in sorted(set(expected) | set(got)):
            out += diff(expected.get(k), got.get(k), f"{path}/{k}")
        return out
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        return [d for i, (a, b) in enumerate(zip(expected, got, strict=True)) for d in diff(a, b, f"{path}[{i}]")]
    same = expected == got
    if not same and isinstance(expected, float) and isinstance(got, float):
        same = (expected != expected and got != got) or math.isclose(expected, got, rel_tol=FLOAT_REL_TOL)
    return [] if same else [f"{path}: expected {expected!r}, got {got!r}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the fixture instead of writing it")
    ap.add_argument("--large", action="store_true", help="the full-size cases (golden_large.json)")
    args = ap.parse_args()
    fixture = FIXTURE_LARGE if args.large else FIXTURE
    got = compute(LARGE_CASES if args.large else CASES)
    if args.check:
        expected = json.loads(fixture.read_text())
        problems = diff(expected, got)
        print("\n".join(problems) or "golden: identical")
        sys.exit(1 if problems else 0)
    fixture.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    print(f"wrote {fixture} ({len(got)} cases)")


if __name__ == "__main__":
    main()
