"""Outputs of the FGD experiment: CSV tables, one JSON file, PNG figures and an HTML page.

Files written by :func:`write_outputs` into the output folder:

* ``fgd_runs.csv``: one row per (pod list, policy, seed) with the measures of
  :func:`~kant.experiments.fgd.run.summarize_run`;
* ``fgd_summary.csv``: mean and sample sd over seeds per (pod list, policy);
* ``fgd_curves.csv``: allocated GPU % at every integer arrived % (mean, sd over seeds), and the
  same in GPUs (arrived GPUs, mean allocated GPUs, fractions included);
* ``fgd_reduction.csv``: FGD's relative reduction of the unallocated GPU share vs each policy;
* ``fgd.json``: the run configuration and all of the above;
* ``fgd_<pods>.png``: unallocated GPU % vs arrived workload % for every policy (one per pod list);
* ``fgd_unalloc_bars.png``: unallocated GPU % at 100 % arrived, every pod list and policy;
* ``fgd_report.html``: the tables and figures on one page.
"""

from __future__ import annotations

import csv
import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kant.experiments.fgd.run import SUMMARY_METRICS, RunResult, aggregate, summarize_run

__all__ = ["format_table_rows", "write_outputs"]

RUN_COLUMNS = (
    "pods", "policy", "seed", "arrivals", "list_pods", "sampled_pods", "placed_pods", "failed_pods",
    "never_fit_pods", "first_fail_arrival", "first_fail_arrived_pct", "first_fail_alloc_pct",
    "first_fail_unalloc_pct", "alloc_at_100_pct", "unalloc_at_100_pct", "arrived_end_pct", "alloc_end_pct",
    "unalloc_end_pct", "failed_gpu_pct", "capacity_gpus", "arrived_end_gpus", "alloc_end_gpus", "time_s",
)  # fmt: skip


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    return v


def _fmt(v: Any, digits: int = 2) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.{digits}f}"
    return str(v)


