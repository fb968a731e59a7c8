"""Benchmark: how long each named trace takes to read (median of several runs).

    python bench/bench_read_traces.py [--repeat 5] [--all-variants] [NAME ...]

Prints a table (rows, median and best seconds, rows per second) and writes the figures as JSON to
``bench/results/read_traces.json``. Each trace is read once untimed first, so file caches are warm
and imports are done; the figures are for parsing, validating and building the table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kant.model.cluster import Cluster  # noqa: E402
from kant.traces.registry import list_traces, load_any  # noqa: E402


def _rows(obj: Any) -> int:
    return obj.n_nodes if isinstance(obj, Cluster) else len(obj)


def bench(name: str, repeat: int) -> dict[str, Any]:
    """Read ``name`` once to warm up, then ``repeat`` timed times."""
    def read() -> Any:
        return load_any(name)
    obj = read()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        read()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {"name": name, "rows": _rows(obj), "median_s": med, "best_s": min(times),
            "rows_per_s": _rows(obj) / med if med > 0 else None, "runs": repeat}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="trace names (default: every base name)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per trace (default 5)")
    parser.add_argument("--all-variants", action="store_true", help="also every :variant")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "read_traces.json")
    args = parser.parse_args(argv)
    names = args.names or [e.name for e in list_traces(variants=args.all_variants)
                           if (e.location() is not None and e.location().exists())]  # type: ignore[union-attr]
    results = [bench(n, args.repeat) for n in names]
    table = Table(title=f"trace read times (median of {args.repeat} runs)", title_justify="left")
    for col, justify in (("trace", "left"), ("rows", "right"), ("median s", "right"), ("best s", "right"),
                         ("rows/s", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in results:
        table.add_row(r["name"], f"{r['rows']:,}", f"{r['median_s']:.3f}", f"{r['best_s']:.3f}",
                      f"{r['rows_per_s']:,.0f}" if r["rows_per_s"] else "-")
    Console().print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"python": platform.python_version(), "machine": platform.machine(),
                                    "results": results}, indent=2) + "\n", encoding="utf-8")
    Console(stderr=True).print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
