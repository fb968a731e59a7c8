"""Resolve a trace argument — a known trace name or a file path — to a job table, cluster or load series.

Every name comes from one table, :data:`READERS`: one :class:`Reader` line per trace format (the
built-in ones and any added one alike), with its ``:variant`` forms (``gavel:<vc>``,
``openb:<variant>``, ``openb-nodes:all``, ``tiresias-cluster:<spec>``, ``azure:code|conv``,
``servegen:<model>``, ``genai:requests|qps``), the header columns that recognise its files, and
generated traces (``synthetic:<k=v,...>``, :func:`kant.traces.synthetic.parse_synthetic`). The files
live in the shared traces folder (:func:`shared_traces_dir`), except ``philly``'s, which ships inside
the package. ``kant trace list`` shows the table.

A path is read by its format: a ``.yaml`` mapping file (bring your own trace), a kant Parquet
file, a file or folder a reader of the table recognises (its header columns, or its ``sniff``:
Gavel's 7-field TSV files and folders, PAI's headerless machine list), or a CSV with kant's own
inventory columns or the job schema's column names.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kant.errors import InputError
from kant.model.cluster import Cluster
from kant.model.job import JobTable
from kant.traces._csv import Problems
from kant.traces.load import LoadSeries
from kant.traces.philly import bundled_philly_path

__all__ = [
    "READERS",
    "Reader",
    "Trace",
    "TraceEntry",
    "TraceKind",
    "Variant",
    "Variants",
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


def _resolve(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(import_module(module), name)


@dataclass(frozen=True)
class Variant:
    """One ``name:<variant>`` form of a trace: its file (relative to the shared traces folder), its
    description and, where they differ from the trace's, the reader (``"module:function"``), the
    keyword arguments it is called with, and the CSV header columns that identify the variant's
    files when a path is given."""

    name: str
    path: str
    description: str
    read: str = ""
    args: Mapping[str, Any] = field(default_factory=dict, hash=False)
    header: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Variants:
    """Variants that share a file pattern, read like the plain name: ``path`` and ``description``
    with ``{v}`` for the variant; the names are ``names`` (fixed, or ``"module:attribute"`` naming
    a tuple, imported only when listing), or the files matching ``path`` with ``{v}`` as the glob
    ``found`` in the shared folder (``"*"``: every such file), sorted."""

    path: str
    description: str
    names: tuple[str, ...] | str = ()
    found: str = ""

    def expand(self, base: Path | None) -> tuple[Variant, ...]:
        """The variants, given the shared folder (None when there is none: found variants are none)."""
        if self.found:
            names = self._found(base)
        elif isinstance(self.names, str):
            names = list(_resolve(self.names))
        else:
            names = list(self.names)
        return tuple(Variant(v, self.path.format(v=v), self.description.format(v=v)) for v in names)

    def _found(self, base: Path | None) -> list[str]:
        if base is None:
            return []
        folder, _, pattern = self.path.rpartition("/")
        head, _, tail = pattern.partition("{v}")
        where = base / folder
        if not where.is_dir():
            return []
        return sorted(f.name[len(head):len(f.name) - len(tail)] for f in where.glob(head + self.found + tail))


@dataclass(frozen=True)
class Reader:
    """A trace format, one line of :data:`READERS` (see docs/architecture.md, "Adding a trace reader").

    ``name`` is the trace's name (``--trace NAME``, ``kant trace list``), ``kind`` what it gives,
    ``path`` its file or folder (relative to the shared traces folder, or absolute), ``description``
    one line for the listing, and ``read`` the reader as ``"module:function"``, imported on first
    use and called ``function(path, problems=problems, **args)``. Optional:

    * ``header``: the CSV header columns that identify the format when a path is given instead of
      the name (checked in table order, before the generic job-schema and inventory layouts);
      ``sniff``: ``"module:function"`` of ``(path, first_line)`` for files recognised otherwise
      (``first_line`` None: a folder, asked only of readers with a ``folder`` text, which names such
      folders in the error for any other);
    * ``variants``: the ``name:<variant>`` forms, as :class:`Variant` records or one :class:`Variants`;
    * ``limit``: the reader takes ``limit=`` (build only the first jobs by submit time);
    * ``generated``: no file: ``read`` is called with the whole name (``synthetic:jobs=100``), any
      ``:`` suffix is accepted, and the name is not listed.
    """

    name: str
    kind: TraceKind
    path: str
    description: str
    read: str
    header: frozenset[str] = frozenset()
    variants: tuple[Variant, ...] | Variants = ()
    sniff: str = ""
    folder: str = ""
    limit: bool = False
    generated: bool = False

    def entry(self, variant: Variant | None = None) -> TraceEntry:
        """The listing entry of the plain name, or of one variant."""
        if variant is None:
            return TraceEntry(self.name, self.kind, self.path, self.description)
        return TraceEntry(f"{self.name}:{variant.name}", self.kind, variant.path, variant.description)

    def variant_list(self, base: Path | None) -> tuple[Variant, ...]:
        """The variants, given the shared folder (see :class:`Variants`)."""
        return self.variants.expand(base) if isinstance(self.variants, Variants) else self.variants

    def load(self, path: Path, problems: Problems | None, limit: int | None = None,
             variant: Variant | None = None) -> Trace:
        """Read ``path`` with this format's reader (the variant's, where it has one)."""
        ref = variant.read if variant is not None and variant.read else self.read
        kwargs: dict[str, Any] = dict(variant.args) if variant is not None else {}
        if self.limit:
            kwargs["limit"] = limit
        reader: Callable[..., Trace] = _resolve(ref)
        return reader(path, problems=problems, **kwargs)

    def headers(self) -> list[tuple[frozenset[str], Variant | None]]:
        """The header column sets that identify this format's files, with the variant each reads as."""
        out: list[tuple[frozenset[str], Variant | None]] = [(self.header, None)] if self.header else []
        if not isinstance(self.variants, Variants):
            out.extend((v.header, v) for v in self.variants if v.header)
        return out


