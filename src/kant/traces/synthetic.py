"""Seeded synthetic training traces drawn from distributions, fully vectorised (a million jobs in
about a second).

Defaults follow the Philly trace as its README describes it: gang sizes in Philly's proportions
(:data:`PHILLY_GANG_MIX`), log-normal run times with Philly's median (1,144 s) and 90th percentile
(11,266 s), and Poisson arrivals. Every knob is a field of :class:`SyntheticSpec`; the same spec and
seed always give the same table. On the command line (and anywhere a trace name is accepted) a
spec is written ``synthetic:jobs=100000,seed=1,rate=120,mean_gpus=5.68,types=A100:0.7|H100:0.3``
(see :func:`parse_synthetic`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from kant.errors import ConfigError
from kant.model.job import JobTable
from kant.traces._csv import split_gangs
from kant.traces.schema import Coded, build_job_table

__all__ = ["PHILLY_DURATION_P50_S", "PHILLY_DURATION_P90_S", "PHILLY_GANG_MIX", "SyntheticSpec", "generate_jobs",
           "parse_synthetic", "read_synthetic"]

#: Philly gang sizes and job counts (philly-jobs-pollux README)
PHILLY_GANG_MIX: dict[int, float] = {1: 76627, 2: 1818, 4: 1870, 8: 1643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6,
                                     128: 3}
#: Philly run-time median and 90th percentile in seconds (philly-jobs-pollux README)
PHILLY_DURATION_P50_S = 1144.0
PHILLY_DURATION_P90_S = 11266.0
_Z90 = 1.2815515655446004  # standard normal 90th percentile


@dataclass(frozen=True)
class SyntheticSpec:
    """What to generate. Times are seconds; rates are per hour.

    * ``jobs``, ``seed``;
    * arrivals: ``rate_per_h`` on average, inter-arrival times Gamma with coefficient of variation
      ``arrival_cv`` (1 = Poisson, larger = burstier);
    * run times: log-normal with median ``duration_p50_s`` and 90th percentile ``duration_p90_s``,
      clipped to ``[duration_min_s, duration_max_s]``; or resampled from ``duration_samples``;
    * gangs: total GPUs drawn from ``gang_mix`` (size -> weight), then moved toward
      ``mean_gpus`` (mean GPUs per job) with :func:`~kant.traces.transforms.resize_gangs` if set,
      split into workers of at most ``max_gpus_per_worker``;
    * ``gpu_types`` (type -> weight; empty = any type), ``tenants`` (count, Zipf weights with
      exponent ``tenant_zipf``), ``priorities`` (priority -> weight).
    """

    jobs: int = 10_000
    seed: int = 0
    rate_per_h: float = 30.0
    arrival_cv: float = 1.0
    duration_p50_s: float = PHILLY_DURATION_P50_S
    duration_p90_s: float = PHILLY_DURATION_P90_S
    duration_min_s: float = 1.0
    duration_max_s: float = 30 * 86400.0
    duration_samples: tuple[float, ...] = ()
    gang_mix: Mapping[int, float] = field(default_factory=lambda: dict(PHILLY_GANG_MIX))
    mean_gpus: float | None = None
    max_gpus: int = 1024
    max_gpus_per_worker: int = 8
    gpu_types: Mapping[str, float] = field(default_factory=dict)
    tenants: int = 1
    tenant_zipf: float = 1.0
    priorities: Mapping[int, float] = field(default_factory=lambda: {0: 1.0})

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first bad field."""
        def bad(name: str, msg: str) -> ConfigError:
            return ConfigError("synthetic", name, msg)

        if not 0 <= self.jobs <= 100_000_000:
            raise bad("jobs", "must be between 0 and 100,000,000")
        if not (self.rate_per_h > 0 and math.isfinite(self.rate_per_h)):
            raise bad("rate", "must be a positive number")
        if not (self.arrival_cv > 0 and math.isfinite(self.arrival_cv)):
            raise bad("cv", "must be a positive number")
        if not 0 < self.duration_p50_s < self.duration_p90_s < math.inf:
            raise bad("p90", "need 0 < p50 < p90")
        if not 0 <= self.duration_min_s <= self.duration_max_s:
            raise bad("max_duration", "need 0 <= min <= max")
        if any(not (s >= 0 and math.isfinite(s)) for s in self.duration_samples):
            raise bad("duration_samples", "must be finite numbers >= 0")
        if not self.gang_mix or any(int(k) < 1 or not (w >= 0) for k, w in self.gang_mix.items()) \
                or sum(self.gang_mix.values()) <= 0:
            raise bad("gangs", "sizes must be >= 1 with weights >= 0, not all zero")
        if self.max_gpus_per_worker < 1 or self.max_gpus < 1:
            raise bad("max_gpus", "must be >= 1")
        if self.gpu_types and (any(not (w >= 0) for w in self.gpu_types.values()) or sum(self.gpu_types.values()) <= 0):
            raise bad("types", "weights must be >= 0, not all zero")
        if self.tenants < 1:
            raise bad("tenants", "must be >= 1")
        if not self.priorities or any(not (w >= 0) for w in self.priorities.values()) \
                or sum(self.priorities.values()) <= 0:
            raise bad("priorities", "weights must be >= 0, not all zero")


def _choice(rng: np.random.Generator, weights: Mapping[Any, float], n: int) -> tuple[npt.NDArray[np.int64], list[Any]]:
    keys = list(weights)
    w = np.asarray([float(weights[k]) for k in keys])
    return rng.choice(len(keys), size=n, p=w / w.sum()).astype(np.int64), keys


