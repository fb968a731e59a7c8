"""Whole-process cost of ``kant simulate``: CPU (user + sys), wall and peak memory of the command as a
user runs it, start-up, trace loading, simulation, summary and report included.

    python bench/bench_cli.py [--before REV] [--runs 1] [--case defaults --case 1000-jobs ...] [--core 1]

Each case is one ``kant simulate ...`` process timed by ``/usr/bin/time`` and pinned to one core
(``taskset -c 1``; ``--core N`` for another). Cases: ``defaults`` (the README's ``kant simulate``: the
default trace, cluster and policy, report included), ``philly`` (the same on the ``philly`` cluster,
for a before/after on the same work when the default cluster changed), ``no-report``
(``--no-report``), ``1000-jobs`` (``--limit 1000``) and ``start-up`` (``kant --version``: imports
only).

With ``--before REV`` every case also runs on that commit, checked out aside with ``git worktree
add --detach`` and run with ``PYTHONPATH=<worktree>/src`` by the same interpreter, alternating
before / after run by run (one batch, so machine noise hits both alike). A case that fails on a tree
(``--no-report`` before the option existed) is shown as ``n/a``.

``--phases`` also splits one process of the current tree into its phases (CPU time of each, in one
process pinned to one core, as ``kant simulate`` runs them): imports, policy, cluster, trace, the
simulation, the summary and each file written; for the defaults and for ``--limit 1000``.

Bytecode: an installed kant has its modules compiled (``pip install`` writes the ``.pyc`` files), so
by default each tree is compiled once beside its sources (``compileall``, into the git-ignored
``__pycache__`` folders) before the timed runs, which read them (``PYTHONDONTWRITEBYTECODE`` unset).
``--no-bytecode`` times the processes as an editable install run with ``PYTHONDONTWRITEBYTECODE=1``
(this project's sandboxes) does: every kant module compiled from source at every start, about 0.2 s
more (the figures of the first round of this work were taken that way).

Prints one table (median of ``--runs``) and writes bench/results/cli.json. Figures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
ROOT = HERE.parent
RESULTS = HERE / "results"
#: figures the issue asks for: seconds of CPU (user + sys)
TARGETS = {"defaults": 3.0, "1000-jobs": 0.5}
CASES: dict[str, list[str]] = {
    "defaults": ["simulate"],
    "philly": ["simulate", "--cluster", "philly"],
    "no-report": ["simulate", "--no-report"],
    "1000-jobs": ["simulate", "--limit", "1000"],
    "start-up": ["--version"],
}
_FMT = "%U %S %e %M"  # user s, sys s, wall s, peak RSS KiB


def tree_env(src: Path, bytecode: bool, empty: Path | None = None) -> dict[str, str]:
    """The environment of a ``kant`` process on the tree ``src``: reading the compiled modules beside
    the sources (``bytecode``), or compiling every module at start (``PYTHONDONTWRITEBYTECODE=1`` and
    the bytecode looked up under ``empty``, an empty folder, so compiled files beside the sources are
    not read either)."""
    env = dict(os.environ, PYTHONPATH=str(src), COLUMNS="100")
    env.pop("PYTHONPYCACHEPREFIX", None)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        if empty is not None:
            env["PYTHONPYCACHEPREFIX"] = str(empty)
    return env


def compile_tree(src: Path) -> None:
    """Compile every module of ``src`` beside its sources (what ``pip install`` does for a user)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], env=tree_env(src, True), check=True,
                   capture_output=True)