_OPENB = "alibaba-openb-gpu-v2023"
_GENAI = "alibaba-genai-v2026"

#: Every trace format, in the order ``kant trace list`` shows them and header sniffing tries them.
#: A new format is one line here (see docs/architecture.md, "Adding a trace reader").
READERS: tuple[Reader, ...] = (
    Reader("philly", "jobs", str(bundled_philly_path()), "Microsoft Philly jobs, bundled copy",
           "kant.traces.philly:read_philly", frozenset({"timestamp", "duration", "num_gpus", "cluster"}),
           limit=True),
    Reader("philly-pollux", "jobs", "philly-jobs-pollux/philly.csv.gz",
           "Microsoft Philly jobs (Pollux CSV), shared copy", "kant.traces.philly:read_philly", limit=True),
    Reader("gavel", "jobs", "gavel-philly-vc/seed0", "Gavel Philly-derived jobs, all VCs",
           "kant.traces.gavel:read_gavel",
           variants=Variants("gavel-philly-vc/seed0/{v}.trace.tsv", "Gavel Philly-derived jobs of VC {v}", found="*"),
           sniff="kant.traces.gavel:is_gavel", folder="a Gavel trace folder (*.trace.tsv files)"),
    Reader("pollux", "jobs", "pollux-workloads/workloads/workload-1.csv",
           "Pollux (OSDI'21) workload 1 as elastic jobs (semi-synthetic durations)",
           "kant.traces.pollux:read_pollux", frozenset({"name", "time", "application", "num_replicas", "batch_size"}),
           variants=Variants("pollux-workloads/workloads/workload-{v}.csv",
                             "Pollux (OSDI'21) workload {v} as elastic jobs", found="*")),
    Reader("sia", "jobs", "sia-workloads/philly/workload-1.csv",
           "Sia (SOSP'23) Philly workload 1 as elastic jobs (semi-synthetic durations)",
           "kant.traces.pollux:read_pollux",
           variants=Variants("sia-workloads/philly/workload-{v}.csv",
                             "Sia (SOSP'23) Philly workload {v} as elastic jobs", found="*")),
    Reader("openb", "jobs", f"{_OPENB}/openb_pod_list_default.csv", "openb pods (default list)",
           "kant.traces.openb:read_openb_pods", frozenset({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}),
           variants=Variants(f"{_OPENB}/openb_pod_list_{{v}}.csv", "openb pods ({v} list)",
                             "kant.traces.openb:OPENB_VARIANTS")),
    Reader("tiresias", "jobs", "tiresias-sample/60_job.csv", "Tiresias 60-job sample",
           "kant.traces.tiresias:read_tiresias", frozenset({"job_id", "num_gpu", "submit_time", "duration"})),
    Reader("dlrm", "jobs", "alibaba-dlrm-gpu-v2025/disaggregated_DLRM_trace.csv.gz",
           "Alibaba DLRM serving instances (inference)", "kant.traces.dlrm:read_dlrm",
           frozenset({"instance_sn", "role", "app_name", "gpu_request"})),
    Reader("openb-nodes", "nodes", f"{_OPENB}/openb_node_list_gpu_node.csv", "openb GPU nodes",
           "kant.traces.openb:read_openb_nodes", frozenset({"sn", "cpu_milli", "memory_mib", "gpu", "model"}),
           variants=(Variant("all", f"{_OPENB}/openb_node_list_all_node.csv", "openb nodes incl. CPU-only",
                             args={"gpu_nodes_only": False}),)),
    Reader("pai-machines", "nodes", "alibaba-pai-gpu-v2020/pai_machine_spec.csv", "Alibaba PAI v2020 machines",
           "kant.traces.pai:read_pai_machines", sniff="kant.traces.pai:is_pai_machines"),
    Reader("tiresias-cluster", "nodes", "tiresias-sample/cluster_spec.csv", "Tiresias cluster spec",
           "kant.traces.tiresias:read_tiresias_cluster",
           frozenset({"num_switch", "num_node_p_switch", "num_gpu_p_node"}),
           variants=Variants("tiresias-sample/{v}.csv", "Tiresias cluster spec {v}", found="n*g*")),
    Reader("azure", "load", "azure-llm-inference-2023", "Azure LLM requests, code + conv",
           "kant.traces.azure:read_azure", frozenset({"TIMESTAMP", "ContextTokens", "GeneratedTokens"}),
           variants=Variants("azure-llm-inference-2023/AzureLLMInferenceTrace_{v}.csv", "Azure LLM requests ({v})",
                             "kant.traces.azure:AZURE_WORKLOADS")),
    Reader("servegen", "load", "servegen/language-m-small-rates.csv.gz", "ServeGen client rates (language-m-small)",
           "kant.traces.servegen:read_servegen_rates", frozenset({"client_id", "window_start_s", "rate_rps"}),
           variants=Variants("servegen/{v}-rates.csv.gz", "ServeGen client rates ({v})",
                             ("language-m-large", "language-m-mid", "language-m-small", "multimodal-mm-image",
                              "reason-deepseek-r1"))),
    Reader("genai", "load", f"{_GENAI}/lora_request_trace.csv.gz", "Alibaba GenAI Stable Diffusion requests",
           "kant.traces.genai:read_genai_requests",
           frozenset({"gmt_create", "exec_time_seconds", "checkpoint_model_version_id"}),
           variants=(Variant("requests", f"{_GENAI}/lora_request_trace.csv.gz",
                             "Alibaba GenAI Stable Diffusion requests"),
                     Variant("qps", f"{_GENAI}/qps.csv.gz", "Alibaba GenAI QPS samples",
                             "kant.traces.genai:read_genai_qps",
                             header=frozenset({"timestamp_anon", "value", "request_type"})))),
    Reader("synthetic", "jobs", "", "a seeded synthetic trace (synthetic:jobs=N,seed=S,...)",
           "kant.traces.synthetic:read_synthetic", generated=True),
)


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


