"""Study files: the grid of a policy study, validated on load, expanded into runs.

A study file is YAML (full reference in ``docs/sweep.md``)::

    name: philly-policies
    traces:
      - philly                               # a trace name or file, as `kant simulate --trace`
      - {name: philly, label: philly-2x, limit: 5000, scale_load: 2.0}
    policies:
      - kant                                 # a bundled policy or a policy file
      - name: volcano-binpack
        set: {plugins.binpack.weight: [1, 10]}   # argument variants: each combination is one policy
    clusters: ["32x8:V100,leaf=8,spine=2", "64x8:V100,leaf=8,spine=4"]
    seeds: [0, 1, 2]
    cross_leaf_penalty: [0.0, 0.1]           # optional, like cross_spine_penalty, restart_cost,
                                             # checkpoint_interval and services (lists of values)

Every run is one point of the grid traces x policies (x variants) x clusters x services x penalties x
restart costs x checkpoint intervals x seeds. An unknown key, a value of the wrong type, a duplicate in
a list, a bad policy variant, an unknown cluster or trace raises :class:`~kant.errors.ConfigError`
naming the study file and the key path (``policies[1].set.plugins.binpack.weight``). Relative file
paths are read relative to the study file's folder.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, field_validator

from kant.config import bundled_policies, parse_policy
from kant.config.validation import validate_document  # the one converter of validation errors to key paths
from kant.config.yaml_file import read_yaml
from kant.errors import ConfigError, KantError
from kant.text import parse_window

__all__ = ["PolicyVariant", "Study", "StudyPoint", "TraceInput", "load_study", "parse_study"]


class _TraceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    label: str | None = Field(default=None, min_length=1)
    skip_invalid: bool = False
    #: transforms, applied in this order (as `kant trace convert`), then ``limit``
    window: str | None = None
    sample: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)
    scale_load: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    tenants_top: int | None = Field(default=None, ge=1)
    resize_mean: float | None = Field(default=None, ge=1, allow_inf_nan=False)
    preserve_gpu_time: bool = False
    seed: int = 0  # of sample and resize_mean
    limit: int | None = Field(default=None, ge=1)


class _PolicySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    label: str | None = Field(default=None, min_length=1)
    set: dict[str, list[Any]] = Field(default_factory=dict)


class _StudyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(default="study", min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    description: str = ""
    traces: list[_TraceSpec] = Field(min_length=1)  # a bare name is short for {name: ...}
    policies: list[_PolicySpec] = Field(min_length=1)
    clusters: list[str] = Field(min_length=1)
    services: list[str | None] = Field(default_factory=lambda: list[str | None]([None]), min_length=1)
    seeds: list[NonNegativeInt] = Field(default_factory=lambda: [0], min_length=1)  # NumPy takes no negative seed
    cross_leaf_penalty: list[float] = Field(default_factory=lambda: [0.0], min_length=1)
    cross_spine_penalty: list[float] = Field(default_factory=lambda: [0.0], min_length=1)
    restart_cost: list[float] = Field(default_factory=lambda: [0.0], min_length=1)
    checkpoint_interval: list[float | None] = Field(default_factory=lambda: list[float | None]([None]),
                                                    min_length=1)

    @field_validator("traces", "policies", mode="before")
    @classmethod
    def _names(cls, v: Any) -> Any:
        return [{"name": x} if isinstance(x, str) else x for x in v] if isinstance(v, list) else v


@dataclass(frozen=True)
class TraceInput:
    """One trace of the study: where it is read from and what is done to it before the runs."""

    label: str
    name: str  # trace name or resolved path
    skip_invalid: bool = False
    window: tuple[float | None, float | None] | None = None
    sample: float | None = None
    scale_load: float | None = None
    tenants_top: int | None = None
    resize_mean: float | None = None
    preserve_gpu_time: bool = False
    seed: int = 0
    limit: int | None = None


@dataclass(frozen=True)
class PolicyVariant:
    """One policy of the study: a label and the resolved policy mapping (``Policy.to_dict()``)."""

    label: str
    doc: dict[str, Any]


@dataclass(frozen=True)
class StudyPoint:
    """One run of the grid (before its inputs are prepared)."""

    trace: TraceInput
    policy: PolicyVariant
    cluster: str  # built-in name, spec string or resolved file path
    services: str | None  # resolved file path
    seed: int
    cross_leaf_penalty: float
    cross_spine_penalty: float
    restart_cost: float
    checkpoint_interval: float | None


#: the swept parameters other than the policy, in table order (the study file's keys)
PARAMETERS = ("trace", "cluster", "services", "cross_leaf_penalty", "cross_spine_penalty", "restart_cost",
              "checkpoint_interval", "seed")


@dataclass(frozen=True)
class Study:
    name: str
    description: str
    source: str
    traces: tuple[TraceInput, ...]
    policies: tuple[PolicyVariant, ...]
    clusters: tuple[str, ...]
    services: tuple[str | None, ...]
    seeds: tuple[int, ...]
    cross_leaf_penalty: tuple[float, ...]
    cross_spine_penalty: tuple[float, ...]
    restart_cost: tuple[float, ...]
    checkpoint_interval: tuple[float | None, ...]
    #: a cluster or services file's resolved path -> the name the study file gives it (for the results)
    written: dict[str, str] = field(default_factory=dict)

    def label(self, value: str) -> str:
        """How the study file wrote a cluster or services file (the resolved path itself otherwise)."""
        return self.written.get(value, value)

    def points(self) -> Iterator[StudyPoint]:
        """Every run of the grid, in a fixed order (trace, cluster, services, penalties, policy, seed)."""
        for trace, cluster, services, leaf, spine, restart, ckpt, policy, seed in itertools.product(
            self.traces, self.clusters, self.services, self.cross_leaf_penalty, self.cross_spine_penalty,
            self.restart_cost, self.checkpoint_interval, self.policies, self.seeds,
        ):
            yield StudyPoint(trace, policy, cluster, services, seed, leaf, spine, restart, ckpt)

    def __len__(self) -> int:
        return (len(self.traces) * len(self.policies) * len(self.clusters) * len(self.services) * len(self.seeds)
                * len(self.cross_leaf_penalty) * len(self.cross_spine_penalty) * len(self.restart_cost)
                * len(self.checkpoint_interval))

    def swept(self) -> tuple[str, ...]:
        """The parameters (of :data:`PARAMETERS`, seeds excluded) with more than one value."""
        sizes = {"trace": len(self.traces), "cluster": len(self.clusters), "services": len(self.services),
                 "cross_leaf_penalty": len(self.cross_leaf_penalty),
                 "cross_spine_penalty": len(self.cross_spine_penalty), "restart_cost": len(self.restart_cost),
                 "checkpoint_interval": len(self.checkpoint_interval)}
        return tuple(p for p in PARAMETERS if sizes.get(p, 0) > 1)


def _local(base: Path, name: str) -> str:
    """``name`` as a path relative to the study file's folder when such a file exists, else unchanged
    (a trace, cluster or policy name, or an absolute path)."""
    p = Path(name)
    if not p.is_absolute() and (base / p).exists():
        return str(base / p)
    return name


def _check_unique(source: str, key: str, values: list[Any]) -> None:
    seen: dict[Any, int] = {}
    for i, v in enumerate(values):
        if v in seen:
            raise ConfigError(source, f"{key}[{i}]", f"{v!r} is already listed at {key}[{seen[v]}]")
        seen[v] = i


def _check_numbers(source: str, key: str, values: list[float | None], *, positive: bool = False) -> None:
    for i, v in enumerate(values):
        if v is None:
            continue
        if v != v or v in (float("inf"), float("-inf")):
            raise ConfigError(source, f"{key}[{i}]", "must be a finite number")
        if v < 0 or (positive and v == 0):
            raise ConfigError(source, f"{key}[{i}]", "must be > 0" if positive else "must be >= 0")


def _window(source: str, key: str, text: str) -> tuple[float | None, float | None]:
    try:
        return parse_window(text)
    except ValueError:
        raise ConfigError(source, key, f"expected START:END with times like 0, 90s, 15m, 6h, 2d; got {text!r}") \
            from None


def _policy_base(source: str, key: str, name: str) -> tuple[str, dict[str, Any]]:
    """The default label and the resolved mapping of a bundled policy name or a policy file."""
    from kant.config import load_policy

    try:
        policy = load_policy(name)
    except ConfigError as exc:
        raise ConfigError(source, key, str(exc)) from None
    label = name if name in bundled_policies() and not Path(name).exists() else Path(name).stem
    return label, policy.to_dict()


def _apply(source: str, key: str, doc: dict[str, Any], path: str, value: Any) -> None:
    """Set ``path`` (``plugins.<name>.args.<arg>``, ``plugins.<name>.weight``, ``actions.<name>.args.<arg>``)
    in a resolved policy mapping."""
    parts = path.split(".")
    shapes = {("plugins", "args"): len(parts) >= 4, ("plugins", "weight"): len(parts) == 3,
              ("actions", "args"): len(parts) >= 4}
    if len(parts) < 3 or not shapes.get((parts[0], parts[2]), False):
        raise ConfigError(source, key, "expected plugins.<plugin>.args.<arg>, plugins.<plugin>.weight or "
                          "actions.<action>.args.<arg>")
    section, name, rest = parts[0], parts[1], parts[2:]
    entries = [e for e in doc[section] if e["name"] == name]
    if not entries:
        have = ", ".join(e["name"] for e in doc[section]) or "none"
        raise ConfigError(source, key, f"the policy has no {section[:-1]} {name!r} (it has: {have})")
    cur: dict[str, Any] = entries[0]
    for part in rest[:-1]:
        nxt = cur.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError(source, key, f"{part!r} is not a mapping in the policy")
        cur = nxt
    cur[rest[-1]] = value


def _fmt(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _policies(source: str, base: Path, specs: list[_PolicySpec]) -> list[PolicyVariant]:
    out: list[PolicyVariant] = []
    for i, spec in enumerate(specs):
        where = f"policies[{i}]"
        label, doc = _policy_base(source, f"{where}.name", _local(base, spec.name))
        label = spec.label or label
        keys = list(spec.set)
        for k in keys:
            if not spec.set[k]:
                raise ConfigError(source, f"{where}.set.{k}", "needs at least one value")
            _check_unique(source, f"{where}.set.{k}", spec.set[k])
        for combo in itertools.product(*(spec.set[k] for k in keys)):
            variant = copy.deepcopy(doc)
            for k, v in zip(keys, combo, strict=True):
                _apply(source, f"{where}.set.{k}", variant, k, v)
            settings = ",".join(f"{k}={_fmt(v)}" for k, v in zip(keys, combo, strict=True))
            name = f"{label}[{settings}]" if keys else label
            try:
                policy = parse_policy(variant, name)
            except ConfigError as exc:
                sub = f"{where}.set" + (f".{keys[0]}" if len(keys) == 1 else "")
                raise ConfigError(source, sub, f"{name}: {exc.path + ': ' if exc.path else ''}{exc.reason}") \
                    from None
            out.append(PolicyVariant(name, policy.to_dict()))
    _check_unique(source, "policies", [p.label for p in out])
    return out


def _traces(source: str, base: Path, specs: list[_TraceSpec]) -> list[TraceInput]:
    out: list[TraceInput] = []
    for i, spec in enumerate(specs):
        window = None if spec.window is None else _window(source, f"traces[{i}].window", spec.window)
        out.append(TraceInput(
            label=spec.label or spec.name, name=_local(base, spec.name), skip_invalid=spec.skip_invalid,
            window=window, sample=spec.sample, scale_load=spec.scale_load, tenants_top=spec.tenants_top,
            resize_mean=spec.resize_mean, preserve_gpu_time=spec.preserve_gpu_time, seed=spec.seed, limit=spec.limit,
        ))
    _check_unique(source, "traces", [t.label for t in out])
    return out


def _clusters(source: str, base: Path, names: list[str]) -> list[str]:
    from kant.traces.registry import load_nodes

    out = [_local(base, n) for n in names]
    for i, arg in enumerate(out):
        try:
            load_nodes(arg)
        except KantError as exc:
            raise ConfigError(source, f"clusters[{i}]", str(exc)) from None
    return out


def parse_study(data: Any, source: str = "<study>", base: Path | None = None) -> Study:
    """Validate an already-parsed study document (file paths relative to ``base``)."""
    doc = validate_document(_StudyFile, data, source,
                            "a study file must be a mapping with traces, policies and clusters")
    root = base if base is not None else Path(".")
    for key in ("clusters", "services", "seeds", "cross_leaf_penalty", "cross_spine_penalty", "restart_cost",
                "checkpoint_interval"):
        _check_unique(source, key, list(getattr(doc, key)))
    for key in ("cross_leaf_penalty", "cross_spine_penalty", "restart_cost"):
        _check_numbers(source, key, list(getattr(doc, key)))
    _check_numbers(source, "checkpoint_interval", list(doc.checkpoint_interval), positive=True)
    services: list[str | None] = []
    for i, s in enumerate(doc.services):
        if s is None:
            services.append(None)
            continue
        path = _local(root, s)
        from kant.inference.services import load_services

        try:
            load_services(path)
        except ConfigError as exc:
            raise ConfigError(source, f"services[{i}]", str(exc)) from None
        services.append(path)
    return Study(
        name=doc.name,
        description=doc.description,
        source=source,
        traces=tuple(_traces(source, root, doc.traces)),
        policies=tuple(_policies(source, root, doc.policies)),
        clusters=tuple(_clusters(source, root, doc.clusters)),
        services=tuple(services),
        seeds=tuple(doc.seeds),
        cross_leaf_penalty=tuple(doc.cross_leaf_penalty),
        cross_spine_penalty=tuple(doc.cross_spine_penalty),
        restart_cost=tuple(doc.restart_cost),
        checkpoint_interval=tuple(doc.checkpoint_interval),
        written={_local(root, name): name for name in [*doc.clusters, *(s for s in doc.services if s is not None)]},
    )


def load_study(path: str | Path) -> Study:
    """Read and validate a study file."""
    p = Path(path)
    return parse_study(read_yaml(p), str(p), p.parent)
