"""Reader for the Azure LLM inference trace 2023 (Splitwise, ISCA'24).

``AzureLLMInferenceTrace_{code,conv}.csv``: ``TIMESTAMP,ContextTokens,GeneratedTokens``, one row
per request. Everything is kept: the arrival time (``TIMESTAMP``, UTC; the origin is the first
request, kept as ``origin_epoch``), the prompt size (``ContextTokens`` -> ``input_tokens``) and the
generated size (``GeneratedTokens`` -> ``output_tokens``). Nothing is dropped; the trace has no
service time, so ``duration`` is unknown (NaN). The stream is the workload named in the file
(``code`` or ``conv``), so both files can be combined into one series.
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

__all__ = ["AZURE_COLUMNS", "read_azure"]

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _stream_name(path: Path) -> str:
    stem = path.name.split(".")[0]
    return stem.rsplit("_", 1)[-1] if "_" in stem else stem


def read_azure(path: str | Path, *, stream: str | None = None, problems: Problems | None = None) -> LoadSeries:
    """Read an Azure LLM inference CSV into a request :class:`LoadSeries` sorted by arrival."""
    p = Path(path)
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
