"""Resolve a trace argument — a known trace name or a file path — to a job table, cluster or load series.

Names (see :func:`list_traces`; the files live in the shared traces folder, see
:func:`shared_traces_dir`, except ``philly``, which ships inside the package):

==========================  =====  ==========================================================
name                        kind   what
==========================  =====  ==========================================================
``philly``                  jobs   82,247 Philly jobs (bundled copy)
``philly-pollux``           jobs   the same file, read from the shared folder
``gavel`` / ``gavel:<vc>``  jobs   Gavel's Philly-derived traces, all 15 VCs or one
``openb[:<variant>]``       jobs   openb pod lists (``default``, ``cpu050``, ``gpushare40``, ...)
``tiresias``                jobs   Tiresias 60-job sample
``dlrm``                    jobs   DLRM serving instances (kind INFERENCE)
``openb-nodes[:all]``       nodes  openb GPU nodes (``:all`` keeps the CPU-only ones)
``pai-machines``            nodes  PAI v2020 machine inventory
``tiresias-cluster[:<n>]``  nodes  Tiresias cluster specs (``n32g4``, ``n256g8``, ...)
``azure[:code|conv]``       load   Azure LLM inference requests (both files, or one)
``servegen:<model>``        load   ServeGen per-client rates (``language-m-small``, ...)
``genai[:requests|qps]``    load   GenAI requests, or QPS samples
``synthetic:<k=v,...>``     jobs   a seeded synthetic trace (:func:`kant.traces.synthetic.parse_synthetic`)
==========================  =====  ==========================================================

A path is read by its format: a ``.yaml`` mapping file (bring your own trace), a kant Parquet
file, a Gavel trace folder or ``.tsv``, or a CSV recognised by its header (every shipped layout,
kant's own inventory columns, or a CSV with the job schema's column names).
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Literal

import numpy as np

from kant.errors import InputError
from kant.model.cluster import Cluster
from kant.model.job import JobTable
from kant.traces._csv import Problems
from kant.traces.load import LoadSeries
from kant.traces.philly import bundled_philly_path, read_philly

__all__ = [
    "READERS",
    "TRACE_NAMES",
    "Reader",
    "Trace",
    "TraceEntry",
    "TraceKind",
    "list_traces",
    "load_any",
    "load_load",
    "load_nodes",
    "load_trace",
    "read_path",
    "resolve_name",
    "shared_traces_dir",
    "trace_kind",
]

TraceKind = Literal["jobs", "nodes", "load"]
Trace = JobTable | Cluster | LoadSeries

#: base trace names (variants are written ``name:variant``)
TRACE_NAMES = ("philly", "philly-pollux", "gavel", "openb", "tiresias", "dlrm", "openb-nodes", "pai-machines",
               "tiresias-cluster", "azure", "servegen", "genai", "synthetic")

_OPENB = "alibaba-openb-gpu-v2023"
_SERVEGEN_MODELS = ("language-m-large", "language-m-mid", "language-m-small", "multimodal-mm-image",
                    "reason-deepseek-r1")


@dataclass(frozen=True)
class Reader:
    """A trace format added with one line in :data:`READERS`: its name (``--trace NAME``, ``kant
    trace list``), kind, file (relative to the shared traces folder, or absolute), a one-line
    description, the reader as ``"module:function"`` (called ``function(path, problems=problems)``,
    imported on first use) and, optionally, the CSV header columns that identify the format when a
    path is given instead of the name (checked before the generic job-schema and inventory layouts)."""

    name: str
    kind: TraceKind
    path: str
    description: str
    read: str
    header: frozenset[str] = frozenset()

    def load(self, path: Path, problems: Problems | None) -> Trace:
        module, _, func = self.read.partition(":")
        reader: Callable[..., Trace] = getattr(import_module(module), func)
        return reader(path, problems=problems)

    def entry(self) -> TraceEntry:
        return TraceEntry(self.name, self.kind, self.path, self.description)


#: Trace formats added as one line each (see docs/architecture.md, "Adding a trace reader"); the
#: older readers are wired into list_traces, _load_entry and _csv_readers below.
READERS: tuple[Reader, ...] = ()


def _reader(name: str) -> Reader | None:
    return next((r for r in READERS if r.name == name), None)


def shared_traces_dir() -> Path | None:
    """Where the public traces live: ``$KANT_TRACES_DIR``, else ``../shared/traces`` above the
    working directory or this checkout, if it exists."""
    env = os.environ.get("KANT_TRACES_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for base in (Path.cwd(), *here.parents):
        cand = base.parent / "shared" / "traces"
        if cand.is_dir():
            return cand
    return None


@dataclass(frozen=True)
class TraceEntry:
    """A named trace: its kind, the file or folder it reads (relative to the shared folder, or
    absolute for bundled data) and a one-line description."""

    name: str
    kind: TraceKind
    path: str
    description: str

    def location(self) -> Path | None:
        """The absolute path, or None when the shared folder is not available."""
        p = Path(self.path)
        if p.is_absolute():
            return p
        base = shared_traces_dir()
        return None if base is None else base / p


def _vc_names(base: Path | None) -> list[str]:
    if base is None:
        return []
    folder = base / "gavel-philly-vc" / "seed0"
    return sorted(f.name.removesuffix(".trace.tsv") for f in folder.glob("*.trace.tsv")) if folder.is_dir() else []


def _tiresias_specs(base: Path | None) -> list[str]:
    if base is None:
        return []
    folder = base / "tiresias-sample"
    if not folder.is_dir():
        return []
    return sorted(f.stem for f in folder.glob("n*g*.csv"))


def list_traces(*, variants: bool = True) -> list[TraceEntry]:
    """Every named trace (with every ``:variant`` when ``variants``), bundled ones first."""
    from kant.traces.openb import OPENB_VARIANTS

    base = shared_traces_dir()
    out = [_bundled_philly()]
    out.append(TraceEntry("philly-pollux", "jobs", "philly-jobs-pollux/philly.csv.gz",
                          "Microsoft Philly jobs (Pollux CSV), shared copy"))
    out.append(TraceEntry("gavel", "jobs", "gavel-philly-vc/seed0", "Gavel Philly-derived jobs, all VCs"))
    if variants:
        out.extend(TraceEntry(f"gavel:{vc}", "jobs", f"gavel-philly-vc/seed0/{vc}.trace.tsv",
                              f"Gavel Philly-derived jobs of VC {vc}") for vc in _vc_names(base))
    out.append(TraceEntry("openb", "jobs", f"{_OPENB}/openb_pod_list_default.csv", "openb pods (default list)"))
    if variants:
        out.extend(TraceEntry(f"openb:{v}", "jobs", f"{_OPENB}/openb_pod_list_{v}.csv", f"openb pods ({v} list)")
                   for v in OPENB_VARIANTS)
    out.append(TraceEntry("tiresias", "jobs", "tiresias-sample/60_job.csv", "Tiresias 60-job sample"))
    out.append(TraceEntry("dlrm", "jobs", "alibaba-dlrm-gpu-v2025/disaggregated_DLRM_trace.csv.gz",
                          "Alibaba DLRM serving instances (inference)"))
    out.append(TraceEntry("openb-nodes", "nodes", f"{_OPENB}/openb_node_list_gpu_node.csv", "openb GPU nodes"))
    if variants:
        out.append(TraceEntry("openb-nodes:all", "nodes", f"{_OPENB}/openb_node_list_all_node.csv",
                              "openb nodes incl. CPU-only"))
    out.append(TraceEntry("pai-machines", "nodes", "alibaba-pai-gpu-v2020/pai_machine_spec.csv",
                          "Alibaba PAI v2020 machines"))
    out.append(TraceEntry("tiresias-cluster", "nodes", "tiresias-sample/cluster_spec.csv", "Tiresias cluster spec"))
    if variants:
        out.extend(TraceEntry(f"tiresias-cluster:{s}", "nodes", f"tiresias-sample/{s}.csv",
                              f"Tiresias cluster spec {s}") for s in _tiresias_specs(base))
    out.append(TraceEntry("azure", "load", "azure-llm-inference-2023", "Azure LLM requests, code + conv"))
    if variants:
        out.extend(TraceEntry(f"azure:{k}", "load", f"azure-llm-inference-2023/AzureLLMInferenceTrace_{k}.csv",
                              f"Azure LLM requests ({k})") for k in ("code", "conv"))
    out.append(TraceEntry("servegen", "load", "servegen/language-m-small-rates.csv.gz",
                          "ServeGen client rates (language-m-small)"))
    if variants:
        out.extend(TraceEntry(f"servegen:{m}", "load", f"servegen/{m}-rates.csv.gz", f"ServeGen client rates ({m})")
                   for m in _SERVEGEN_MODELS)
    out.append(TraceEntry("genai", "load", "alibaba-genai-v2026/lora_request_trace.csv.gz",
                          "Alibaba GenAI Stable Diffusion requests"))
    if variants:
        out.append(TraceEntry("genai:requests", "load", "alibaba-genai-v2026/lora_request_trace.csv.gz",
                              "Alibaba GenAI Stable Diffusion requests"))
        out.append(TraceEntry("genai:qps", "load", "alibaba-genai-v2026/qps.csv.gz", "Alibaba GenAI QPS samples"))
    out.extend(r.entry() for r in READERS)
    return out


def _bundled_philly() -> TraceEntry:
    return TraceEntry("philly", "jobs", str(bundled_philly_path()), "Microsoft Philly jobs, bundled copy")


def resolve_name(name: str) -> TraceEntry | None:
    """The entry for a trace name, or None if it is not a known name."""
    if name == "philly":  # the default trace: no listing (which imports every reader and scans folders)
        return _bundled_philly()
    for entry in list_traces():
        if entry.name == name:
            return entry
    return None


def _need(entry: TraceEntry) -> Path:
    loc = entry.location()
    if loc is None:
        raise InputError(entry.name, "the shared traces folder was not found; set KANT_TRACES_DIR")
    if not loc.exists():
        raise InputError(str(loc), f"file of trace {entry.name!r} not found")
    return loc


def _load_entry(entry: TraceEntry, problems: Problems | None, limit: int | None = None) -> Trace:
    name, _, variant = entry.name.partition(":")
    if name == "philly":
        return read_philly(problems=problems, limit=limit)
    from kant.traces import azure, dlrm, gavel, genai, openb, pai, servegen, tiresias

    loc = _need(entry)
    if name == "philly-pollux":
        return read_philly(loc, problems=problems, limit=limit)
    if name == "gavel":
        return gavel.read_gavel(loc, problems=problems)
    if name == "openb":
        return openb.read_openb_pods(loc, problems=problems)
    if name == "tiresias":
        return tiresias.read_tiresias(loc, problems=problems)
    if name == "dlrm":
        return dlrm.read_dlrm(loc, problems=problems)
    if name == "openb-nodes":
        return openb.read_openb_nodes(loc, gpu_nodes_only=variant != "all", problems=problems)
    if name == "pai-machines":
        return pai.read_pai_machines(loc, problems=problems)
    if name == "tiresias-cluster":
        return tiresias.read_tiresias_cluster(loc)
    if name == "azure":
        if variant:
            return azure.read_azure(loc, problems=problems)
        parts = [azure.read_azure(loc / f"AzureLLMInferenceTrace_{k}.csv", problems=problems) for k in ("code", "conv")]
        return _concat_requests(parts, source=str(loc))
    if name == "servegen":
        return servegen.read_servegen_rates(loc, problems=problems)
    if name == "genai":
        if variant == "qps":
            return genai.read_genai_qps(loc, problems=problems)
        return genai.read_genai_requests(loc, problems=problems)
    reader = _reader(name)
    if reader is not None:
        return reader.load(loc, problems)
    raise InputError(entry.name, "no reader for this trace")  # pragma: no cover - list and loader agree


def _concat_requests(parts: list[LoadSeries], source: str) -> LoadSeries:
    """One request series from several with absolute origins (streams kept apart)."""
    from kant.traces.schema import build_load_series

    origins = [p.origin_epoch or 0.0 for p in parts]
    origin = min(origins)
    streams = np.concatenate([np.asarray(p.stream_names, dtype=object)[p.stream] for p in parts])
    return build_load_series(
        kind="requests",
        time=np.concatenate([p.time + (o - origin) for p, o in zip(parts, origins, strict=True)]),
        stream=streams,
        input_tokens=np.concatenate([p.input_tokens for p in parts]),
        output_tokens=np.concatenate([p.output_tokens for p in parts]),
        duration=np.concatenate([p.duration for p in parts]),
        source=source,
        origin_epoch=origin if all(p.origin_epoch is not None for p in parts) else None,
    )


# ---------------------------------------------------------------------------------------------
# Paths
# ---------------------------------------------------------------------------------------------
def _first_line(path: Path) -> str:
    try:
        if path.suffix.lower() == ".gz":
            with gzip.open(path, "rb") as fh:
                raw = fh.readline(65536)
        else:
            with open(path, "rb") as fh:
                raw = fh.readline(65536)
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except IsADirectoryError:
        raise InputError(str(path), "is a directory") from None
    except (gzip.BadGzipFile, EOFError, zlib.error):
        raise InputError(str(path), "not a valid gzip file (corrupt or truncated)") from None
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from None
    return raw.decode("utf-8", errors="replace").lstrip("\ufeff").rstrip("\r\n")


_Reader = Callable[[Path, Problems | None], Trace]


def _csv_readers() -> list[tuple[frozenset[str], _Reader]]:
    from kant.traces import azure, dlrm, genai, openb, servegen, tiresias
    from kant.traces.inventory import read_inventory

    return [
        (frozenset({"timestamp", "duration", "num_gpus", "cluster"}), lambda p, pr: read_philly(p, problems=pr)),
        (frozenset({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}),
         lambda p, pr: openb.read_openb_pods(p, problems=pr)),
        (frozenset({"sn", "cpu_milli", "memory_mib", "gpu", "model"}),
         lambda p, pr: openb.read_openb_nodes(p, problems=pr)),
        (frozenset({"instance_sn", "role", "app_name", "gpu_request"}), lambda p, pr: dlrm.read_dlrm(p, problems=pr)),
        (frozenset({"job_id", "num_gpu", "submit_time", "duration"}),
         lambda p, pr: tiresias.read_tiresias(p, problems=pr)),
        (frozenset({"num_switch", "num_node_p_switch", "num_gpu_p_node"}),
         lambda p, pr: tiresias.read_tiresias_cluster(p)),
        (frozenset({"TIMESTAMP", "ContextTokens", "GeneratedTokens"}), lambda p, pr: azure.read_azure(p, problems=pr)),
        (frozenset({"client_id", "window_start_s", "rate_rps"}),
         lambda p, pr: servegen.read_servegen_rates(p, problems=pr)),
        (frozenset({"gmt_create", "exec_time_seconds", "checkpoint_model_version_id"}),
         lambda p, pr: genai.read_genai_requests(p, problems=pr)),
        (frozenset({"timestamp_anon", "value", "request_type"}), lambda p, pr: genai.read_genai_qps(p, problems=pr)),
        *((r.header, r.load) for r in READERS if r.header),
        (frozenset({"name", "submit", "duration"}), _read_schema_csv),
        (frozenset({"name", "gpu_type", "gpus"}), lambda p, pr: read_inventory(p, problems=pr)),
    ]


def _read_schema_csv(path: Path, problems: Problems | None) -> JobTable:
    """A CSV whose columns are the job schema's own names (as ``kant trace convert`` documents)."""
    from kant.traces.mapped import read_mapped
    from kant.traces.mapping import TraceMapping
    from kant.traces.raw import read_raw

    header = read_raw(path).header
    fields = {"name", "submit", "duration", "workers", "gpus_per_worker", "gpu_milli", "gpu_type", "priority",
              "tenant", "user", "estimate", "kind"}
    columns = {f: f for f in header if f in fields}
    if "cpu_milli" in header:
        columns["cpu"] = "cpu_milli"
    if "memory_mib" in header:
        columns["memory"] = "memory_mib"
    mapping = TraceMapping(file=path.name, columns=columns, time_origin="zero")
    result = read_mapped(mapping, base_dir=path.parent, problems=problems, mapping_source=str(path))
    assert isinstance(result, JobTable)
    return result