def run_case(args: list[str], src: Path, out_dir: Path, bytecode: bool = True,
             empty: Path | None = None, core: int = 1) -> dict[str, Any]:
    """One ``kant`` process on the tree whose sources are ``src``, pinned to ``core``; its /usr/bin/time
    figures."""
    env = tree_env(src, bytecode, empty)
    extra = ["--out", str(out_dir)] if args[0] == "simulate" else []
    code = "import sys; from kant.cli.main import main; sys.exit(main())"
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        cmd = ["/usr/bin/time", "-o", tf.name, "-f", _FMT, "taskset", "-c", str(core), sys.executable, "-c", code,
               *args, *extra]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        fields = tf.read().strip().splitlines()[-1].split()
    if proc.returncode != 0:
        return {"exit": proc.returncode, "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    user, sys_s, wall, rss = float(fields[0]), float(fields[1]), float(fields[2]), int(fields[3])
    return {"exit": 0, "user_s": user, "sys_s": sys_s, "cpu_s": round(user + sys_s, 2), "wall_s": wall,
            "peak_mib": round(rss / 1024, 1)}


def phases(limit: int | None, cluster: str) -> list[tuple[str, float]]:
    """CPU seconds of each phase of one ``kant simulate`` run in this process (the CLI's own steps)."""
    laps: list[tuple[str, float]] = []
    last = time.process_time()

    def lap(name: str) -> None:
        nonlocal last
        now = time.process_time()
        laps.append((name, round(now - last, 3)))
        last = now

    import kant.cli.main  # noqa: F401  (what the `kant` command imports before it runs)

    lap("import kant.cli.main")
    # a run loads its modules and inputs with the garbage collector off (kant.runs.loading)
    from kant.runs import loading

    with loading():
        from kant.config import load_policy
        from kant.metrics.summary import summarize
        from kant.sim import Simulator
        from kant.traces import Problems
        from kant.traces.registry import load_nodes, load_trace

        lap("import config, sim, traces")
        policy = load_policy("kant")
        lap("load the policy")
        nodes = load_nodes(cluster)
        lap("build the cluster")
        jobs = load_trace("philly", problems=Problems(skip=False), limit=limit)  # as `kant simulate` reads it
        lap("read the Philly trace")
    result = Simulator(nodes, jobs, policy).run()
    lap("simulate")
    metrics = summarize(result)
    lap("summarize")
    from kant.metrics.report import write_html, write_json

    out = Path(tempfile.mkdtemp(prefix="kant-bench-phases-"))
    write_json(out / "result.json", result, metrics)
    lap("result.json")
    write_html(out / "report.html", result, metrics)
    lap("report.html")
    try:
        from kant.metrics.jobs import write_jobs
    except ImportError:  # a tree before per-job results
        pass
    else:
        write_jobs(out / "jobs.parquet", result)
        lap("jobs.parquet")
    shutil.rmtree(out, ignore_errors=True)
    return laps


def run_phases(limit: int | None, cluster: str, bytecode: bool, empty: Path, core: int = 1) -> list[tuple[str, float]]:
    """:func:`phases` in a fresh interpreter pinned to ``core``."""
    cmd = ["taskset", "-c", str(core), sys.executable, __file__, "--phases-one", str(limit or 0), cluster]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env=tree_env(ROOT / "src", bytecode, empty)).stdout
    return [(name, float(v)) for name, v in json.loads(out.strip().splitlines()[-1])]


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    if any(r["exit"] != 0 for r in runs):
        return runs[0]
    row: dict[str, Any] = {"exit": 0}
    for k in ("user_s", "sys_s", "cpu_s", "wall_s", "peak_mib"):
        row[k] = round(statistics.median(r[k] for r in runs), 2)
    row["cpu_all_s"] = [r["cpu_s"] for r in runs]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", metavar="REV", help="also run every case on this commit (a git worktree)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="cases to run (default: all)")
    ap.add_argument("--phases", action="store_true", help="also the phases of one process (current tree)")
    ap.add_argument("--no-bytecode", action="store_true",
                    help="no bytecode cache: every kant module compiled at every start (PYTHONDONTWRITEBYTECODE=1)")
    ap.add_argument("--core", type=int, default=1, help="the core every timed process is pinned to (default 1)")
    ap.add_argument("--phases-one", nargs=2, metavar=("LIMIT", "CLUSTER"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phases_one:
        print(json.dumps(phases(int(args.phases_one[0]) or None, args.phases_one[1])))
        return
    cases = args.case or list(CASES)
    trees: list[tuple[str, Path]] = [("after", ROOT / "src")]
    work = Path(tempfile.mkdtemp(prefix="kant-bench-cli-"))
    worktree = work / "before"
    try:
        if args.before:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), args.before],
                           check=True, capture_output=True)
            trees.insert(0, (f"before ({args.before})", worktree / "src"))
        empty = work / "no-bytecode"
        empty.mkdir()
        if not args.no_bytecode:
            for _, src in trees:
                compile_tree(src)
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for _ in range(args.runs):
            for case in cases:
                for name, src in trees:
                    r = run_case(CASES[case], src, work / "out", not args.no_bytecode, empty, args.core)
                    runs.setdefault((case, name), []).append(r)
                    shown = r.get("cpu_s", f"exit {r['exit']}")
                    print(f"  {case} / {name}: {shown}", file=sys.stderr, flush=True)
    finally:
        if args.before and worktree.exists():
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], check=False,
                           capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    rows = [{"case": case, "tree": name, **median_row(runs[(case, name)])} for case in cases for name, _ in trees]
    print(f"kant simulate, whole process, taskset -c {args.core}, median of {args.runs} run(s); Python "
          f"{platform.python_version()}, {'no bytecode cache' if args.no_bytecode else 'bytecode compiled'}, "
          f"loadavg {os.getloadavg()[0]:.2f}")
    print(f"{'case':<11}{'tree':<22}{'user s':>8}{'sys s':>7}{'CPU s':>7}{'wall s':>8}{'peak MiB':>10}{'target':>8}")
    for r in rows:
        target = TARGETS.get(r["case"])
        tgt = f"{target:g}" if target else "-"
        if r["exit"] != 0:
            print(f"{r['case']:<11}{r['tree']:<22}{'n/a (exit ' + str(r['exit']) + ')':>40}")
            continue
        print(f"{r['case']:<11}{r['tree']:<22}{r['user_s']:>8.2f}{r['sys_s']:>7.2f}{r['cpu_s']:>7.2f}"
              f"{r['wall_s']:>8.2f}{r['peak_mib']:>10.1f}{tgt:>8}")
    split: dict[str, list[tuple[str, float]]] = {}
    if args.phases:
        empty = Path(tempfile.mkdtemp(prefix="kant-bench-nopyc-"))
        if not args.no_bytecode:
            compile_tree(ROOT / "src")
        try:
            split = {"defaults": run_phases(None, "philly-80", not args.no_bytecode, empty, args.core),
                     "1000-jobs": run_phases(1000, "philly-80", not args.no_bytecode, empty, args.core)}
        finally:
            shutil.rmtree(empty, ignore_errors=True)
        print(f"\nPhases of one process (current tree, CPU s, taskset -c {args.core}; "
              f"loadavg {os.getloadavg()[0]:.2f})")
        print(f"{'phase':<30}{'defaults':>10}{'1000-jobs':>11}")
        for (name, full), (_, small) in zip(split["defaults"], split["1000-jobs"], strict=True):
            print(f"{name:<30}{full:>10.3f}{small:>11.3f}")
        print(f"{'total':<30}{sum(v for _, v in split['defaults']):>10.3f}"
              f"{sum(v for _, v in split['1000-jobs']):>11.3f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cli.json").write_text(json.dumps({
        "machine": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(), "core": args.core, "runs": args.runs, "before": args.before,
        "bytecode": not args.no_bytecode,
        "targets": TARGETS, "rows": rows,
        "phases": split,
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
