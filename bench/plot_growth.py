"""Plot how replay time and peak memory grow with jobs and with GPUs (docs/img/growth.png).

    python bench/plot_growth.py [--input bench/results/scale_growth.json] [--output docs/img/growth.png]

Reads the growth series written by ``python bench/bench_scale.py --growth``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", default=str(HERE / "results" / "scale_growth.json"))
    ap.add_argument("--output", default=str(HERE.parent / "docs" / "img" / "growth.png"))
    args = ap.parse_args()
    data = json.loads(Path(args.input).read_text())
    rows = data["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, series, x_key, x_label, fixed in (
        (axes[0], "jobs", "jobs", "jobs in the trace (80,000 GPUs)", "80,000 GPUs"),
        (axes[1], "gpus", "gpus", "GPUs in the cluster (100,000 jobs)", "100,000 jobs"),
    ):
        pts = sorted((r for r in rows if r["series"] == series), key=lambda r: r[x_key])
        xs = [r[x_key] for r in pts]
        ax.plot(xs, [r["cpu_s"] for r in pts], "o-", color="tab:blue", label="CPU time, s")
        ax.plot(xs, [r["wall_s"] for r in pts], "s--", color="tab:cyan", label="wall time, s")
        ax.set_xscale("log")
        if series == "jobs":
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0, top=max(r["wall_s"] for r in pts) * 1.3)
        ax.set_xlabel(x_label)
        ax.set_ylabel("seconds (load included)")
        ax2 = ax.twinx()
        ax2.plot(xs, [r["peak_mib"] for r in pts], "^:", color="tab:red", label="peak RSS, MiB")
        ax2.set_ylabel("peak RSS, MiB", color="tab:red")
        ax2.set_ylim(bottom=0)
        lines = ax.get_lines() + ax2.get_lines()
        ax.legend(lines, [ln.get_label() for ln in lines], loc="upper left", fontsize=8)
        ax.set_title(f"{data['policy']}: growth with {series} ({fixed})", fontsize=9)
        for r in pts:
            ax.annotate(f"{r['cpu_s']:.1f}", (r[x_key], r["cpu_s"]), textcoords="offset points", xytext=(4, -10),
                        fontsize=7)
    fig.tight_layout()
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
