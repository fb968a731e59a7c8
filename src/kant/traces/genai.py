"""Readers for the Alibaba GenAI (Stable Diffusion + LoRA) serving dataset (cluster-trace-v2026-GenAI).

* ``lora_request_trace.csv.gz`` -> a request :class:`~kant.traces.load.LoadSeries`
  (:func:`read_genai_requests`). Kept: arrival (``gmt_create``, read as UTC; origin = first request,
  kept as ``origin_epoch``), measured service time (``exec_time_seconds`` -> ``duration``), prompt
  size (``prompt_length`` -> ``input_tokens``, as the trace counts it; empty = -1, unknown) and the
  base model (``checkpoint_model_version_id``) as the stream, since each model is a separately
  placed service (``unknown`` for the 25 PENDING requests of the shipped file that name none).
  Dropped: ``predict_status`` (the outcome; an arrival is load whatever happened to it),
  ``predict_type``, ``num_inference_steps``, ``num_images_per_prompt``, ``num_lora``,
  ``negative_prompt_length`` (they shape the service time, which ``duration`` already measures)
  and ``groupId`` (an anonymous customer group; kant's load has no tenant).
* ``qps.csv.gz`` -> a rate :class:`~kant.traces.load.LoadSeries` (:func:`read_genai_qps`):
  ``timestamp_anon,value,container_ip,request_type``. The samples of all containers at the same
  timestamp are summed per ``request_type`` (the stream), because the service's load is the sum
  over its containers and which container served it is the scheduler's business; so
  ``container_ip`` is dropped. ``window`` is the sampling period (the most common gap, 57 s in the
  shipped file); a missing sample means no traffic. ``value`` is the trace's *scaled* QPS, kept
  as is. Timestamps are anonymised, so ``origin_epoch`` is None.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np

from kant.errors import InputError
from kant.traces._csv import Problems
from kant.traces.columns import float_column, int_column, text_column, time_column
from kant.traces.load import LoadSeries
from kant.traces.raw import read_raw
from kant.traces.schema import build_load_series, encode

__all__ = ["GENAI_QPS_COLUMNS", "GENAI_REQUEST_COLUMNS", "read_genai_qps", "read_genai_requests"]

GENAI_REQUEST_COLUMNS = ("gmt_create", "exec_time_seconds", "prompt_length", "checkpoint_model_version_id")
GENAI_QPS_COLUMNS = ("timestamp_anon", "value", "request_type")


def read_genai_requests(path: str | Path, *, problems: Problems | None = None) -> LoadSeries:
    """Read ``lora_request_trace.csv`` into a request :class:`LoadSeries` (see the module docstring)."""
    p = Path(path)
    raw = read_raw(p)
    raw.require(GENAI_REQUEST_COLUMNS)
    check = raw.check(problems)
    t = time_column(raw, check, "gmt_create", unit="datetime")
    dur = float_column(raw, check, "exec_time_seconds", minimum=0, default=math.nan)
    prompt = int_column(raw, check, "prompt_length", minimum=0, default=-1)
    model = [m or "unknown" for m in text_column(raw, "checkpoint_model_version_id")]
    keep = check.finish()
    rows = np.flatnonzero(keep)
    if not rows.size:
        raise InputError(str(p), "no valid request rows")
    origin = float(t[rows].min())
    return build_load_series(
        kind="requests",
        time=t[rows] - origin,
        stream=np.asarray(model, dtype=object)[rows],
        input_tokens=prompt[rows],
        duration=dur[rows],
        source=str(p),
        origin_epoch=origin,
    )


def read_genai_qps(path: str | Path, *, problems: Problems | None = None) -> LoadSeries:
    """Read ``qps.csv`` into a rate :class:`LoadSeries`, summed over containers (see the module docstring)."""
    p = Path(path)
    raw = read_raw(p)
    raw.require(GENAI_QPS_COLUMNS)
    check = raw.check(problems)
    t = float_column(raw, check, "timestamp_anon", minimum=0)
    value = float_column(raw, check, "value", minimum=0)
    rtype = text_column(raw, "request_type")
    check.flag(np.array([not r for r in rtype], dtype=bool), "request_type", "empty request type",
               raw.columns["request_type"])
    keep = check.finish()
    rows = np.flatnonzero(keep)
    if not rows.size:
        raise InputError(str(p), "no valid QPS rows")
    streams = encode(np.asarray(rtype, dtype=object)[rows])
    times = t[rows]
    # sum the containers' samples per (stream, timestamp)
    key_t, inverse = np.unique(np.stack([streams.codes.astype(np.float64), times]), axis=1, return_inverse=True)
    summed = np.bincount(inverse.ravel(), weights=value[rows], minlength=key_t.shape[1])
    codes = key_t[0].astype(np.int64)
    stamps = key_t[1]
    gaps: Counter[float] = Counter()
    for c in range(len(streams.names)):
        s = np.sort(stamps[codes == c])
        gaps.update(np.diff(s)[np.diff(s) > 0].tolist())
    window = float(gaps.most_common(1)[0][0]) if gaps else 0.0
    origin = float(stamps.min())
    from kant.traces.schema import Coded

    return build_load_series(
        kind="rate",
        time=stamps - origin,
        rate=summed,
        stream=Coded(codes, streams.names),
        window=window,
        source=str(p),
        origin_epoch=None,
    )