def list_traces(*, variants: bool = True) -> list[TraceEntry]:
    """Every named trace of :data:`READERS` (with every ``:variant`` when ``variants``), in table order."""
    base = shared_traces_dir() if variants else None
    out = []
    for reader in READERS:
        if reader.generated:
            continue
        out.append(reader.entry())
        if variants:
            out.extend(reader.entry(v) for v in reader.variant_list(base))
    return out


def _lookup(name: str) -> tuple[Reader, Variant | None] | None:
    """The reader of a listed name, and its variant (None for the plain name)."""
    base, sep, variant = name.partition(":")
    reader = _reader(base)
    if reader is None or reader.generated:
        return None
    if not sep:
        return reader, None
    found = next((v for v in reader.variant_list(shared_traces_dir()) if v.name == variant), None)
    return None if found is None else (reader, found)


def resolve_name(name: str) -> TraceEntry | None:
    """The entry for a trace name, or None if it is not a known name. A plain name is a lookup in
    the table (the default trace, ``philly``, lists nothing, imports no reader and scans no folder);
    only a ``:variant`` lists its own trace's variants."""
    found = _lookup(name)
    return None if found is None else found[0].entry(found[1])


def _need(entry: TraceEntry) -> Path:
    loc = entry.location()
    if loc is None:
        raise InputError(entry.name, "the shared traces folder was not found; set KANT_TRACES_DIR")
    if not loc.exists():
        raise InputError(str(loc), f"file of trace {entry.name!r} not found")
    return loc


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


