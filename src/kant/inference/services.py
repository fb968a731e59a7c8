"""The services file: inference services, their traffic and their autoscaler, validated on load.

A services file is YAML::

    horizon_s: null              # traffic until this simulation time (default: the last training arrival)
    seed: 0                      # seeds traffic stretching (service i uses seed + i unless it sets its own)
    autoscaler:                  # defaults for every service (Kubernetes HPA semantics, see kant.inference.autoscaler)
      period_s: 60
      target_utilization: 0.7
    services:
      - name: chat
        gpus_per_replica: 8
        min_replicas: 1
        max_replicas: 10
        capacity_rps: 10         # or capacity_tps (tokens/s per replica) with token_field / tokens_per_request
        concurrency: 32          # requests one replica serves at once (batch slots)
        slo_ms: 2000
        slo_metric: wait         # response (queueing + service) or wait (queueing delay only)
        startup_delay_s: 120     # from placement to ready
        priority: 100
        traffic:
          trace: servegen:language-m-large    # a load trace name or file (see `kant trace list`)
          streams: null                       # only these stream names (clients, models); null = all
          bin_s: 60
          repeat: shuffle                     # none | tile | shuffle
          scale: 0.1                          # or mean_rps: 20
          diurnal_amplitude: 0.0
          peak_hour: 14
          weekend_factor: 1.0
          noise: 0.0
        autoscaler: {target_utilization: 0.6}  # per-service overrides of the defaults
        # live only (kant serve --services; kant simulate ignores them):
        command: python -m kant.model_server       # what each replica runs; it listens on $PORT
        port: 0                  # 0: kant picks a free port per replica; else the port it must listen on
        ready_path: /health      # a replica serves once this path answers 2xx
        ready_timeout_s: 30      # seconds a new replica has to become ready

Everything is checked on load: an unknown key, a value of the wrong type or out of range raises
:class:`~kant.errors.ConfigError` naming the file and the key path (``services[1].capacity_rps``).
What needs the cluster is checked by :meth:`ServicesConfig.check_cluster`: a replica larger than
every node (of its GPU type), an unknown GPU type, a service whose ``max_replicas`` cannot fit the
cluster, or services that together cannot reach their maximum.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from kant.config.validation import validate, validate_document
from kant.config.yaml_file import read_yaml
from kant.errors import ConfigError
from kant.inference.autoscaler import HpaConfig
from kant.inference.traffic import StretchSpec
from kant.model.cluster import Cluster

__all__ = ["ServiceSpec", "ServicesConfig", "TrafficSpec", "load_services", "parse_services"]


class TrafficSpec(BaseModel):
    """Where a service's traffic comes from and how it is stretched (see :mod:`kant.inference.traffic`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    trace: str = Field(min_length=1)
    streams: tuple[str, ...] | None = None
    bin_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    repeat: Literal["none", "tile", "shuffle"] = "shuffle"
    scale: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    mean_rps: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    diurnal_amplitude: float = Field(default=0.0, ge=0, lt=1)
    peak_hour: float = Field(default=14.0, ge=0, lt=24)
    weekend_factor: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    noise: float = Field(default=0.0, ge=0, le=3)
    seed: int | None = None

    @model_validator(mode="after")
    def _one_level(self) -> TrafficSpec:
        if self.scale is not None and self.mean_rps is not None:
            raise ValueError("give scale or mean_rps, not both")
        return self

    def stretch_spec(self, seed: int) -> StretchSpec:
        return StretchSpec(
            repeat=self.repeat,
            scale=1.0 if self.scale is None else self.scale,
            mean_rps=self.mean_rps,
            diurnal_amplitude=self.diurnal_amplitude,
            peak_hour=self.peak_hour,
            weekend_factor=self.weekend_factor,
            noise=self.noise,
            seed=seed if self.seed is None else self.seed,
        )


