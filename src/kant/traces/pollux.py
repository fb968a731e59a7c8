"""Reader for the Pollux (OSDI'21) and Sia (SOSP'23) simulator workloads, as elastic jobs.

Both artifacts' workloads are CSV files ``name,time,application,num_replicas,batch_size``: one job
per row, submitted ``time`` seconds into an 8-hour window, with the number of GPUs the job asks for
(``num_replicas``) and its global batch size. The files give no run time: a job's length is "train
this application to its target", which needs the artifacts' per-application throughput and
statistical-efficiency models (not in the traces). So kant makes them *semi-synthetic*, with a rule
that only uses what the files say and the generator that made them (Pollux's ``workload.py``, quoted in
the trace README): a Philly job's GPU time picked its application by bucket, ``< 1 GPU-h`` ->
cifar10 / ncf, ``< 10 GPU-h`` -> deepspeech2 / bert, ``< 100 GPU-h`` -> yolov3, else imagenet
(``< 1000 GPU-h``, the generator's cut). Each job's GPU time is drawn log-uniformly within its
application's bucket (the lowest bucket starts at the generator's 60 s per GPU), by a hash of the job's
name and the ``seed`` (the same file and seed give the same bits), and its duration at
``num_replicas`` GPUs is that GPU time over ``num_replicas``.

Kept: ``name``, ``time`` -> ``submit``, ``num_replicas`` -> ``workers`` (one GPU per worker: the
replicas are data-parallel workers of one GPU each), ``application`` -> ``user`` (so results can be
grouped by application). Dropped: ``batch_size`` (Pollux adapts it; kant has no statistical
efficiency model).

Elastic (``elastic=True``, the default): ``min_workers = max(1, ceil(num_replicas x min_fraction))``
(default ``min_fraction`` 0: one worker) and ``max_workers = num_replicas x max_factor`` (default 2);
the duration is at ``num_replicas`` workers. The speed of a size is linear unless ``serial_fraction``
is above 0: each job then gets Amdahl's law as its speed-up table, ``1 / (s + (1 - s) / k)`` for every
size ``k`` from 1 to its maximum. ``elastic=False`` reads the same jobs as rigid gangs (the baseline).
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import numpy as np

from kant.errors import InputError
from kant.model.job import JobTable, JobTableBuilder
from kant.traces._csv import Problems
from kant.traces.columns import float_column, int_column, text_column
from kant.traces.raw import read_raw

__all__ = ["POLLUX_COLUMNS", "APP_GPU_HOURS", "read_pollux"]

POLLUX_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")

#: application -> GPU-hour bucket [low, high) of the Pollux workload generator
APP_GPU_HOURS: dict[str, tuple[float, float]] = {
    "cifar10": (0.0, 1.0),
    "ncf": (0.0, 1.0),
    "deepspeech2": (1.0, 10.0),
    "bert": (1.0, 10.0),
    "yolov3": (10.0, 100.0),
    "imagenet": (100.0, 1000.0),
}


def _unit(name: str, seed: int) -> float:
    """A uniform number in [0, 1) from the job's name and the seed (stable across runs and platforms)."""
    return zlib.crc32(f"{seed}:{name}".encode()) / 2.0**32


def _amdahl(s: float, top: int) -> tuple[tuple[int, float], ...]:
    return tuple((k, 1.0 / (s + (1.0 - s) / k)) for k in range(1, max(top, 2) + 1))


def read_pollux(path: str | Path, *, elastic: bool = True, min_fraction: float = 0.0, max_factor: float = 2.0,
                serial_fraction: float = 0.0, seed: int = 0, problems: Problems | None = None) -> JobTable:
    """Read a Pollux / Sia workload CSV into a :class:`JobTable` (see the module notes for the rule)."""
    p = Path(path)
    if not 0.0 <= min_fraction <= 1.0:
        raise InputError(str(p), f"min_fraction must be within [0, 1], got {min_fraction}")
    if not max_factor >= 1.0:
        raise InputError(str(p), f"max_factor must be >= 1, got {max_factor}")
    if not 0.0 <= serial_fraction < 1.0:
        raise InputError(str(p), f"serial_fraction must be within [0, 1), got {serial_fraction}")
    raw = read_raw(p)
    raw.require(POLLUX_COLUMNS)
    check = raw.check(problems)
    names = text_column(raw, "name")
    apps = text_column(raw, "application")
    check.flag(np.array([a not in APP_GPU_HOURS for a in apps], dtype=bool), "application",
               f"unknown application (one of {', '.join(APP_GPU_HOURS)})", raw.columns["application"])
    seen: set[str] = set()
    dup = np.zeros(len(raw), dtype=bool)
    for i, s in enumerate(names):
        dup[i] = s in seen or not s
        seen.add(s)
    check.flag(dup, "name", "empty or duplicate job name", raw.columns["name"])
    replicas = int_column(raw, check, "num_replicas", minimum=1)
    submit = float_column(raw, check, "time", minimum=0)
    keep = check.finish()
    rows = np.flatnonzero(keep)
    if not rows.size:
        raise InputError(str(p), "no valid job rows")
    b = JobTableBuilder(source=str(p))
    for i in rows[np.argsort(submit[rows], kind="stable")].tolist():
        name, app, r = names[i], apps[i], int(replicas[i])
        low_h, high_h = APP_GPU_HOURS[app]
        low_s = max(low_h * 3600.0, 60.0 * r)
        high_s = max(high_h * 3600.0, low_s * 1.0001)
        gpu_s = math.exp(math.log(low_s) + _unit(name, seed) * (math.log(high_s) - math.log(low_s)))
        kwargs: dict[str, object] = {}
        if elastic:
            top = max(math.floor(r * max_factor), r)
            kwargs = {"min_workers": max(1, min(r, math.ceil(r * min_fraction))), "max_workers": top,
                      "speedup": _amdahl(serial_fraction, top) if serial_fraction > 0 else None}
        b.add(name, submit=float(submit[i]), duration=gpu_s / r, workers=r, gpus_per_worker=1, user=app,
              **kwargs)  # type: ignore[arg-type]
    return b.build()