def read_path(arg: str | Path, *, problems: Problems | None = None) -> Trace:
    """Read a trace file or folder, choosing the reader from its name and first line."""
    from kant.traces import gavel, pai
    from kant.traces.parquet import read_parquet
    from kant.traces.raw import sniff_format

    path = Path(arg)
    if path.is_dir():
        if list(path.glob("*.trace.tsv")) or list(path.glob("*.trace")):
            return gavel.read_gavel(path, problems=problems)
        raise InputError(str(path), "a folder is only read as a Gavel trace folder (*.trace.tsv files)")
    if not path.exists():
        raise InputError(str(path), "file not found")
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return _read_yaml(path, problems)
    fmt = sniff_format(path)
    if fmt == "parquet":
        return read_parquet(path, problems=problems)
    if fmt == "jsonl":
        raise InputError(str(path), "JSON lines need a mapping file that names the columns (see docs/traces.md)")
    first = _first_line(path)
    if not first.strip():
        raise InputError(str(path), "file is empty (no header line)", line=1)
    if "\t" in first and len(first.split("\t")) == 7:
        return gavel.read_gavel(path, problems=problems)
    header = {h.strip().strip('"') for h in first.split(",")}
    for columns, reader in _csv_readers():
        if columns <= header:
            return reader(path, problems)
    fields = first.split(",")
    if len(fields) == 5 and fields[1].strip().isalnum() and all(f.strip().replace(".", "").isdigit()
                                                                for f in fields[2:]):
        return pai.read_pai_machines(path, problems=problems)
    raise InputError(str(path), f"unrecognised trace layout (first line: {first[:100]!r}); write a mapping file "
                     "for it (see docs/traces.md)", line=1)