class ServiceSpec(BaseModel):
    """One inference service (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1)
    gpus_per_replica: int = Field(ge=1)
    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(ge=1)
    capacity_rps: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    capacity_tps: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    token_field: Literal["input", "output", "total"] = "output"
    tokens_per_request: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    concurrency: int = Field(default=1, ge=1, le=4096)
    slo_ms: float = Field(gt=0, allow_inf_nan=False)
    slo_metric: Literal["response", "wait"] = "response"
    startup_delay_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    priority: int = 100
    gpu_type: str | None = None
    tenant: str = Field(default="inference", min_length=1)
    start_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    traffic: TrafficSpec
    autoscaler: dict[str, Any] = Field(default_factory=dict)
    # the live service's (kant serve --services): what a replica runs and how kant knows it serves
    command: str | None = Field(default=None, min_length=1)
    port: int = Field(default=0, ge=0, le=65535)
    ready_path: str = Field(default="/health", pattern=r"^/[\x21-\x7e]*$", max_length=256)
    ready_timeout_s: float = Field(default=30.0, gt=0, le=3600, allow_inf_nan=False)

    @model_validator(mode="after")
    def _check(self) -> ServiceSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) is above max_replicas ({self.max_replicas})")
        if (self.capacity_rps is None) == (self.capacity_tps is None):
            raise ValueError("give exactly one of capacity_rps (requests/s per replica) and capacity_tps "
                             "(tokens/s per replica)")
        if self.tokens_per_request is not None and self.capacity_tps is None:
            raise ValueError("tokens_per_request only applies with capacity_tps")
        return self


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    horizon_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    seed: int = 0
    autoscaler: dict[str, Any] = Field(default_factory=dict)
    services: list[ServiceSpec] = Field(min_length=1)


class ServicesConfig:
    """A validated services file: the services, each with its effective autoscaler settings."""

    def __init__(self, services: list[ServiceSpec], autoscalers: list[HpaConfig], *, horizon_s: float | None,
                 seed: int, source: str) -> None:
        self.services = services
        self.autoscalers = autoscalers
        self.horizon_s = horizon_s
        self.seed = seed
        self.source = source

    def __len__(self) -> int:
        return len(self.services)

    def check_cluster(self, cluster: Cluster) -> None:
        """Reject services this cluster can never serve, with the reason and the key path."""
        total_need = 0
        for i, s in enumerate(self.services):
            where = f"services[{i}]"
            if s.gpu_type is not None:
                codes = [cluster.gpu_type_code(t.strip()) for t in s.gpu_type.split("|")]
                if all(c < 0 for c in codes):
                    raise ConfigError(self.source, f"{where}.gpu_type",
                                      f"no node has GPU type {s.gpu_type}; the cluster has "
                                      f"{', '.join(cluster.gpu_type_names) or 'none'}")
                ok = np.isin(cluster.gpu_type, [c for c in codes if c >= 0])
                type_txt = f" of type {s.gpu_type}"
            else:
                ok = np.ones(cluster.n_nodes, dtype=bool)
                type_txt = ""
            gpus = cluster.gpus[ok]
            largest = int(gpus.max()) if gpus.size else 0
            if s.gpus_per_replica > largest:
                raise ConfigError(self.source, f"{where}.gpus_per_replica",
                                  f"{s.gpus_per_replica} GPUs per replica, but the largest node{type_txt} has "
                                  f"{largest}")
            slots = int((gpus // s.gpus_per_replica).sum())
            if s.max_replicas > slots:
                raise ConfigError(self.source, f"{where}.max_replicas",
                                  f"{s.max_replicas} replicas of {s.gpus_per_replica} GPUs, but the whole "
                                  f"cluster{type_txt} has room for {slots}")
            total_need += s.max_replicas * s.gpus_per_replica
        if total_need > cluster.total_gpus:
            raise ConfigError(self.source, "services",
                              f"the services need {total_need} GPUs at max_replicas together, but the cluster "
                              f"has {cluster.total_gpus}")


def parse_services(data: Any, source: str = "<services>") -> ServicesConfig:
    """Validate an already-parsed YAML document (see the module docstring)."""
    doc = validate_document(_File, data, source, "a services file must be a mapping with a services list")
    validate(HpaConfig, doc.autoscaler, source, "autoscaler")
    names: dict[str, int] = {}
    autoscalers: list[HpaConfig] = []
    for i, s in enumerate(doc.services):
        if s.name in names:
            raise ConfigError(source, f"services[{i}].name",
                              f"service {s.name!r} already defined at services[{names[s.name]}]")
        names[s.name] = i
        autoscalers.append(validate(HpaConfig, {**doc.autoscaler, **s.autoscaler}, source, f"services[{i}].autoscaler"))
        if not math.isfinite(s.slo_ms):  # pragma: no cover - pydantic rejects it
            raise ConfigError(source, f"services[{i}].slo_ms", "must be finite")
    return ServicesConfig(list(doc.services), autoscalers, horizon_s=doc.horizon_s, seed=doc.seed, source=source)


def load_services(path: str | Path) -> ServicesConfig:
    """Read and validate a services YAML file."""
    return parse_services(read_yaml(path), str(path))
