"""The HTML report of a study: each headline metric against each swept parameter, one line per policy
(the mean over seeds and over the other swept parameters), a band from the lowest to the highest of
those runs; the runs that failed with their errors. One self-contained file, plots drawn with matplotlib
like the run and comparison reports."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from kant.metrics.columns import COMPARED
from kant.metrics.html import new_figure, page, png, table, write_page
from kant.sweep.study import Study

__all__ = ["write_study_html"]

_NCOLS = 4


def _label(value: Any) -> str:
    return "none" if value is None or value == "" else str(value)


def _numeric(values: Sequence[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _figure(rows: list[dict[str, Any]], param: str, policies: list[str]) -> str:
    """One grid of plots: every compared metric against ``param``."""
    xs: list[Any] = []
    for r in rows:
        if r[param] not in xs:
            xs.append(r[param])
    numeric = _numeric(xs)
    if numeric:
        xs.sort()
    pos = {x: (float(x) if numeric else float(i)) for i, x in enumerate(xs)}
    nrows = math.ceil(len(COMPARED) / _NCOLS)
    fig = new_figure(12.0, 2.8 * nrows)
    axes = fig.subplots(nrows, _NCOLS, squeeze=False)
    for k, (title, key) in enumerate(COMPARED):
        ax = axes[k // _NCOLS][k % _NCOLS]
        for policy in policies:
            mid: list[float] = []
            lo: list[float] = []
            hi: list[float] = []
            at: list[float] = []
            for x in xs:
                vals = [float(r[key]) for r in rows if r["policy"] == policy and r[param] == x
                        and r.get(key) is not None]
                if vals:
                    at.append(pos[x])
                    mid.append(sum(vals) / len(vals))
                    lo.append(min(vals))
                    hi.append(max(vals))
            if at:
                (line,) = ax.plot(at, mid, marker="o", markersize=3, linewidth=1.0, label=policy)
                ax.fill_between(at, lo, hi, alpha=0.2, color=line.get_color(), linewidth=0)
        ax.set_title(title, fontsize="medium")
        if not numeric:
            ax.set_xticks([pos[x] for x in xs], [_label(x) for x in xs], rotation=30, ha="right", fontsize="small")
        ax.set_xlabel(param, fontsize="small")
        ax.grid(alpha=0.3)
    for k in range(len(COMPARED), nrows * _NCOLS):
        axes[k // _NCOLS][k % _NCOLS].set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)), fontsize="small")
    return png(fig)


def write_study_html(path: Path, study: Study, results: pa.Table) -> Path:
    """Write the study report for the ``results`` table (see :func:`kant.sweep.results.results_table`)."""
    rows = results.to_pylist()
    ok = [r for r in rows if r["status"] == "done"]
    policies = [p.label for p in study.policies]
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("done", "failed", "not run")}
    body = [
        f"<p>{html.escape(study.description)}</p>" if study.description else "",
        f"<p>{len(rows):,} runs from {html.escape(study.source)}: {counts['done']:,} done, "
        f"{counts['failed']:,} failed, {counts['not run']:,} not run. Seeds: "
        f"{', '.join(str(s) for s in study.seeds)}.</p>",
        '<p class="note">Lines: the mean over seeds (and over the other swept parameters); bands: the lowest '
        "to the highest of those runs. Every metric of every run is in results.parquet.</p>",
    ]
    params = list(study.swept()) or ["policy"]
    for param in params:
        body.append(f"<h2>Metrics against {html.escape(param)}</h2>")
        body.append(_figure(ok, param, policies) if ok else "<p>No run finished.</p>")
    headline = [key for _, key in COMPARED]
    summary: list[list[str]] = []
    for r in ok:
        summary.append([r["policy"], *(_label(r[p]) for p in params if p != "policy"), str(r["seed"]),
                        *("n/a" if r.get(k) is None else f"{float(r[k]):.4g}" for k in headline)])
    body.append("<h2>Runs</h2>")
    body.append(table(["policy", *(p for p in params if p != "policy"), "seed", *(t for t, _ in COMPARED)],
                       summary))
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        body.append("<h2>Failed runs</h2>")
        body.append(table(["policy", "trace", "cluster", "seed", "error"],
                           [[r["policy"], r["trace"], r["cluster"], str(r["seed"]), r["error"] or ""]
                            for r in failed]))
    return write_page(path, page(f"kant study: {study.name}", body))