def _read_yaml(path: Path, problems: Problems | None) -> Trace:
    import yaml

    from kant.errors import ConfigError
    from kant.traces.inventory import load_cluster
    from kant.traces.mapped import read_with_mapping

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), "", f"cannot read: {exc}") from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError):
        data = None  # read_with_mapping reports it
    if isinstance(data, dict) and "nodes" in data and "columns" not in data:
        return load_cluster(str(path))
    return read_with_mapping(path, problems=problems)


def load_any(arg: str, *, problems: Problems | None = None, limit: int | None = None) -> Trace:
    """Resolve a trace name (see the module docstring) or path to a job table, cluster or load series.

    ``limit`` (job traces only) is a hint: the Philly reader then builds only the first ``limit`` jobs by
    submit time; other readers ignore it (:func:`load_trace` takes the rows)."""
    if arg.startswith("synthetic"):
        from kant.traces.synthetic import generate_jobs, parse_synthetic

        head, _, _ = arg.partition(":")
        if head == "synthetic":
            return generate_jobs(parse_synthetic(arg))
    entry = resolve_name(arg)
    if entry is not None:
        return _load_entry(entry, problems, limit)
    base, sep, _ = arg.partition(":")
    if sep and base in TRACE_NAMES and not Path(arg).exists():
        choices = [e.name for e in list_traces() if e.name.startswith(base + ":")]
        raise InputError(arg, f"unknown variant; expected one of {', '.join(choices) or base}")
    path = Path(arg)
    if path.exists():
        return read_path(path, problems=problems)
    names = ", ".join((*TRACE_NAMES, *(r.name for r in READERS)))
    raise InputError(arg, f"unknown trace; expected a file path or one of {names} "
                     "(see `kant trace list`)")