def _generic_layouts() -> list[tuple[frozenset[str], Callable[[Path, Problems | None], Trace]]]:
    """CSV layouts that are no trace format of their own, tried after every reader's header: the job
    schema's own column names, and kant's node inventory."""
    from kant.traces.inventory import read_inventory

    return [
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
              "tenant", "user", "estimate", "kind", "depends_on", "kill_on_invalid_dep", "min_workers", "max_workers",
              "speedup"}
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
    """Read a trace file or folder, choosing the reader from its name and first line: a mapping
    YAML, kant Parquet, then each reader of :data:`READERS` in order by its header columns or its
    ``sniff``, then the generic CSV layouts."""
    from kant.traces.parquet import read_parquet
    from kant.traces.raw import sniff_format

    path = Path(arg)
    if path.is_dir():
        for reader in READERS:
            if reader.folder and _resolve(reader.sniff)(path, None):
                return reader.load(path, problems)
        folders = " or ".join(r.folder for r in READERS if r.folder)
        raise InputError(str(path), f"a folder is only read as {folders}")
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
    header = {h.strip().strip('"') for h in first.split(",")}
    for reader in READERS:
        for columns, variant in reader.headers():
            if columns <= header:
                return reader.load(path, problems, variant=variant)
        if reader.sniff and _resolve(reader.sniff)(path, first):
            return reader.load(path, problems)
    for columns, read in _generic_layouts():
        if columns <= header:
            return read(path, problems)
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

    ``limit`` (job traces only) is a hint: a reader that takes it (Philly's) then builds only the first
    ``limit`` jobs by submit time; other readers ignore it (:func:`load_trace` takes the rows)."""
    base, sep, _ = arg.partition(":")
    reader = _reader(base)
    if reader is not None and reader.generated:
        generate: Callable[[str], Trace] = _resolve(reader.read)
        return generate(arg)
    found = _lookup(arg)
    if found is not None:
        reader, variant = found
        return reader.load(_need(reader.entry(variant)), problems, limit, variant)
    if sep and reader is not None and not Path(arg).exists():
        choices = [reader.entry(v).name for v in reader.variant_list(shared_traces_dir())]
        raise InputError(arg, f"unknown variant; expected one of {', '.join(choices) or base}")
    path = Path(arg)
    if path.exists():
        return read_path(path, problems=problems)
    names = ", ".join(r.name for r in READERS)
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