def generate_jobs(spec: SyntheticSpec) -> JobTable:
    """A synthetic :class:`JobTable` for ``spec`` (deterministic for a given seed)."""
    spec.validate()
    n = spec.jobs
    rng = np.random.default_rng(spec.seed)
    mean_gap = 3600.0 / spec.rate_per_h
    shape = 1.0 / spec.arrival_cv**2
    gaps = rng.gamma(shape, mean_gap / shape, size=n)
    submit = np.cumsum(gaps) - (gaps[0] if n else 0.0)
    if spec.duration_samples:
        samples = np.asarray(spec.duration_samples, dtype=np.float64)
        duration = samples[rng.integers(0, len(samples), size=n)]
    else:
        sigma = math.log(spec.duration_p90_s / spec.duration_p50_s) / _Z90
        duration = rng.lognormal(math.log(spec.duration_p50_s), sigma, size=n)
    duration = np.clip(np.round(duration), spec.duration_min_s, spec.duration_max_s)
    size_codes, sizes = _choice(rng, spec.gang_mix, n)
    total = np.asarray([int(s) for s in sizes], dtype=np.int64)[size_codes]
    workers, per = split_gangs(total, spec.max_gpus_per_worker)
    if spec.gpu_types:
        tcodes, tnames = _choice(rng, spec.gpu_types, n)
        gpu_type = Coded(tcodes, tuple(str(t) for t in tnames))
    else:
        gpu_type = None
    if spec.tenants > 1:
        w = 1.0 / np.arange(1, spec.tenants + 1, dtype=np.float64) ** spec.tenant_zipf
        tenant_codes = rng.choice(spec.tenants, size=n, p=w / w.sum()).astype(np.int64)
        tenant = Coded(tenant_codes, tuple(f"tenant-{k}" for k in range(spec.tenants)))
    else:
        tenant = Coded(np.zeros(n, dtype=np.int64), ("default",))
    pcodes, pkeys = _choice(rng, spec.priorities, n)
    priority = np.asarray([int(p) for p in pkeys], dtype=np.int64)[pcodes]
    width = len(str(max(n - 1, 0)))
    jobs = build_job_table(
        names=[f"syn-{i:0{width}d}" for i in range(n)],
        submit=submit,
        duration=duration,
        workers=workers,
        gpus_per_worker=per,
        gpu_type=gpu_type,
        priority=priority,
        tenant=tenant,
        source=f"synthetic(seed={spec.seed})",
        origin_epoch=None,
        sort=False,
    )
    if spec.mean_gpus is not None:
        from kant.traces.transforms import resize_gangs

        jobs = resize_gangs(jobs, spec.mean_gpus, seed=spec.seed + 1, max_gpus=spec.max_gpus,
                            max_gpus_per_worker=spec.max_gpus_per_worker)
    return jobs


_ALIASES = {"rate": "rate_per_h", "cv": "arrival_cv", "p50": "duration_p50_s", "p90": "duration_p90_s",
            "min_duration": "duration_min_s", "max_duration": "duration_max_s", "gangs": "gang_mix",
            "types": "gpu_types", "zipf": "tenant_zipf"}


def parse_synthetic(arg: str) -> SyntheticSpec:
    """``synthetic[:key=value,...]`` -> :class:`SyntheticSpec`.

    Keys: ``jobs``, ``seed``, ``rate`` (jobs/h), ``cv``, ``p50``, ``p90``, ``min_duration``,
    ``max_duration``, ``mean_gpus``, ``max_gpus``, ``max_gpus_per_worker``, ``tenants``,
    ``zipf``; maps as ``key:weight|key:weight``: ``gangs`` (``1:90|8:10``), ``types``
    (``A100:0.7|H100:0.3``), ``priorities`` (``0:3|1:1``). Unknown keys and bad values raise
    :class:`ConfigError`.
    """
    head, _, body = arg.partition(":")
    if head != "synthetic":
        raise ConfigError(arg, "", "a synthetic trace is written synthetic[:key=value,...]")
    names = {f.name for f in fields(SyntheticSpec)}
    kwargs: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        name = _ALIASES.get(key, key)
        if not sep or name not in names or name == "duration_samples":
            raise ConfigError("synthetic", key, f"unknown key; use {', '.join(sorted(set(_ALIASES) | {'jobs', 'seed', 'mean_gpus', 'max_gpus', 'max_gpus_per_worker', 'tenants'}))}")  # noqa: E501
        try:
            if name in ("gang_mix", "priorities"):
                kwargs[name] = {int(k): float(w) for k, w in (item.split(":") for item in value.split("|"))}
            elif name == "gpu_types":
                kwargs[name] = {k.strip(): float(w) for k, w in (item.rsplit(":", 1) for item in value.split("|"))}
            elif name in ("jobs", "seed", "max_gpus", "max_gpus_per_worker", "tenants"):
                kwargs[name] = int(value.replace("_", ""))
            else:
                kwargs[name] = float(value)
        except ValueError:
            raise ConfigError("synthetic", key, f"bad value {value!r}") from None
    spec = replace(SyntheticSpec(), **kwargs)
    spec.validate()
    return spec


def read_synthetic(name: str) -> JobTable:
    """The trace a name ``synthetic[:key=value,...]`` stands for (how the trace registry reads it)."""
    return generate_jobs(parse_synthetic(name))