def trace_kind(obj: Trace) -> TraceKind:
    """``jobs``, ``nodes`` or ``load``."""
    if isinstance(obj, JobTable):
        return "jobs"
    if isinstance(obj, Cluster):
        return "nodes"
    return "load"


def _expect(arg: str, obj: Trace, kind: TraceKind) -> None:
    got = trace_kind(obj)
    if got != kind:
        words = {"jobs": "a job trace", "nodes": "a node inventory", "load": "an inference load trace"}
        raise InputError(arg, f"this is {words[got]}, not {words[kind]}")


def load_trace(arg: str, *, problems: Problems | None = None, limit: int | None = None) -> JobTable:
    """A job trace by name or path (``philly``, ``openb:gpushare40``, ``jobs.parquet``, ``my.yaml``, ...);
    with ``limit``, only its first ``limit`` jobs by submit time (rows ``0 .. limit - 1``)."""
    obj = load_any(arg, problems=problems, limit=limit)
    _expect(arg, obj, "jobs")
    assert isinstance(obj, JobTable)
    if limit is not None and len(obj) > limit:
        obj = obj.take(np.arange(limit))
    return obj


def load_nodes(arg: str, *, problems: Problems | None = None) -> Cluster:
    """A cluster from a node-trace name, a nodes mapping/Parquet file, or anything
    :func:`kant.traces.inventory.load_cluster` accepts (built-in name, spec string, inventory)."""
    from kant.traces.inventory import BUILTIN_CLUSTERS, load_cluster

    if arg in BUILTIN_CLUSTERS:  # cluster names win over trace names ("philly" is both)
        return load_cluster(arg)
    entry = resolve_name(arg)
    if entry is not None or (Path(arg).exists() and Path(arg).suffix.lower() in (".yaml", ".yml", ".parquet", ".pq")):
        obj = load_any(arg, problems=problems)
        _expect(arg, obj, "nodes")
        assert isinstance(obj, Cluster)
        return obj
    if arg in BUILTIN_CLUSTERS or not Path(arg).exists():
        return load_cluster(arg)
    obj = read_path(Path(arg), problems=problems)
    _expect(arg, obj, "nodes")
    assert isinstance(obj, Cluster)
    return obj


def load_load(arg: str, *, problems: Problems | None = None) -> LoadSeries:
    """An inference load series by name or path (``azure``, ``servegen:reason-deepseek-r1``, ...)."""
    obj = load_any(arg, problems=problems)
    _expect(arg, obj, "load")
    assert isinstance(obj, LoadSeries)
    return obj
