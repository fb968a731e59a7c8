"""Readers for Alibaba ServeGen LLM-serving workload data (Model Studio; arXiv 2505.09999).

ServeGen publishes per-client *statistics*, not a request log:

* ``<model>-rates.csv.gz``: ``client_id,window_start_s,rate_rps,cv,iat_dist,iat_param1,iat_param2``,
  one row per client per 600 s window. :func:`read_servegen_rates` returns a rate
  :class:`~kant.traces.load.LoadSeries` (one stream per client, ``client-<id>``). Kept: window start
  (``time``), mean rate (``rate``, requests/s), inter-arrival CV (``cv``) and the window length
  (``window``, the most common gap between a client's window starts). Dropped: the fitted
  inter-arrival family and its two parameters (``iat_dist``, ``iat_param1/2``): the rate and the
  CV already fix the first two moments of the inter-arrival time, which is what a Gamma renewal
  process (the usual way to replay such windows) needs; a Weibull window's higher moments are lost.
* ``<model>-datasets.jsonl.gz``: one line per client with 6-hour windows of token-length
  distributions. :func:`read_servegen_tokens` returns them as arrays of (value, probability).

Times are seconds from the start of the data (no real dates: ``origin_epoch`` is None).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kant.errors import InputError
from kant.traces._csv import Problems
from kant.traces.columns import float_column, int_column
from kant.traces.load import LoadSeries
from kant.traces.raw import decode_utf8, read_bytes, read_raw
from kant.traces.schema import build_load_series

__all__ = ["SERVEGEN_RATE_COLUMNS", "TokenDistribution", "read_servegen_rates", "read_servegen_tokens"]

SERVEGEN_RATE_COLUMNS = ("client_id", "window_start_s", "rate_rps", "cv")
_PAIR = re.compile(r"(-?[0-9.eE+-]+)\s*:\s*(-?[0-9.eE+-]+)")


def read_servegen_rates(
    path: str | Path, *, window: float | None = None, problems: Problems | None = None
) -> LoadSeries:
    """Read a ServeGen ``rates.csv`` into a rate :class:`LoadSeries` (see the module docstring)."""
    p = Path(path)
    raw = read_raw(p)
    raw.require(SERVEGEN_RATE_COLUMNS)
    check = raw.check(problems)
    client = int_column(raw, check, "client_id", minimum=0)
    start = float_column(raw, check, "window_start_s", minimum=0)
    rate = float_column(raw, check, "rate_rps", minimum=0)
    cv = float_column(raw, check, "cv", minimum=0, default=float("nan"))
    keep = check.finish()
    rows = np.flatnonzero(keep)
    if not rows.size:
        raise InputError(str(p), "no valid rate rows")
    if window is None:
        window = _window(client[rows], start[rows])
    streams = np.array([f"client-{c}" for c in client[rows].tolist()], dtype=object)
    return build_load_series(
        kind="rate",
        time=start[rows],
        rate=rate[rows],
        stream=streams,
        cv=cv[rows],
        window=window,
        source=str(p),
        origin_epoch=None,
    )


def _window(client: npt.NDArray[np.int64], start: npt.NDArray[np.float64]) -> float:
    order = np.lexsort((start, client))
    c, s = client[order], start[order]
    gaps = np.diff(s)[np.diff(c) == 0]
    gaps = gaps[gaps > 0]
    if not gaps.size:
        return 0.0
    return float(Counter(gaps.tolist()).most_common(1)[0][0])


@dataclass(frozen=True)
class TokenDistribution:
    """One client's distribution of one field (e.g. ``input_tokens``) in one window."""

    client: int
    window_start: float
    field: str
    values: npt.NDArray[np.float64]
    probabilities: npt.NDArray[np.float64]

    def mean(self) -> float:
        total = float(self.probabilities.sum())
        return float(np.dot(self.values, self.probabilities) / total) if total > 0 else float("nan")


def read_servegen_tokens(
    path: str | Path,
    *,
    fields: Sequence[str] = ("input_tokens", "output_tokens"),
    problems: Problems | None = None,
) -> list[TokenDistribution]:
    """Read a ServeGen ``datasets.jsonl`` into token-length distributions (empty ones are skipped)."""
    p = Path(path)
    source = str(p)
    problems = problems if problems is not None else Problems()
    errors: list[InputError] = []
    text = decode_utf8(read_bytes(p), source, errors).decode("utf-8")
    out: list[TokenDistribution] = []
    for line_no, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        found: list[TokenDistribution] = []
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict) or not isinstance(obj.get("windows"), dict):
                raise InputError(source, "expected {\"client_id\": N, \"windows\": {...}}", line=line_no)
            client = obj.get("client_id")
            if not isinstance(client, int) or isinstance(client, bool) or client < 0:
                raise InputError(source, "client_id must be a whole number >= 0", line=line_no,
                                 column="client_id", value=client)
            for wkey, wval in obj["windows"].items():
                try:
                    wstart = float(wkey)
                except ValueError:
                    raise InputError(source, "window key is not a number", line=line_no, column="windows",
                                     value=wkey) from None
                if not isinstance(wval, dict):
                    raise InputError(source, "a window must be an object", line=line_no, column="windows")
                for fld in fields:
                    body = wval.get(fld)
                    if not isinstance(body, str):
                        continue
                    pairs = _PAIR.findall(body)
                    if not pairs:
                        continue
                    try:
                        vals = np.array([float(a) for a, _ in pairs])
                        probs = np.array([float(b) for _, b in pairs])
                    except ValueError:
                        raise InputError(source, "bad distribution entry", line=line_no, column=fld,
                                         value=body[:60]) from None
                    if (probs < 0).any() or not np.isfinite(probs).all() or not np.isfinite(vals).all():
                        raise InputError(source, "probabilities must be finite and >= 0", line=line_no, column=fld,
                                         value=body[:60])
                    found.append(TokenDistribution(client, wstart, fld, vals, probs))
            out.extend(found)
        except InputError as err:
            problems.add(err)
        except ValueError as exc:
            problems.add(InputError(source, f"not valid JSON: {str(exc).split(':')[0]}", line=line_no))
    for split_error in errors:
        problems.add(split_error)
    return out
