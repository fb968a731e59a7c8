"""Which of the twin's sampled run times its prediction error comes from: the in-process accuracy
bench (``bench_whatif.py --accuracy``) with the sampled run times of the running jobs, of the
pending jobs, or of both replaced by the true ones (an oracle). A diagnostic, not a feature: it
patches :func:`kant.twin.predict.sample_durations` in this process only.

    python bench/whatif_oracle.py running --policy k8s-default --policy kant
    python bench/whatif_oracle.py pending --policy k8s-default

Every argument after the first goes to ``bench_whatif.py --accuracy`` after the live slice's
arguments (``--start-day 42.375 --jobs 2850 --warmup-h 6 --regime noisy``, as docs/whatif.md's
in-process proxy of the live bench). The service's job names are the slice's rows
(:func:`whatif_slice.submit_instant`), which is how a row's true run time is found.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import numpy as np

import bench_whatif
import whatif_slice

SLICE = ["--start-day", "42.375", "--jobs", "2850", "--warmup-h", "6", "--regime", "noisy"]


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in ("running", "pending", "both"):
        raise SystemExit("usage: whatif_oracle.py running|pending|both [bench_whatif.py --accuracy arguments]")
    which = sys.argv[1]
    start = float(SLICE[1])
    jobs_n = int(SLICE[3])
    true = np.asarray(whatif_slice.philly_slice(start, jobs_n).duration, dtype=np.float64)
    predict_mod = importlib.import_module("kant.twin.predict")  # (kant.twin's ``predict`` is the function)
    sampled = predict_mod.sample_durations

    def oracle(snap: Any, rng: np.random.Generator, model: Any = None) -> np.ndarray:
        out = sampled(snap, rng, model)  # (drawn all the same: the generator's stream is unchanged)
        rows = [*(snap.sched.running if which in ("running", "both") else ()),
                *(snap.sched.pending if which in ("pending", "both") else ())]
        names = snap.jobs["name"]
        for r in rows:
            out[r] = true[int(names[r])]
        return np.asarray(out)

    predict_mod.sample_durations = oracle
    sys.argv = ["bench_whatif.py", "--accuracy", *SLICE, *sys.argv[2:]]
    print(f"oracle: the {which} jobs' sampled run times replaced by the true ones")
    bench_whatif.main()


if __name__ == "__main__":
    main()
