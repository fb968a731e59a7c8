"""Reading data with a mapping file (:mod:`kant.traces.mapping`): :func:`read_with_mapping` loads the
job log, inventory or request log a mapping YAML describes, as a :class:`~kant.model.job.JobTable`,
a :class:`~kant.model.cluster.Cluster` or a :class:`~kant.traces.load.LoadSeries`.

Each schema field comes from its mapped column (through a value map, if any), else from the
mapping's default, else from the schema's default; bad rows are flagged per column in a
:class:`~kant.traces.schema.RowCheck` and reported by line (or dropped and counted with
``Problems(skip=True)``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from kant.errors import ConfigError, InputError
from kant.model.cluster import MAX_GPUS_PER_NODE, MAX_NODES, Cluster, NodeSpec
from kant.model.deps import JobDeps, find_cycle, format_dependency, parse_dependency
from kant.model.elastic import ElasticSpec, check_row
from kant.model.job import FULL_GPU_MILLI, JobKind, JobTable
from kant.traces._csv import Problems, split_gangs
from kant.traces.columns import (
    MAX_EXACT_INT,
    TIME_UNITS,
    float_column,
    int_column,
    parse_datetime,
    text_column,
    time_column,
)
from kant.traces.load import LoadSeries
from kant.traces.mapping import CPU_UNITS, MEMORY_UNITS, Scalar, TraceMapping, load_mapping
from kant.traces.raw import RawTable, read_raw
from kant.traces.schema import RowCheck, build_job_table, build_load_series, gpu_type_alternatives

__all__ = ["read_mapped", "read_with_mapping"]

_BOOL_WORDS = frozenset({"", "0", "1", "true", "false", "yes", "no"})

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

def read_with_mapping(path: str | Path, *, problems: Problems | None = None) -> JobTable | Cluster | LoadSeries:
    """Load the data a mapping YAML describes (its ``file`` is relative to the YAML)."""
    p = Path(path)
    return read_mapped(load_mapping(p), base_dir=p.parent, problems=problems, mapping_source=str(p))


def read_mapped(
    mapping: TraceMapping,
    *,
    base_dir: str | Path = ".",
    problems: Problems | None = None,
    mapping_source: str = "mapping",
) -> JobTable | Cluster | LoadSeries:
    """Apply a validated mapping: a :class:`JobTable`, :class:`Cluster` or :class:`LoadSeries`."""
    data_path = Path(mapping.file)
    if not data_path.is_absolute():
        data_path = Path(base_dir) / data_path
    header: bool | list[str] = True if mapping.header else list(mapping.column_names or [])
    raw = read_raw(data_path, format=mapping.format, delimiter=mapping.delimiter, header=header)
    why = {col: f"columns.{fld}" for fld, col in mapping.columns.items()}
    raw.require(list(mapping.columns.values()), why)
    ctx = _Mapped(mapping, raw, raw.check(problems), mapping_source)
    if mapping.kind == "jobs":
        return ctx.jobs()
    if mapping.kind == "nodes":
        return ctx.nodes()
    return ctx.load()


_KIND_WORDS = {"training": JobKind.TRAINING, "train": JobKind.TRAINING, "inference": JobKind.INFERENCE,
               "serving": JobKind.INFERENCE, "service": JobKind.INFERENCE}


class _Mapped:
    """One application of a mapping to a raw table: each schema field's values, then the table."""

    def __init__(self, m: TraceMapping, raw: RawTable, check: RowCheck, mapping_source: str) -> None:
        self.m = m
        self.raw = raw
        self.check = check
        self.n = len(raw)
        self.mapping_source = mapping_source

    # -- helpers ----------------------------------------------------------------------------------
    def has(self, fld: str) -> bool:
        return fld in self.m.columns

    def default(self, fld: str) -> Scalar | None:
        return self.m.defaults.get(fld)

    def _bad_default(self, fld: str, why: str) -> ConfigError:
        return ConfigError(self.mapping_source, f"defaults.{fld}", why)

    def number(self, fld: str, *, scale: float = 1.0, minimum: float | None = None, integer: bool = False,
               fallback: float | None = None, allow_inf: bool = False, round_scaled: bool = False) -> FloatArray:
        """A numeric field: mapped column (with value map), else default, else ``fallback``.

        Defaults and value maps are in the source unit (scaled like the column). An integer field
        whose default or mapped value is not a whole number in range is an error too.
        """
        d = self.default(fld)
        if d is not None and (isinstance(d, bool) or not isinstance(d, int | float)) and fld not in self.m.values:
            raise self._bad_default(fld, f"expected a number, got {d!r}")
        col = self.m.columns.get(fld)
        if col is None:
            if d is None:
                if fallback is None:
                    raise ConfigError(self.mapping_source, f"columns.{fld}", "required")
                return np.full(self.n, fallback, dtype=np.float64)
            value = self._mapped_scalar(fld, d) * scale
            if math.isnan(value) or (math.isinf(value) and not allow_inf):
                raise self._bad_default(fld, f"must be a finite number, got {d!r}")
            if integer and not (math.isfinite(value) and value == math.floor(value) and abs(value) <= MAX_EXACT_INT):
                raise self._bad_default(fld, f"must be a whole number, got {d!r}")
            if minimum is not None and value < minimum:
                raise self._bad_default(fld, f"must be >= {minimum:g}, got {d!r}")
            return np.full(self.n, value, dtype=np.float64)
        if fld in self.m.values:
            out = np.asarray(self._value_map(fld, col, numeric=True), dtype=np.float64) * scale
            with np.errstate(invalid="ignore"):
                bad = np.isnan(out) | (np.isinf(out) & (not allow_inf))
                if integer:
                    bad |= ~np.isfinite(out) | (out != np.floor(out)) | (np.abs(out) > MAX_EXACT_INT)
                if minimum is not None:
                    bad |= out < minimum
            self.check.flag(bad, col, f"the value from values.{fld} is out of range", self.raw.columns[col])
            return np.where(bad, 0.0, out)
        dflt = None if d is None else float(d) * scale
        if dflt is not None and integer and not (math.isfinite(dflt) and abs(dflt) <= MAX_EXACT_INT):
            raise self._bad_default(fld, f"must be a whole number, got {d!r}")
        if integer:
            return int_column(self.raw, self.check, col, scale=scale, default=None if dflt is None else round(dflt),
                              minimum=None if minimum is None else int(minimum),
                              round_scaled=round_scaled).astype(np.float64)
        return float_column(self.raw, self.check, col, scale=scale, default=dflt, minimum=minimum,
                            allow_inf=allow_inf)

    def _too_big(self, values: FloatArray, fld: str) -> None:
        with np.errstate(invalid="ignore"):
            big = values > MAX_EXACT_INT
        self.check.flag(big, self.m.columns.get(fld, fld), "number too large", pa.array(values))

    def _mapped_scalar(self, fld: str, d: Scalar) -> float:
        table = self.m.values.get(fld)
        if table is not None and str(d) in table:
            d = table[str(d)]
        try:
            return float(d)
        except (TypeError, ValueError):
            raise self._bad_default(fld, f"expected a number, got {d!r}") from None

    def _value_map(self, fld: str, col: str, *, numeric: bool) -> Any:
        table = self.m.values[fld]
        texts = text_column(self.raw, col)
        d = self.default(fld)
        out: list[Any] = []
        bad = np.zeros(self.n, dtype=bool)
        for i, t in enumerate(texts):
            if t in table:
                v: Any = table[t]
            elif t == "" and d is not None:
                v = table.get(str(d), d)
            else:
                bad[i] = True
                out.append(math.nan if numeric else "")
                continue
            if numeric:
                try:
                    v = float(v)
                except (TypeError, ValueError):
                    raise ConfigError(self.mapping_source, f"values.{fld}.{t}", f"expected a number, got {v!r}") \
                        from None
            out.append(v if numeric else str(v))
        choices = ", ".join(map(repr, list(table)[:8]))
        self.check.flag(bad, col, f"value not in values.{fld} ({choices})", self.raw.columns[col])
        return np.asarray(out, dtype=np.float64) if numeric else out

    def text(self, fld: str, fallback: str) -> list[str]:
        d = self.default(fld)
        if not self.has(fld):
            value = str(d) if d is not None else fallback
            if fld in self.m.values:
                value = str(self.m.values[fld].get(value, value))
            return [value] * self.n
        col = self.m.columns[fld]
        if fld in self.m.values:
            return list(self._value_map(fld, col, numeric=False))
        vals = text_column(self.raw, col)
        if d is not None:
            vals = [v or str(d) for v in vals]
        return vals

    def times(self, fld: str) -> FloatArray:
        u = self.m.units.time
        d = self.default(fld)
        if not self.has(fld):
            if d is None:
                raise ConfigError(self.mapping_source, f"columns.{fld}", "required")
            if isinstance(d, bool) or not isinstance(d, int | float) or not math.isfinite(d):
                raise self._bad_default(fld, f"expected a finite number, got {d!r}")
            return np.full(self.n, float(d) * TIME_UNITS.get(u, 1.0))
        if d is not None and not isinstance(d, bool) and isinstance(d, int | float) and not math.isfinite(d):
            raise self._bad_default(fld, f"expected a finite number, got {d!r}")
        return time_column(self.raw, self.check, self.m.columns[fld], unit=u,
                           default=None if d is None or isinstance(d, str) else float(d) * TIME_UNITS.get(u, 1.0))

    def absolute(self) -> bool:
        return self.m.units.time not in TIME_UNITS or self.m.epoch

    def origin(self, t: FloatArray, keep: BoolArray) -> tuple[float, float | None]:
        """(shift to subtract, origin_epoch)."""
        o = self.m.time_origin
        if o == "zero":
            return 0.0, (0.0 if self.absolute() else None)
        if o == "first":
            valid = t[keep & np.isfinite(t)]
            shift = float(valid.min()) if valid.size else 0.0
            return shift, (shift if self.absolute() else None)
        if isinstance(o, str):
            shift = parse_datetime(o)
            if not self.absolute():
                raise ConfigError(self.mapping_source, "time_origin",
                                  "a date-time origin needs date-time times (units.time: datetime) or epoch: true")
            return shift, shift
        shift = float(o) * TIME_UNITS.get(self.m.units.time, 1.0)
        return shift, (shift if self.absolute() else None)

    def names(self, keep: BoolArray) -> list[str]:
        stem = Path(self.raw.source).name.split(".")[0]
        if self.has("name"):
            vals = self.text("name", "")
            empty = np.array([not v for v in vals], dtype=bool)
            self.check.flag(empty, self.m.columns["name"], "empty name", self.raw.columns[self.m.columns["name"]])
            return vals
        return [f"{stem}-{ln}" for ln in self.raw.lines.tolist()]

    # -- kinds ------------------------------------------------------------------------------------
    def jobs(self) -> JobTable:
        m = self.m
        dur_scale = TIME_UNITS[m.units.duration]
        submit = self.times("submit")
        if self.has("duration") or self.default("duration") is not None:
            duration = self.number("duration", scale=dur_scale, allow_inf=True)
            dcol = m.columns.get("duration", "duration")
        else:
            end = self.times("end")
            begin = self.times("start") if (self.has("start") or self.default("start") is not None) else submit
            duration = end - begin
            dcol = m.columns.get("end", "end")
        with np.errstate(invalid="ignore"):
            neg = duration < 0
        self.check.flag(neg, dcol, "negative duration",
                        self.raw.columns.get(dcol, pa.array(duration)))
        self.check.flag(np.isnan(duration) & ~self.check.bad, dcol, "duration is not a number",
                        pa.array(duration))
        workers, per, milli = self._gpu_request()
        cpu = self.number("cpu", scale=CPU_UNITS[m.units.cpu], minimum=0, fallback=0.0)
        mem = self.number("memory", scale=MEMORY_UNITS[m.units.memory], minimum=0, fallback=0.0)
        self._too_big(cpu, "cpu")
        self._too_big(mem, "memory")
        priority = self.number("priority", integer=True, fallback=0.0)
        estimate = self.number("estimate", scale=dur_scale, minimum=0, fallback=math.nan) \
            if (self.has("estimate") or self.default("estimate") is not None) else np.full(self.n, math.nan)
        tenants = self.text("tenant", "default")
        users = self.text("user", "") if (self.has("user") or self.default("user") is not None) else None
        gpu_types = self.text("gpu_type", "")
        self._check_gpu_types(gpu_types)
        kinds = self.text("kind", "training")
        kind_codes = np.array([int(_KIND_WORDS.get(k.lower(), -1)) for k in kinds], dtype=np.int64)
        self.check.flag(kind_codes < 0, m.columns.get("kind", "kind"), "kind must be training or inference",
                        kinds)
        names = self.names(np.ones(self.n, dtype=bool))
        self._duplicate_names(names)
        dep_texts, kill = self._dependencies(names) if self.has("depends_on") else (None, None)
        bounds = (self._elastic(workers, milli)
                  if any(self.has(f) for f in ("min_workers", "max_workers", "speedup")) else None)
        keep = self.check.finish()
        shift, origin_epoch = self.origin(submit, keep)
        rows = np.flatnonzero(keep)
        if not rows.size:
            raise InputError(self.raw.source, "no valid job rows")
        cpu_i = np.where(np.isfinite(cpu) & (cpu <= MAX_EXACT_INT), np.round(cpu), 0).astype(np.int64)
        mem_i = np.where(np.isfinite(mem) & (mem <= MAX_EXACT_INT), np.round(mem), 0).astype(np.int64)
        users_arr = None if users is None else np.asarray(users, dtype=object)[rows]
        if users_arr is not None:
            tenants_arr = np.asarray(tenants, dtype=object)[rows]
            users_arr = np.where(users_arr == "", tenants_arr, users_arr)
        return build_job_table(
            names=[names[i] for i in rows.tolist()],
            submit=submit[rows] - shift,
            duration=duration[rows],
            workers=workers[rows],
            gpus_per_worker=per[rows],
            gpu_milli=np.where(per[rows] == 0, np.minimum(milli[rows], FULL_GPU_MILLI), milli[rows]),
            cpu_milli=cpu_i[rows],
            memory_mib=mem_i[rows],
            gpu_type=np.asarray(gpu_types, dtype=object)[rows],
            priority=priority[rows].astype(np.int64),
            tenant=np.asarray(tenants, dtype=object)[rows],
            user=users_arr,
            estimate=estimate[rows],
            kind=kind_codes[rows],
            source=self.raw.source,
            origin_epoch=origin_epoch,
            deps=None if dep_texts is None or kill is None
            else JobDeps.of([dep_texts[i] for i in rows.tolist()], kill[rows]),
            elastic=None if bounds is None
            else ElasticSpec.of(workers[rows], [bounds[0][i] for i in rows.tolist()],
                                [bounds[1][i] for i in rows.tolist()], [bounds[2][i] for i in rows.tolist()]),
        )

    def _elastic(self, workers: npt.NDArray[np.int64], milli: npt.NDArray[np.int64]) -> tuple[
            list[int | None], list[int | None], list[tuple[tuple[int, float], ...] | None]]:
        """Each row's elastic bounds and speed-up table (None: not given); a row whose bounds are
        invalid (:func:`kant.model.elastic.check_row`) or whose table does not parse is flagged,
        under the column the reason names."""
        def bound(fld: str) -> list[int | None]:  # an empty cell: none (a rigid job)
            out: list[int | None] = [None] * self.n
            if not (self.has(fld) or self.default(fld) is not None):
                return out
            bad = np.zeros(self.n, dtype=bool)
            for i, t in enumerate(self.text(fld, "")):
                t = t.strip()
                if t:
                    try:
                        out[i] = int(t)
                    except ValueError:
                        bad[i] = True
            col = self.m.columns.get(fld, fld)
            self.check.flag(bad, col, "expected a whole number", self.raw.columns.get(col, pa.array([None] * self.n)))
            return out

        lo, hi = bound("min_workers"), bound("max_workers")
        texts = self.text("speedup", "") if self.has("speedup") else [""] * self.n
        tables: list[tuple[tuple[int, float], ...] | None] = [None] * self.n
        reasons: dict[tuple[str, str], npt.NDArray[np.bool_]] = {}
        for i in range(self.n):
            if self.check.bad[i]:
                continue
            lo[i], hi[i], tables[i], why = check_row(int(workers[i]), lo[i], hi[i], int(milli[i]), texts[i])
            if why is not None:
                fld, _, text = why.partition(": ")
                key = (fld if fld in ("min_workers", "max_workers", "speedup") else "min_workers", text)
                reasons.setdefault(key, np.zeros(self.n, dtype=bool))[i] = True
        for (fld, text), mask in reasons.items():
            col = self.m.columns.get(fld, fld)
            self.check.flag(mask, col, text, self.raw.columns.get(col, pa.array([None] * self.n)))
        return lo, hi, tables

    def _dependencies(self, names: list[str]) -> tuple[list[str], BoolArray]:
        """Each row's dependency (canonical text) and kill_on_invalid_dep flag; a row with bad syntax, one
        that names a job not in the file (or a dropped row), itself, or closes a cycle is flagged."""
        col = self.m.columns["depends_on"]
        texts = self.text("depends_on", "")
        values = self.raw.columns[col]
        out = [""] * self.n
        refs: dict[int, list[str]] = {}
        syntax = np.zeros(self.n, dtype=bool)
        for i, text in enumerate(texts):
            try:
                clauses = parse_dependency(text)
            except ValueError as exc:
                one = np.zeros(self.n, dtype=bool)
                one[i] = True
                self.check.flag(one, col, f"bad dependency: {exc}", values)
                syntax[i] = True
                continue
            if clauses:
                out[i] = format_dependency(clauses)
                refs[i] = [ident for c in clauses for ident in c.jobs]
        if self.has("kill_on_invalid_dep"):
            kcol = self.m.columns["kill_on_invalid_dep"]
            words = [w.lower() for w in self.text("kill_on_invalid_dep", "")]
            kill = np.array([w in ("1", "true", "yes") for w in words], dtype=bool)
            self.check.flag(np.array([w not in _BOOL_WORDS for w in words], dtype=bool), kcol,
                            "expected true or false", self.raw.columns[kcol])
        else:
            kill = np.zeros(self.n, dtype=bool)
        # references: to a row that is good (a row dropped for its own error drops its dependents too)
        while True:
            good = {names[i]: i for i in np.flatnonzero(~self.check.bad).tolist()}
            bad = np.zeros(self.n, dtype=bool)
            msgs: dict[int, str] = {}
            for i, ids in refs.items():
                if self.check.bad[i]:
                    continue
                for ident in ids:
                    if ident == names[i]:
                        msgs[i] = "depends on itself"
                    elif ident not in good:
                        msgs[i] = f"depends on unknown job {ident!r}"
                    else:
                        continue
                    bad[i] = True
                    break
            if not bad.any():
                break
            for i, msg in msgs.items():
                one = np.zeros(self.n, dtype=bool)
                one[i] = True
                self.check.flag(one, col, msg, values)
        edges = {i: [good[x] for x in ids] for i, ids in refs.items() if not self.check.bad[i]}
        cycle = find_cycle(edges)
        if cycle is not None:
            first = min(cycle[:-1], key=lambda r: int(self.raw.lines[r]))
            one = np.zeros(self.n, dtype=bool)
            one[first] = True
            self.check.flag(one, col, "dependency cycle " + " -> ".join(names[r] for r in cycle), values)
            if self.check.problems.skip:  # drop every row of the cycle (and, next round, their dependents)
                return self._dependencies(names)
        return out, kill

    def _gpu_request(self) -> tuple[IntArray, IntArray, IntArray]:
        """Each job's (workers, GPUs per worker, milli-GPU per worker): from a total GPU count (split
        into gangs of at most ``max_gpus_per_worker``) or from workers and GPUs per worker; a share
        from ``gpu_fraction`` or ``gpu_milli``. Bad combinations are flagged."""
        m = self.m
        if self.has("gpus") or self.default("gpus") is not None:
            total = self.number("gpus", integer=True, minimum=0).astype(np.int64)
            workers, per = split_gangs(total, m.max_gpus_per_worker)
            gcol = m.columns.get("gpus", "gpus")
        else:
            workers = self.number("workers", integer=True, minimum=1, fallback=1).astype(np.int64)
            per = self.number("gpus_per_worker", integer=True, minimum=0, fallback=1).astype(np.int64)
            gcol = m.columns.get("gpus_per_worker", "gpus_per_worker")
        if self.has("gpu_fraction") or self.default("gpu_fraction") is not None:
            frac = self.number("gpu_fraction", minimum=0)
            with np.errstate(invalid="ignore"):
                over = frac > 1
            self.check.flag(over, m.columns.get("gpu_fraction", "gpu_fraction"), "a GPU fraction must be <= 1",
                            pa.array(frac))
            milli = np.where(np.isfinite(frac) & (frac <= 1), np.round(frac * FULL_GPU_MILLI), 0).astype(np.int64)
            mcol = m.columns.get("gpu_fraction", "gpu_fraction")
        else:
            milli = self.number("gpu_milli", integer=True, minimum=0, fallback=FULL_GPU_MILLI).astype(np.int64)
            self.check.flag(milli > FULL_GPU_MILLI, m.columns.get("gpu_milli", "gpu_milli"),
                            "a GPU share must be <= 1000 milli", pa.array(milli))
            mcol = m.columns.get("gpu_milli", "gpu_milli")
        if self.has("gpu_fraction") or self.has("gpu_milli"):
            # a fractional request is one worker on one GPU: a share alone (no GPU count) means 1 GPU
            zero_gpu = (per == 0) & (milli > 0)
            self.check.flag(zero_gpu & (self.has("gpus") or self.has("gpus_per_worker")), gcol,
                            "GPU share given for a job with zero GPUs", self.raw.columns.get(gcol, pa.array(per)))
            self.check.flag((per >= 1) & (milli == 0), mcol, "zero GPUs for a GPU job (GPU share is 0)",
                            self.raw.columns.get(mcol, pa.array(milli)))
            self.check.flag((per > 1) & (milli < FULL_GPU_MILLI) & (milli > 0), mcol,
                            "a GPU share below 1000 needs a 1-GPU worker", self.raw.columns.get(mcol, pa.array(milli)))
        return workers, per, milli

    def _check_gpu_types(self, gpu_types: list[str]) -> None:
        """With ``gpu_types`` set (the cluster's), a job's GPU type must be one of them (for a set of
        allowed types, at least one of its alternatives)."""
        m = self.m
        if m.gpu_types is not None:
            allowed = set(m.gpu_types)
            unknown = np.array([bool(t) and not any(a in allowed for a in gpu_type_alternatives(t))
                                for t in gpu_types], dtype=bool)
            gt_col = m.columns.get("gpu_type", "gpu_type")
            self.check.flag(unknown, gt_col, f"a GPU type no node has (gpu_types: {', '.join(m.gpu_types)})",
                            gpu_types)

    def _duplicate_names(self, names: list[str]) -> None:
        """A job name is unique in a trace: a later row that repeats a (good) row's name is bad."""
        first: dict[str, int] = {}
        dup = np.zeros(self.n, dtype=bool)
        for i in np.flatnonzero(~self.check.bad).tolist():
            nm = names[i]
            if nm in first:
                dup[i] = True
            else:
                first[nm] = i
        if not dup.any():
            return
        col = self.m.columns.get("name", "name")
        i = int(np.flatnonzero(dup)[0])  # the earliest gets the line of the name's first row
        one = np.zeros(self.n, dtype=bool)
        one[i] = True
        self.check.flag(one, col, f"duplicate job name (first on line {int(self.raw.lines[first[names[i]]])})", names)
        self.check.flag(dup, col, "duplicate job name", names)

    def nodes(self) -> Cluster:
        m = self.m
        gpus = self.number("gpus", integer=True, minimum=0).astype(np.int64)
        count = self.number("count", integer=True, minimum=1, fallback=1).astype(np.int64)
        cpu = self.number("cpu", scale=CPU_UNITS[m.units.cpu], minimum=0, fallback=0.0)
        mem = self.number("memory", scale=MEMORY_UNITS[m.units.memory], minimum=0, fallback=0.0)
        self._too_big(cpu, "cpu")
        self._too_big(mem, "memory")
        self.check.flag(count > 100_000, m.columns.get("count", "count"), "more than 100,000 nodes in one row",
                        pa.array(count))
        self.check.flag(gpus > MAX_GPUS_PER_NODE, m.columns.get("gpus", "gpus"),
                        f"at most {MAX_GPUS_PER_NODE:,} GPUs per node", pa.array(gpus))
        with np.errstate(invalid="ignore"):
            total = np.cumsum(np.where(self.check.bad, 0, np.maximum(count, 0)))
        self.check.flag(total > MAX_NODES, m.columns.get("count", "count"),
                        f"at most {MAX_NODES:,} nodes in a cluster", pa.array(total))
        types = self.text("gpu_type", "")
        gt_col = m.columns.get("gpu_type", "gpu_type")
        no_type = np.array([not t for t in types], dtype=bool) & (gpus > 0)
        self.check.flag(no_type, gt_col, "empty GPU type on a GPU node", types)
        names = self.names(np.ones(self.n, dtype=bool))
        seen: dict[str, int] = {}
        dup = np.zeros(self.n, dtype=bool)
        for i, nm in enumerate(names):
            if nm in seen and count[i] == 1:
                dup[i] = True
            seen.setdefault(nm, i)
        self.check.flag(dup, m.columns.get("name", "name"), "duplicate node name", names)
        leaves = self.text("leaf", "") if (self.has("leaf") or self.default("leaf") is not None) else None
        spines = self.text("spine", "") if (self.has("spine") or self.default("spine") is not None) else None
        if leaves is not None and spines is not None:
            spine_of: dict[str, str] = {}
            clash = np.zeros(self.n, dtype=bool)
            kept = ~self.check.bad & (gpus > 0) if m.gpu_nodes_only else ~self.check.bad
            for i in np.flatnonzero(kept).tolist():
                if leaves[i] and spines[i]:
                    clash[i] = spine_of.setdefault(leaves[i], spines[i]) != spines[i]
            self.check.flag(clash, m.columns.get("spine", "spine"),
                            "a leaf sits under one spine; this leaf is already under another", spines)
        keep = self.check.finish()
        nodes: list[NodeSpec] = []
        for i in np.flatnonzero(keep).tolist():
            g = int(gpus[i])
            if g == 0 and m.gpu_nodes_only:
                continue
            c = int(count[i])
            for k in range(c):
                nodes.append(NodeSpec(
                    names[i] if c == 1 else f"{names[i]}-{k}",
                    types[i] or "CPU",
                    g,
                    round(float(cpu[i])),
                    round(float(mem[i])),
                    leaf=(leaves[i] or None) if leaves is not None else None,
                    spine=(spines[i] or None) if spines is not None else None,
                ))
        if not any(n.gpus for n in nodes):
            raise InputError(self.raw.source, "no GPU nodes in the inventory")
        return Cluster.from_nodes(nodes, nodes_per_leaf=m.topology.nodes_per_leaf,
                                  leaves_per_spine=m.topology.leaves_per_spine)

    def load(self) -> LoadSeries:
        m = self.m
        t = self.times("time")
        streams = self.text("stream", "default")
        inp: IntArray | None = None
        out: IntArray | None = None
        dur: FloatArray | None = None
        rate: FloatArray | None = None
        cv: FloatArray | None = None
        if m.kind == "requests":
            inp = self.number("input_tokens", integer=True, minimum=0, fallback=-1.0).astype(np.int64)
            out = self.number("output_tokens", integer=True, minimum=0, fallback=-1.0).astype(np.int64)
            dur = self.number("duration", scale=TIME_UNITS[m.units.duration], minimum=0, fallback=math.nan)
        else:
            rate = self.number("rate", minimum=0)
            cv = self.number("cv", minimum=0, fallback=math.nan)
        keep = self.check.finish()
        rows = np.flatnonzero(keep)
        if not rows.size:
            raise InputError(self.raw.source, "no valid rows")
        shift, origin_epoch = self.origin(t, keep)

        def pick(a: npt.NDArray[Any] | None) -> npt.NDArray[Any] | None:
            return None if a is None else a[rows]

        return build_load_series(
            kind=m.kind,
            time=t[rows] - shift,
            rate=pick(rate),
            stream=np.asarray(streams, dtype=object)[rows],
            input_tokens=pick(inp),
            output_tokens=pick(out),
            duration=pick(dur),
            cv=pick(cv),
            window=m.window,
            source=self.raw.source,
            origin_epoch=origin_epoch,
        )
