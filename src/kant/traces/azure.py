"""Reader for the Azure LLM inference trace 2023 (Splitwise, ISCA'24).

``AzureLLMInferenceTrace_{code,conv}.csv``: ``TIMESTAMP,ContextTokens,GeneratedTokens``, one row
per request. Everything is kept: the arrival time (``TIMESTAMP``, UTC; the origin is the first
request, kept as ``origin_epoch``), the prompt size (``ContextTokens`` -> ``input_tokens``) and the
generated size (``GeneratedTokens`` -> ``output_tokens``). Nothing is dropped; the trace has no
service time, so ``duration`` is unknown (NaN). The stream is the workload named in the file
(``code`` or ``conv``), so both files can be combined into one series: given the folder,
:func:`read_azure` reads both into one series (streams kept apart).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kant.errors import InputError
from kant.traces._csv import Problems
from kant.traces.columns import int_column, time_column
from kant.traces.load import LoadSeries
from kant.traces.raw import read_raw
from kant.traces.schema import build_load_series

__all__ = ["AZURE_COLUMNS", "AZURE_WORKLOADS", "read_azure"]

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
#: the workloads of the trace, one file each (``AzureLLMInferenceTrace_<workload>.csv``)
AZURE_WORKLOADS = ("code", "conv")


def _stream_name(path: Path) -> str:
    stem = path.name.split(".")[0]
    return stem.rsplit("_", 1)[-1] if "_" in stem else stem


def read_azure(path: str | Path, *, stream: str | None = None, problems: Problems | None = None) -> LoadSeries:
    """Read an Azure LLM inference CSV into a request :class:`LoadSeries` sorted by arrival; given the
    trace's folder, every workload's file (:data:`AZURE_WORKLOADS`) in one series."""
    p = Path(path)
    if p.is_dir():
        parts = [read_azure(p / f"AzureLLMInferenceTrace_{w}.csv", problems=problems) for w in AZURE_WORKLOADS]
        return _concat_requests(parts, source=str(p))
    raw = read_raw(p)
    raw.require(AZURE_COLUMNS)
    check = raw.check(problems)
    t = time_column(raw, check, "TIMESTAMP", unit="datetime")
    inp = int_column(raw, check, "ContextTokens", minimum=0)
    out = int_column(raw, check, "GeneratedTokens", minimum=0)
    keep = check.finish()
    rows = np.flatnonzero(keep)
    if not rows.size:
        raise InputError(str(p), "no valid request rows")
    origin = float(t[rows].min())
    name = stream or _stream_name(p)
    return build_load_series(
        kind="requests",
        time=t[rows] - origin,
        stream=[name] * rows.size,
        input_tokens=inp[rows],
        output_tokens=out[rows],
        source=str(p),
        origin_epoch=origin,
    )


def _concat_requests(parts: list[LoadSeries], source: str) -> LoadSeries:
    """One request series from several with absolute origins (streams kept apart)."""
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
