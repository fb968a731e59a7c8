"""Bring your own trace: a small YAML mapping turns an unknown job log, inventory or request log into
kant's schema, and the fast column machinery every reader shares.

A mapping names the file, its format, which source column feeds which schema field, the units of
times, durations, CPU and memory, the time origin and defaults (see docs/traces.md)::

    kind: jobs                      # jobs | nodes | requests | rate
    file: philly-2000.jsonl         # relative to the mapping file
    format: jsonl                   # csv | tsv | jsonl | parquet (default: from the file name)
    columns:
      name: job_id
      submit: submitted_ms
      duration: runtime_ms
      gpus: gpu_count               # total GPUs, split into workers of <= max_gpus_per_worker
      tenant: virtual_cluster
    units: {time: ms, duration: ms}
    time_origin: first              # first | zero | <date-time> | <number in the time unit>
    defaults: {gpu_type: V100}

The mapping itself is validated with pydantic: a bad key or value raises
:class:`~kant.errors.ConfigError` naming the key path (``units.time``). Data problems raise
:class:`~kant.errors.InputError` naming the data file, line, column and value, or are dropped and
counted with ``Problems(skip=True)``.

This module is the mapping file (:class:`TraceMapping`, :func:`load_mapping`);
:mod:`kant.traces.mapped` reads data with one (:func:`~kant.traces.mapped.read_with_mapping`), on
the machinery every reader shares: :mod:`kant.traces.raw` (files to raw columns) and
:mod:`kant.traces.columns` (whole columns to numbers, times and text).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kant.config.validation import KeyPathError, validate_document
from kant.config.yaml_file import read_yaml
from kant.model.cluster import DEFAULT_LEAVES_PER_SPINE, DEFAULT_NODES_PER_LEAF
from kant.traces.columns import TIME_UNITS, parse_datetime

__all__ = [
    "CPU_UNITS",
    "FIELDS",
    "MEMORY_UNITS",
    "Scalar",
    "TraceMapping",
    "Topology",
    "Units",
    "load_mapping",
]

#: MiB per unit for memory
MEMORY_UNITS: dict[str, float] = {"mib": 1.0, "gib": 1024.0, "kib": 1 / 1024, "bytes": 1 / 1048576,
                                  "mb": 1e6 / 1048576, "gb": 1e9 / 1048576}
#: milli-cores per unit for CPU
CPU_UNITS: dict[str, float] = {"milli": 1.0, "cores": 1000.0}

#: the schema fields a mapping may fill, per kind
JOB_FIELDS = ("name", "submit", "duration", "end", "start", "gpus", "workers", "gpus_per_worker", "gpu_milli",
              "gpu_fraction", "cpu", "memory", "gpu_type", "priority", "tenant", "user", "estimate", "kind",
              "depends_on", "kill_on_invalid_dep", "min_workers", "max_workers", "speedup")
NODE_FIELDS = ("name", "gpu_type", "gpus", "cpu", "memory", "leaf", "spine", "count")
REQUEST_FIELDS = ("time", "input_tokens", "output_tokens", "duration", "stream")
RATE_FIELDS = ("time", "rate", "cv", "stream")
FIELDS = {"jobs": JOB_FIELDS, "nodes": NODE_FIELDS, "requests": REQUEST_FIELDS, "rate": RATE_FIELDS}

Scalar = str | int | float | bool


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Units(_Strict):
    """Units of the source columns."""

    time: str = Field(default="s", description="submit/start/end/time: s, ms, us, ns, min, h, d, 'datetime' or a "
                                       "strptime format")
    duration: str = Field(default="s", description="duration/estimate: s, ms, us, ns, min, h, d")
    memory: str = Field(default="mib", description="memory: mib, gib, kib, bytes, mb, gb")
    cpu: str = Field(default="milli", description="cpu: milli (1/1000 core) or cores")

    @field_validator("time")
    @classmethod
    def _time(cls, v: str) -> str:
        if v in TIME_UNITS or v == "datetime" or "%" in v:
            return v
        raise ValueError(f"unknown time unit {v!r}; use one of {', '.join(TIME_UNITS)}, 'datetime' or a strptime "
                         "format such as '%Y-%m-%d %H:%M:%S'")

    @field_validator("duration")
    @classmethod
    def _duration(cls, v: str) -> str:
        if v in TIME_UNITS:
            return v
        raise ValueError(f"unknown duration unit {v!r}; use one of {', '.join(TIME_UNITS)}")

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: str) -> str:
        if v.lower() in MEMORY_UNITS:
            return v.lower()
        raise ValueError(f"unknown memory unit {v!r}; use one of {', '.join(MEMORY_UNITS)}")

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, v: str) -> str:
        if v in CPU_UNITS:
            return v
        raise ValueError(f"unknown cpu unit {v!r}; use 'milli' or 'cores'")


class Topology(_Strict):
    nodes_per_leaf: int = Field(default=DEFAULT_NODES_PER_LEAF, ge=1, le=1_000_000)
    leaves_per_spine: int = Field(default=DEFAULT_LEAVES_PER_SPINE, ge=1, le=1_000_000)


class TraceMapping(_Strict):
    """A validated mapping file (see the module docstring and docs/traces.md)."""

    kind: Literal["jobs", "nodes", "requests", "rate"] = "jobs"
    file: str = Field(min_length=1)
    format: Literal["csv", "tsv", "jsonl", "parquet"] | None = None
    delimiter: str | None = Field(default=None, min_length=1, max_length=1)
    header: bool = True
    column_names: list[str] | None = None
    columns: dict[str, str]
    units: Units = Units()
    time_origin: str | float = "first"
    epoch: bool = False
    defaults: dict[str, Scalar] = {}
    values: dict[str, dict[str, Scalar]] = {}
    max_gpus_per_worker: int = Field(default=8, ge=1, le=1024)
    window: float = Field(default=0.0, ge=0, le=1e9)
    topology: Topology = Topology()
    gpu_nodes_only: bool = True
    gpu_types: list[str] | None = None
    name: str | None = None
    description: str | None = None

    @model_validator(mode="after")
    def _fields(self) -> TraceMapping:
        allowed = FIELDS[self.kind]
        for section, keys in (("columns", self.columns), ("defaults", self.defaults), ("values", self.values)):
            for key in keys:
                if key not in allowed:
                    raise KeyPathError(f"{section}.{key}",
                                    f"unknown field {key!r} for kind {self.kind!r}; fields are {', '.join(allowed)}")
        have = set(self.columns) | set(self.defaults)
        needs: dict[str, list[tuple[str, ...]]] = {
            "jobs": [("submit",), ("duration", "end")],
            "nodes": [("gpus",), ("gpu_type",)],
            "requests": [("time",)],
            "rate": [("time",), ("rate",)],
        }
        need = needs[self.kind]
        for group in need:
            if not have & set(group):
                raise KeyPathError("columns", f"columns must map {' or '.join(repr(g) for g in group)}")
        if self.kind == "jobs" and "gpus" in have and ({"workers", "gpus_per_worker"} & have):
            raise KeyPathError("columns", "map either 'gpus' (total) or 'workers'/'gpus_per_worker', not both")
        if not self.header and not self.column_names:
            raise KeyPathError("column_names", "header: false needs column_names")
        if isinstance(self.time_origin, float | int) and not math.isfinite(self.time_origin):
            raise KeyPathError("time_origin", "must be a finite number")
        if isinstance(self.time_origin, str) and self.time_origin not in ("first", "zero"):
            try:
                parse_datetime(self.time_origin)
            except ValueError:
                raise KeyPathError("time_origin", "must be 'first', 'zero', a date-time or a number") from None
        return self


def load_mapping(path: str | Path) -> TraceMapping:
    """Read and validate a mapping YAML; errors are :class:`ConfigError` naming the key path."""
    source = str(path)
    data = read_yaml(path)
    return validate_document(TraceMapping, data, source, "expected a mapping with at least 'file' and 'columns'")
