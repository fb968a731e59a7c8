"""Every speed target of docs/performance.md in one table.

    python bench/bench_all.py [--runs 3] [--growth]       # run every bench, then print the table
    python bench/bench_all.py --table                     # only print the table from bench/results/*.json

Runs, each in its own process (pin the whole thing to one core: ``taskset -c 1 python
bench/bench_all.py``): bench_philly.py (full Philly replay, Kant policy), bench_scale.py (1,000,000
synthetic jobs on 10,000 nodes; with ``--growth`` also the growth series), bench_cycle.py (one cycle,
10,000 pending, 1,000 gangs placed on 80,000 GPUs), bench_fgd.py (the FGD experiment on openb, each
policy). Each writes its JSON under bench/results/; this script then prints one row per target:
figure, measured value, target, ratio = value / target (<= 1 meets it), and writes
bench/results/all.json. Figures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RESULTS = HERE / "results"


def run(script: str, *args: str) -> None:
    print(f"$ python bench/{script} {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, str(HERE / script), *args], check=True)


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def table() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def add(figure: str, value: float, target: float, unit: str) -> None:
        rows.append({"figure": figure, "value": value, "target": target, "unit": unit,
                     "ratio": round(value / target, 2), "met": value <= target})

    philly = load("philly.json")
    if philly:
        for r in philly["rows"]:
            if r["policy"] == "kant":
                add("Philly replay, Kant policy, wall (load incl.)", r["wall_s"], philly["target_s"], "s")
                add("Philly replay, Kant policy, CPU (load incl.)", r["cpu_s"], philly["target_s"], "s")
    scale = load("scale.json")
    if scale:
        for r in scale["rows"]:
            add(f"1M jobs / 80k GPUs, {r['policy']}, wall", r["wall_s"], scale["target_s"], "s")
            add(f"1M jobs / 80k GPUs, {r['policy']}, CPU", r["cpu_s"], scale["target_s"], "s")
            add(f"1M jobs / 80k GPUs, {r['policy']}, peak RSS", r["peak_mib"], scale["target_mib"], "MiB")
    cycle = load("cycle.json")
    if cycle:
        for r in cycle["rows"]:
            add(f"one cycle, 1,000 gangs / 10k pending, {r['policy']}", r["cycle_s"], cycle["target_s"], "s")
    fgd = load("fgd.json")
    if fgd:
        for r in fgd["rows"]:
            add(f"FGD openb, {r['policy']}, wall", r["wall_s"], fgd["target_s"], "s")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--growth", action="store_true", help="also the growth series of bench_scale.py")
    ap.add_argument("--table", action="store_true", help="print the table from the existing JSON files")
    args = ap.parse_args()
    if not args.table:
        runs = str(args.runs)
        run("bench_philly.py", "--runs", runs)
        run("bench_scale.py", "--runs", runs, *(["--growth"] if args.growth else []))
        run("bench_cycle.py", "--runs", str(max(args.runs, 5)))
        run("bench_fgd.py", "--runs", runs)
    rows = table()
    print(f"\nAll targets ({platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"loadavg {os.getloadavg()[0]:.2f})")
    print(f"{'figure':<56}{'value':>10}{'target':>9}{'ratio':>7}  met")
    for r in rows:
        print(f"{r['figure']:<56}{r['value']:>10}{r['target']:>9g}{r['ratio']:>7.2f}  {'yes' if r['met'] else 'NO'}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "all.json").write_text(json.dumps({"machine": platform.platform(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