def _write_csv(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        for r in rows:
            w.writerow([_fmt(r.get(c, ""), 4) for c in columns])


def format_table_rows(agg: dict[str, Any], pods: str) -> list[list[str]]:
    """Rows ``[policy, first-failure arrived %, unalloc % at first failure, unalloc % at 100 %,
    unalloc % at end, failed pods, time s]`` as ``mean ± sd`` strings, for one pod list."""
    out = []
    for r in agg["rows"]:
        if r["pods"] != pods:
            continue
        cells = [r["policy"]]
        for key in ("first_fail_arrived_pct", "first_fail_unalloc_pct", "unalloc_at_100_pct", "unalloc_end_pct",
                    "failed_pods", "time_s"):
            m, s = r[f"{key}_mean"], r[f"{key}_sd"]
            digits = 0 if key == "failed_pods" else 2
            cells.append("n/a" if math.isnan(m) else f"{m:.{digits}f} ± {s:.{digits}f}")
        out.append(cells)
    return out


TABLE_HEAD = ("policy", "arrived % at 1st failure", "unalloc. GPU % at 1st failure", "unalloc. GPU % at 100% arrived",
              "unalloc. GPU % at end", "failed pods", "time (s)")


def _plot_curves(path: Path, pods: str, curves: Sequence[dict[str, Any]], policies: Sequence[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, zoom in zip(axes, (False, True), strict=True):
        top = 0
        for policy in policies:
            pts = [c for c in curves if c["pods"] == pods and c["policy"] == policy]
            if not pts:
                continue
            x = np.array([c["arrived_pct"] for c in pts], dtype=float)
            m = 100.0 - np.array([c["alloc_pct_mean"] for c in pts])
            s = np.array([c["alloc_pct_sd"] for c in pts])
            top = max(top, int(x.max()))
            (line,) = ax.plot(x, m, label=policy, lw=1.6)
            ax.fill_between(x, m - s, m + s, color=line.get_color(), alpha=0.2, lw=0)
        xs = np.arange(0, max(top, 100) + 1)
        ax.plot(xs, 100.0 - np.minimum(xs, 100), ":", color="grey", label="ideal")
        ax.set_xlabel("arrived workload (% of cluster GPU capacity)")
        ax.set_ylabel("unallocated GPUs (% of capacity)")
        ax.grid(alpha=0.4, ls="-.")
        if zoom:
            ax.set_xlim(75, max(top, 101))
            ax.set_ylim(0, 25)
            ax.set_title(f"{pods}: zoom")
        else:
            ax.set_title(f"{pods}: unallocated GPUs as pods arrive (mean ± sd)")
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_bars(path: Path, agg: dict[str, Any], pods_list: Sequence[str], policies: Sequence[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    by = {(r["pods"], r["policy"]): r for r in agg["rows"]}
    width = 0.8 / max(len(policies), 1)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.9 * len(pods_list) + 3), 4.2))
    xs = np.arange(len(pods_list))
    for i, policy in enumerate(policies):
        m = [by[(p, policy)]["unalloc_at_100_pct_mean"] if (p, policy) in by else math.nan for p in pods_list]
        s = [by[(p, policy)]["unalloc_at_100_pct_sd"] if (p, policy) in by else math.nan for p in pods_list]
        ax.bar(xs + (i - (len(policies) - 1) / 2) * width, m, width, yerr=s, label=policy, capsize=2)
    ax.set_xticks(xs, pods_list, rotation=45, ha="right")
    ax.set_ylabel("unallocated GPUs at 100% arrived (%)")
    ax.grid(alpha=0.4, ls="-.", axis="y")
    ax.legend(ncol=min(len(policies), 7), fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(out_dir: Path, results: Sequence[RunResult], config: dict[str, Any]) -> dict[str, Any]:
    """Write every output file; returns the aggregate (rows, curves, reduction)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [summarize_run(r) for r in results]
    agg = aggregate(results)
    pods_list = list(dict.fromkeys(r.pods for r in results))
    policies = list(dict.fromkeys(r.policy for r in results))

    _write_csv(out_dir / "fgd_runs.csv", runs, RUN_COLUMNS)
    sum_cols = ["pods", "policy", "seeds", "never_fit_pods"]
    for key, _ in SUMMARY_METRICS:
        sum_cols += [f"{key}_mean", f"{key}_sd"]
    _write_csv(out_dir / "fgd_summary.csv", agg["rows"], sum_cols)
    _write_csv(out_dir / "fgd_curves.csv", agg["curves"],
               ["pods", "policy", "arrived_pct", "alloc_pct_mean", "alloc_pct_sd", "arrived_gpus", "alloc_gpus_mean"])
    _write_csv(out_dir / "fgd_reduction.csv", agg["reduction"],
               ["pods", "baseline", "measure", "fgd", "baseline_value", "reduction_pct"])
    doc = {"config": config, "summary": agg["rows"], "reduction": agg["reduction"], "runs": runs,
           "curves": agg["curves"]}
    (out_dir / "fgd.json").write_text(json.dumps(_clean(doc), indent=1, allow_nan=False) + "\n", encoding="utf-8")

    images = []
    for pods in pods_list:
        name = f"fgd_{pods}.png"
        _plot_curves(out_dir / name, pods, agg["curves"], policies)
        images.append(name)
    _plot_bars(out_dir / "fgd_unalloc_bars.png", agg, pods_list, policies)

    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>kant: FGD experiment</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#eee}"
        "td:first-child{text-align:left}code{background:#f4f4f4}</style></head><body>",
        "<h1>FGD experiment (Weng et al., ATC'23) on openb</h1>",
        "<p>Configuration: <code>" + html.escape(json.dumps(_clean(config))) + "</code></p>",
        "<p>Unallocated GPU share = (capacity - allocated) / capacity, in % of the cluster's GPUs; "
        "mean ± sd over seeds. <i>1st failure</i>: the first arriving pod that fits no node.</p>",
        "<h2>Unallocated GPUs at 100% arrived</h2><img src='fgd_unalloc_bars.png' style='max-width:100%'>",
    ]
    for pods, img in zip(pods_list, images, strict=True):
        parts.append(f"<h2>{html.escape(pods)}</h2><table><tr>"
                     + "".join(f"<th>{html.escape(h)}</th>" for h in TABLE_HEAD) + "</tr>")
        for row in format_table_rows(agg, pods):
            parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
        parts.append(f"</table><img src='{img}' style='max-width:100%'>")
        red = [r for r in agg["reduction"] if r["pods"] == pods and r["measure"] == "unalloc_at_100_pct"]
        if red:
            parts.append("<p>FGD's reduction of unallocated GPUs at 100% arrived: "
                         + ", ".join(f"vs {html.escape(r['baseline'])} {_fmt(r['reduction_pct'], 1)}%" for r in red)
                         + "</p>")
    parts.append("</body></html>")
    (out_dir / "fgd_report.html").write_text("\n".join(parts), encoding="utf-8")
    return agg
