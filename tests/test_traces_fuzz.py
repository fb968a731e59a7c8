"""Fuzzing: mutated rows of the real traces end in kant's own clear errors, never anything else.

Each example takes the header and the first rows of a real file, applies a few random mutations
(junk fields, missing or extra fields, deleted, duplicated, blank or truncated lines, invalid UTF-8,
CR line ends, a broken header) and writes the copy to a temporary folder. Reading it, strictly or
with ``--skip-invalid``, may only raise :class:`~kant.errors.KantError`; and when the reader keeps
one job per row, every row is either kept or reported (never dropped silently).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kant.errors import KantError
from kant.model.cluster import Cluster
from kant.traces._csv import Problems
from kant.traces.registry import shared_traces_dir

SHARED = shared_traces_dir()
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "mappings"
ROWS = 25
EXAMPLES_PER_SOURCE = int(os.environ.get("KANT_FUZZ_EXAMPLES", "30"))

JUNK = st.one_of(
    st.sampled_from(["", " ", "-1", "0", "-0", "+5", "1.5", "nan", "inf", "-inf", "1e400", "1e30", "9" * 30, "abc",
                     "0x10", "１２", "2017-02-30 00:00:00", "2017-13-01", "9999-12-31 23:59:59", "0001-01-01",
                     '"', '""', "a,b", "\t", "\x00", "é", "|", "||", "T4|", "Running", "HN", "CN", "LS", "{}", "[1]",
                     "null", "true"]),
    st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12),
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@dataclass(frozen=True)
class Source:
    """A real file, how to read it, and whether every row becomes one job or request."""

    label: str
    rel: str  # relative to the shared folder; "" = bundled Philly
    header: bool
    delim: str
    read: Callable[[Path, Problems], Any]
    one_to_one: bool


def _philly(p: Path, pr: Problems) -> Any:
    from kant.traces.philly import read_philly

    return read_philly(p, problems=pr)


def _openb(p: Path, pr: Problems) -> Any:
    from kant.traces.openb import read_openb_pods

    assert SHARED is not None
    return read_openb_pods(p, node_list=SHARED / "alibaba-openb-gpu-v2023" / "openb_node_list_gpu_node.csv",
                           problems=pr)


def _reader(module: str, func: str, **kw: Any) -> Callable[[Path, Problems], Any]:
    def read(p: Path, pr: Problems) -> Any:
        import importlib

        fn = getattr(importlib.import_module(f"kant.traces.{module}"), func)
        return fn(p, problems=pr, **kw) if func != "read_tiresias_cluster" else fn(p)

    return read


def _any(p: Path, pr: Problems) -> Any:
    from kant.traces.registry import read_path

    return read_path(p, problems=pr)


SOURCES = [
    Source("philly", "", True, ",", _philly, True),
    Source("philly-sniffed", "", True, ",", _any, False),
    Source("openb-default", "alibaba-openb-gpu-v2023/openb_pod_list_default.csv", True, ",", _openb, True),
    Source("openb-gpuspec", "alibaba-openb-gpu-v2023/openb_pod_list_gpuspec25.csv", True, ",", _openb, True),
    Source("openb-multigpu", "alibaba-openb-gpu-v2023/openb_pod_list_multigpu40.csv", True, ",", _openb, True),
    Source("openb-nodes", "alibaba-openb-gpu-v2023/openb_node_list_all_node.csv", True, ",",
           _reader("openb", "read_openb_nodes", gpu_nodes_only=False), True),
    Source("pai", "alibaba-pai-gpu-v2020/pai_machine_spec.csv", False, ",",
           _reader("pai", "read_pai_machines", gpu_nodes_only=False), True),
    Source("dlrm", "alibaba-dlrm-gpu-v2025/disaggregated_DLRM_trace.csv.gz", True, ",", _reader("dlrm", "read_dlrm"),
           True),
    Source("tiresias", "tiresias-sample/60_job.csv", True, ",", _reader("tiresias", "read_tiresias"), True),
    Source("tiresias-cluster", "tiresias-sample/n32g4.csv", True, ",", _reader("tiresias", "read_tiresias_cluster"),
           False),
    Source("azure", "azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv", True, ",",
           _reader("azure", "read_azure"), True),
    Source("servegen", "servegen/reason-deepseek-r1-rates.csv.gz", True, ",",
           _reader("servegen", "read_servegen_rates"), True),
    Source("genai", "alibaba-genai-v2026/lora_request_trace.csv.gz", True, ",",
           _reader("genai", "read_genai_requests"), True),
    Source("genai-qps", "alibaba-genai-v2026/qps.csv.gz", True, ",", _reader("genai", "read_genai_qps"), False),
    Source("gavel", "gavel-philly-vc/seed0/6214e9.trace.tsv", False, "\t", _reader("gavel", "read_gavel"), True),
    Source("sniffed-dlrm", "alibaba-dlrm-gpu-v2025/disaggregated_DLRM_trace.csv.gz", True, ",", _any, False),
]


def _lines(src: Source) -> tuple[list[str], str]:
    """First lines of the real file, and the file name to write the mutated copy under."""
    if src.rel == "":
        from kant.traces.philly import bundled_philly_path

        path = bundled_philly_path()
    else:
        if SHARED is None or not (SHARED / src.rel).exists():
            pytest.skip(f"{src.rel} not available")
        path = SHARED / src.rel
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    lines = data.decode("utf-8").splitlines()[: ROWS + (1 if src.header else 0)]
    name = path.name.removesuffix(".gz")
    return lines, name


@st.composite
def mutations(draw: st.DrawFn, lines: list[str], delim: str, header: bool) -> tuple[bytes, bool]:
    """Mutated file bytes, and whether the header line survived unchanged."""
    out = list(lines)
    header_ok = True
    first = 1 if header else 0
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["field", "field", "field", "drop_field", "add_field", "delete", "duplicate",
                                   "blank", "truncate", "header"]))
        if not out:
            break
        i = draw(st.integers(first, max(first, len(out) - 1)))
        if i >= len(out):
            continue
        fields = out[i].split(delim)
        if op == "field":
            fields[draw(st.integers(0, len(fields) - 1))] = draw(JUNK)
            out[i] = delim.join(fields)
        elif op == "drop_field" and len(fields) > 1:
            del fields[draw(st.integers(0, len(fields) - 1))]
            out[i] = delim.join(fields)
        elif op == "add_field":
            fields.insert(draw(st.integers(0, len(fields))), draw(JUNK))
            out[i] = delim.join(fields)
        elif op == "delete":
            del out[i]
        elif op == "duplicate":
            out.insert(i, out[i])
        elif op == "blank":
            out.insert(i, draw(st.sampled_from(["", " ", "\t"])))
        elif op == "truncate":
            out[i] = out[i][: draw(st.integers(0, len(out[i])))]
        elif op == "header" and header and out:
            hf = out[0].split(delim)
            hf[draw(st.integers(0, len(hf) - 1))] = draw(st.sampled_from(["", "x", "name", hf[0]]))
            out[0] = delim.join(hf)
            header_ok = False
    data = "\n".join(out).encode("utf-8") + b"\n"
    if draw(st.booleans()) and len(out) > first + 1:
        # corrupt the bytes of one data line (invalid UTF-8)
        pos = data.find(b"\n", draw(st.integers(0, len(data) - 1)))
        if pos > 0:
            data = data[:pos] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])) + data[pos:]
    if draw(st.integers(0, 9)) == 0:
        data = data.replace(b"\n", b"\r\n")
    return data, header_ok


def _count_rows(data: bytes, header: bool) -> int:
    lines = [ln for ln in data.split(b"\n") if ln.strip()]
    return len(lines) - (1 if header else 0)


def _check(src: Source, path: Path, data: bytes, header_ok: bool) -> None:
    with contextlib.suppress(KantError):
        src.read(path, Problems())
    problems = Problems(skip=True)
    try:
        obj = src.read(path, problems)
    except KantError:
        return
    if src.one_to_one and header_ok and b'"' not in data and b"\r" not in data and b"\x00" not in data:
        kept = obj.n_nodes if isinstance(obj, Cluster) else len(obj)
        assert kept + len(problems) == _count_rows(data, src.header), (
            f"{src.label}: {kept} kept + {len(problems)} reported != {_count_rows(data, src.header)} rows")


@pytest.mark.parametrize("src", SOURCES, ids=[s.label for s in SOURCES])
def test_mutated_rows_raise_only_kant_errors(src: Source) -> None:
    lines, name = _lines(src)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name

        @settings(max_examples=EXAMPLES_PER_SOURCE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(mutations(lines, src.delim, src.header))
        def run(case: tuple[bytes, bool]) -> None:
            data, header_ok = case
            path.write_bytes(data)
            _check(src, path, data, header_ok)

        run()


def test_mutated_jsonl_through_the_example_mapping() -> None:
    from kant.traces.mapped import read_with_mapping

    lines = (EXAMPLES / "philly-2000.jsonl").read_text().splitlines()[:ROWS]
    yaml_text = (EXAMPLES / "philly-jsonl.yaml").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "m.yaml").write_text(yaml_text)
        path = Path(tmp) / "philly-2000.jsonl"

        @settings(max_examples=EXAMPLES_PER_SOURCE + 10, deadline=None)
        @given(st.lists(st.tuples(st.integers(0, ROWS - 1), st.sampled_from(["job_id", "submitted_ms", "runtime_ms",
                                                                               "gpu_count", "virtual_cluster"]),
                                  JUNK | st.integers(-(10**30), 10**30) | st.none() | st.floats()), max_size=4),
               st.booleans())
        def run(edits: list[tuple[int, str, Any]], break_json: bool) -> None:
            import json

            rows = [json.loads(x) for x in lines]
            for i, key, value in edits:
                rows[i][key] = value
            text = [json.dumps(r) for r in rows]
            if break_json:
                text[1] = text[1][:-3]
                text[2] = "[1, 2]"
            path.write_text("\n".join(text) + "\n")
            problems = Problems(skip=True)
            try:
                jobs = read_with_mapping(Path(tmp) / "m.yaml", problems=problems)
            except KantError:
                return
            assert len(jobs) + len(problems) == ROWS  # type: ignore[arg-type]

        run()


def test_mutated_mapping_yaml_gives_config_errors() -> None:
    from kant.traces.mapped import read_with_mapping

    base = (EXAMPLES / "philly-jsonl.yaml").read_text().splitlines()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "philly-2000.jsonl").write_text(
            "\n".join((EXAMPLES / "philly-2000.jsonl").read_text().splitlines()[:10]) + "\n")

        @settings(max_examples=2 * EXAMPLES_PER_SOURCE, deadline=None)
        @given(st.lists(st.tuples(st.integers(0, len(base) - 1), JUNK), min_size=1, max_size=3))
        def run(edits: list[tuple[int, str]]) -> None:
            lines = list(base)
            for i, junk in edits:
                key, sep, _ = lines[i].partition(":")
                lines[i] = f"{key}{sep} {junk}" if sep and junk.strip() else junk
            (Path(tmp) / "m.yaml").write_text("\n".join(lines) + "\n")
            with contextlib.suppress(KantError):
                read_with_mapping(Path(tmp) / "m.yaml")

        run()


def test_mutated_parquet_columns_give_input_errors() -> None:
    from kant.traces.parquet import jobs_to_arrow, read_parquet
    from kant.traces.philly import read_philly

    table = jobs_to_arrow(read_philly().take(np.arange(30)))
    columns = table.column_names
    values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**62), 2**62), st.none(),
                       st.text(max_size=5))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "j.parquet"

        @settings(max_examples=2 * EXAMPLES_PER_SOURCE, deadline=None)
        @given(st.sampled_from(columns), st.integers(0, 29), values, st.booleans())
        def run(col: str, row: int, value: Any, drop: bool) -> None:
            data = table.to_pydict()
            if drop:
                del data[col]
            else:
                data[col][row] = value
            try:
                mutated = pa.table(data)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                return  # not a table pyarrow can build: nothing to read
            pq.write_table(mutated, path)
            try:
                read_parquet(path)
                read_parquet(path, problems=Problems(skip=True))
            except KantError:
                pass

        run()
        raw = path.read_bytes() if path.exists() else b""
        for cut in (0, 4, len(raw) // 2, max(len(raw) - 4, 0)):
            path.write_bytes(raw[:cut])
            with pytest.raises(KantError):
                read_parquet(path)


def test_corrupt_gzip_is_a_kant_error(tmp_path: Path) -> None:
    from kant.traces.philly import bundled_philly_path, read_philly

    raw = bundled_philly_path().read_bytes()
    for cut in (10, len(raw) // 3):
        p = tmp_path / "philly.csv.gz"
        p.write_bytes(raw[:cut])
        with pytest.raises(KantError):
            read_philly(p)
    p.write_bytes(raw[:200] + b"\x00" * 50 + raw[250:2000])
    with pytest.raises(KantError):
        read_philly(p)


_YAML_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
_JSONL_COLUMNS = ["job_id", "submitted_ms", "runtime_ms", "gpu_count", "virtual_cluster", "missing"]
_FIELDS = ["name", "submit", "duration", "end", "start", "gpus", "workers", "gpus_per_worker", "gpu_milli",
           "gpu_fraction", "cpu", "memory", "gpu_type", "priority", "tenant", "user", "estimate", "kind", "time",
           "rate", "cv", "stream", "input_tokens", "output_tokens", "count", "leaf", "spine"]


def test_random_mappings_give_only_kant_errors() -> None:
    """Random but plausible mapping files over the example data: any mix of kinds, fields, units,
    defaults and value maps ends in a result or a KantError."""
    import yaml

    from kant.traces.mapped import read_with_mapping
    from kant.traces.mapping import FIELDS as FIELDS_BY_KIND

    required = {"jobs": ["submit", "duration"], "nodes": ["gpus", "gpu_type"], "requests": ["time"],
                "rate": ["time", "rate"]}
    scalar = st.one_of(st.integers(-(10**20), 10**20), st.floats(), st.text(max_size=6), st.booleans(),
                       st.sampled_from([0, 1, 8, 1000, "A100", "training", "inference"]))

    @st.composite
    def mappings(draw: st.DrawFn) -> dict[str, Any]:
        kind = draw(st.sampled_from(sorted(required)))
        allowed = list(FIELDS_BY_KIND[kind])
        fields = set(required[kind]) | set(draw(st.lists(st.sampled_from(allowed), max_size=5)))
        if kind == "jobs" and "gpus" in fields:
            fields -= {"workers", "gpus_per_worker"}
        if kind == "jobs" and draw(st.booleans()):
            fields = (fields - {"duration"}) | {"end"}
        columns = {f: draw(st.sampled_from(_JSONL_COLUMNS[:-1] if draw(st.integers(0, 9)) else _JSONL_COLUMNS))
                   for f in sorted(fields)}
        doc: dict[str, Any] = {"kind": kind, "file": "d.jsonl", "columns": columns}
        doc["units"] = draw(st.fixed_dictionaries({}, optional={
            "time": st.sampled_from(["s", "ms", "us", "h", "datetime", "%Y-%m-%d"]),
            "duration": st.sampled_from(["s", "ms", "min", "d"]),
            "memory": st.sampled_from(["gib", "mb", "bytes"]),
            "cpu": st.sampled_from(["cores", "milli"])}))
        doc["defaults"] = draw(st.dictionaries(st.sampled_from(allowed), scalar, max_size=3))
        doc["values"] = draw(st.dictionaries(st.sampled_from(allowed), st.dictionaries(
            st.sampled_from(["11cb48", "6214e9", "1", "8", "x"]), scalar, max_size=3), max_size=2))
        doc.update(draw(st.fixed_dictionaries({}, optional={
            "time_origin": st.one_of(st.sampled_from(["first", "zero", "2017-10-01", "later"]), st.floats()),
            "epoch": st.booleans(),
            "max_gpus_per_worker": st.integers(-2, 2000),
            "window": st.floats(),
            "topology": st.fixed_dictionaries({"nodes_per_leaf": st.integers(-1, 50)}),
            "gpu_types": st.lists(st.sampled_from(["A100", "V100", ""]), max_size=2),
            "gpu_nodes_only": st.booleans(),
        })))
        if draw(st.integers(0, 9)) == 0:
            doc[draw(st.sampled_from(["format", "header", "delimiter", "column_names"]))] = draw(_YAML_VALUES)
        return doc

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "d.jsonl").write_text(
            "\n".join((EXAMPLES / "philly-2000.jsonl").read_text().splitlines()[:15]) + "\n")

        @settings(max_examples=3 * EXAMPLES_PER_SOURCE, deadline=None)
        @given(mappings())
        def run(doc: dict[str, Any]) -> None:
            (Path(tmp) / "m.yaml").write_text(yaml.safe_dump(doc))
            try:
                read_with_mapping(Path(tmp) / "m.yaml", problems=Problems(skip=True))
                read_with_mapping(Path(tmp) / "m.yaml")
            except KantError:
                pass

        run()
