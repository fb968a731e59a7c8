"""Reproduce the Tiresias simulator (SymbioticLab/Tiresias, ``simulator/``) with kant, side by side.

    python bench/bench_tiresias_repro.py --jobs 10000 --schedule fifo --schedule dlas-gpu-8
    python bench/bench_tiresias_repro.py --jobs 500 --peer /tmp/tiresias --per-job 20

What one row does:

1. Converts the first ``--jobs`` Philly jobs (kant's bundled trace, submit order) to the peer's job
   CSV (``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``; whole seconds, as
   the Philly trace already is; model ``resnet50``, which the peer only uses for its network
   estimate) and writes the cluster spec: 1 switch x 64 nodes x 8 GPUs, 64 CPUs, 256 GB per node.
2. Runs the peer, unmodified, with a Python 2.7 interpreter (``--python2``; by default the first of
   ``pypy``, ``python2.7``, ``python2`` and pyenv's ``~/.pyenv/versions/2.7*`` that is Python 2;
   Debian 12 has no ``pypy`` package any more) in its own process:
   ``run_sim.py --cluster_spec=... --trace_file=... --scheme=yarn --schedule=fifo|dlas-gpu-8``.
   Its per-job results are read from the ``job.csv`` it writes. The peer imports ``numpy`` but
   does not use it; where the interpreter has none, an empty stand-in module is put on its path.
3. Runs kant in its own process on the *same* CSV files (read back with
   :func:`kant.traces.read_tiresias` and :func:`kant.traces.read_tiresias_cluster`), once with the
   bundled policy as it is (``fifo-strict`` / ``tiresias``, kant's default execution model:
   a preempted job restarts from scratch) and once with the options that reproduce the peer
   (``--peer-policy``, default ``tiresias-peer-fifo`` / ``tiresias-peer-dlas`` under
   ``bench/policies/``, and an execution model that keeps all progress at a preemption:
   ``checkpoint_interval_s: 1``, the peer's one-second time grain). The peer's 2D-LAS places
   nothing (it counts the cluster's free GPUs), so kant's run with the options sees the same GPUs
   as one pool node (``pool.csv``); the row ``options, nodes`` runs the same options on the
   64 x 8 nodes, where fragmentation makes the difference.
4. Prints per job (``--per-job N`` rows) and in aggregate: mean JCT, preemptions, makespan, the
   share of jobs whose JCT matches the peer's (within ``--match-pct`` % or ``--match-s`` seconds)
   and the CPU seconds of each whole process (``os.wait4``: user + system of the child; ``--core N``
   pins both to one core).

The peer is never vendored: ``--peer DIR`` names a checkout (the folder holding ``simulator/``, or
``simulator/`` itself); without it, it is cloned from GitHub into ``--cache`` (an offline machine
gets a one-line error saying to pass ``--peer``). ``--save-fixture DIR`` writes the converted CSVs
and the peer's per-job results (what ``tests/data/tiresias_repro`` holds).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PEER_URL = "https://github.com/SymbioticLab/Tiresias.git"
SPEC = {"num_switch": 1, "num_node_p_switch": 64, "num_gpu_p_node": 8, "num_cpu_p_node": 64, "mem_p_node": 256}
DEFAULT_POLICY = {"fifo": "fifo-strict", "dlas-gpu-8": "tiresias"}
PEER_POLICY = {
    "fifo": str(HERE / "policies" / "tiresias-peer-fifo.yaml"),
    "dlas-gpu-8": str(HERE / "policies" / "tiresias-peer-dlas.yaml"),
}
PEER_SCHEME = {"fifo": "yarn", "dlas-gpu-8": "yarn"}


class HarnessError(Exception):
    pass


# --- inputs ------------------------------------------------------------------------------------
def write_inputs(n_jobs: int, out: Path, nodes: int = 64) -> tuple[Path, Path, Path]:
    """The first ``n_jobs`` Philly jobs as the peer's job CSV, the ``nodes`` x 8 cluster spec, and
    the same GPUs as one pool node (``pool.csv``: what the peer's 2D-LAS sees, a GPU count)."""
    from kant.traces import read_philly

    jobs = read_philly(limit=n_jobs)
    out.mkdir(parents=True, exist_ok=True)
    trace, spec, pool = out / "jobs.csv", out / "cluster.csv", out / "pool.csv"
    submit = jobs.submit - (jobs.submit.min() if len(jobs) else 0.0)
    with trace.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration", "interval"])
        prev = 0
        for i in range(len(jobs)):
            s, d = round(float(submit[i])), max(1, round(float(jobs.duration[i])))
            # job_id: the row (the peer reports it back); duration >= 1 s: the peer never ends a
            # job of zero duration (its end event lands on the event being handled)
            w.writerow([i, int(jobs.total_gpus[i]), s, d, "resnet50", d, s - prev])
            prev = s
    with spec.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(list(SPEC))
        w.writerow(list({**SPEC, "num_node_p_switch": nodes}.values()))
    with pool.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(list(SPEC))
        w.writerow([1, 1, SPEC["num_gpu_p_node"] * nodes, SPEC["num_cpu_p_node"] * nodes, SPEC["mem_p_node"] * nodes])
    return trace, spec, pool


# --- the peer ----------------------------------------------------------------------------------
def peer_dir(arg: str | None, cache: Path) -> Path:
    if arg:
        p = Path(arg)
        sim = p if (p / "run_sim.py").exists() else p / "simulator"
        if not (sim / "run_sim.py").exists():
            raise HarnessError(f"--peer {arg}: no run_sim.py there nor in its simulator/ folder")
        return sim
    sim = cache / "Tiresias" / "simulator"
    if (sim / "run_sim.py").exists():
        return sim
    cache.mkdir(parents=True, exist_ok=True)
    try:
        r = subprocess.run(
            ["git", "clone", "--depth", "1", PEER_URL, str(cache / "Tiresias")],
            capture_output=True,
            text=True,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HarnessError(f"could not clone {PEER_URL} ({e}); pass --peer DIR with a checkout") from None
    if r.returncode != 0:
        msg = (r.stderr.strip().splitlines() or ["git failed"])[-1]
        raise HarnessError(f"could not clone {PEER_URL} ({msg}); offline? pass --peer DIR with a checkout")
    return sim


def find_python2(arg: str | None) -> str:
    pyenv = sorted(str(p) for p in (Path.home() / ".pyenv" / "versions").glob("2.7*/bin/python"))
    cands = [arg] if arg else ["pypy", "python2.7", "python2", *pyenv]
    for c in cands:
        exe = shutil.which(c) if c and os.sep not in c else c
        if not exe:
            continue
        try:
            r = subprocess.run(
                [exe, "-c", "import sys; sys.exit(sys.version_info[0] != 2)"], capture_output=True, timeout=60
            )
        except OSError:
            continue
        if r.returncode == 0:
            return exe
    raise HarnessError(
        f"no Python 2.7 interpreter among {cands}: install one (pyenv install 2.7.18; Debian's pypy where "
        "the release still has it) or pass --python2 PATH"
    )


@dataclass
class Run:
    jct: dict[int, float]
    preempt: dict[int, int]
    end: dict[int, float]
    cpu_s: float
    extra: dict[str, float]


CORE: int | None = None  # --core: pin each child to this CPU


def _pin() -> None:
    if CORE is not None:
        os.sched_setaffinity(0, {CORE})


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    """Run ``cmd``; the child's user + system CPU seconds (raises with the log's tail on failure)."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_pin)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise HarnessError(f"{cmd[0]} {cmd[1]} failed (exit {proc.returncode}): " + " | ".join(tail))
    return usage.ru_utime + usage.ru_stime


def run_peer(sim: Path, python2: str, trace: Path, spec: Path, schedule: str, work: Path) -> Run:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    has_np = subprocess.run([python2, "-c", "import numpy"], capture_output=True).returncode == 0
    if not has_np:  # imported by jobs.py, never used
        shim = work / "py2shim"
        shim.mkdir(exist_ok=True)
        (shim / "numpy.py").write_text("# stand-in: the Tiresias simulator imports numpy but does not use it\n")
        env["PYTHONPATH"] = str(shim)
    log_path = work / f"peer-{schedule}"
    cmd = [
        python2,
        "run_sim.py",
        f"--cluster_spec={spec}",
        f"--trace_file={trace}",
        f"--scheme={PEER_SCHEME[schedule]}",
        f"--schedule={schedule}",
        f"--log_path={log_path}",
    ]
    cpu = timed(cmd, sim, env, work / f"peer-{schedule}.log")
    return read_peer_jobs(log_path / "job.csv", cpu)


def read_peer_jobs(path: Path, cpu: float = 0.0) -> Run:
    if not path.exists():
        raise HarnessError(f"{path}: the peer wrote no job results")
    jct: dict[int, float] = {}
    pre: dict[int, int] = {}
    end: dict[int, float] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            j = int(row["job_id"])
            jct[j] = float(row["JCT"])
            pre[j] = int(row["preempt"])
            end[j] = float(row["end_time"])
    return Run(jct, pre, end, cpu, {})


# --- kant --------------------------------------------------------------------------------------
def run_kant(trace: Path, spec: Path, policy: str, keep_progress: bool, work: Path, tag: str) -> Run:
    out = work / f"kant-{tag}.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--kant-child",
        str(trace),
        str(spec),
        policy,
        "1" if keep_progress else "0",
        str(out),
    ]
    cpu = timed(cmd, REPO, env, work / f"kant-{tag}.log")
    d = json.loads(out.read_text())
    ids = d["job_id"]
    return Run(
        dict(zip(ids, d["jct"], strict=True)),
        dict(zip(ids, d["preempt"], strict=True)),
        dict(zip(ids, d["end"], strict=True)),
        cpu,
        d["extra"],
    )


def kant_results(trace: Path, spec: Path, policy: str, keep_progress: bool) -> dict[str, object]:
    """Simulate the peer's inputs with kant; per-job results keyed by the CSV's job_id."""
    from kant.config import load_policy
    from kant.sim import simulate
    from kant.sim.execution import ExecutionModel
    from kant.traces.tiresias import read_tiresias, read_tiresias_cluster

    jobs = read_tiresias(trace)
    cluster = read_tiresias_cluster(spec)
    execution = ExecutionModel(checkpoint_interval_s=1.0) if keep_progress else ExecutionModel()
    res = simulate(cluster, jobs, load_policy(policy), execution=execution)
    ids = [int(n.removeprefix("tiresias-")) for n in jobs.names]
    jct = (res.end - jobs.submit).tolist()
    return {
        "job_id": ids,
        "jct": jct,
        "preempt": res.preemptions.tolist(),
        "end": res.end.tolist(),
        "extra": {"events": res.events, "cycles": res.cycles},
    }


def kant_child(argv: list[str]) -> None:
    trace, spec, policy, keep, out = argv
    Path(out).write_text(json.dumps(kant_results(Path(trace), Path(spec), policy, keep == "1")))


# --- comparison --------------------------------------------------------------------------------
def compare(peer: Run, other: Run, pct: float, secs: float) -> dict[str, float]:
    ids = sorted(peer.jct)
    if sorted(other.jct) != ids:
        missing = len(set(ids) ^ set(other.jct))
        raise HarnessError(f"the two runs finished different jobs ({missing} differ)")
    match = sum(1 for j in ids if abs(other.jct[j] - peer.jct[j]) <= max(secs, pct / 100 * peer.jct[j]))
    mean_p = sum(peer.jct[j] for j in ids) / len(ids)
    mean_o = sum(other.jct[j] for j in ids) / len(ids)
    return {
        "mean_jct": mean_o,
        "diff_pct": 100 * (mean_o - mean_p) / mean_p,
        "match_pct": 100 * match / len(ids),
        "preemptions": sum(other.preempt.values()),
        "makespan": max(other.end.values()),
    }


def summary(run: Run) -> dict[str, float]:
    ids = list(run.jct)
    return {
        "mean_jct": sum(run.jct.values()) / len(ids),
        "preemptions": sum(run.preempt.values()),
        "makespan": max(run.end.values()),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--kant-child":
        kant_child(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, action="append", help="first N Philly jobs (repeatable; default 10000)")
    ap.add_argument(
        "--schedule", action="append", choices=sorted(DEFAULT_POLICY), help="peer scheduler (repeatable; default both)"
    )
    ap.add_argument("--peer", help="a Tiresias checkout (else cloned from GitHub into --cache)")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "kant-peers"))
    ap.add_argument("--python2", help="a Python 2.7 interpreter for the peer (default: pypy, python2.7, python2)")
    ap.add_argument("--work", help="folder for inputs and outputs (default: a temporary one)")
    ap.add_argument("--nodes", type=int, default=64, help="8-GPU nodes (one switch; default 64)")
    ap.add_argument("--core", type=int, help="pin the peer's and kant's processes to this CPU")
    ap.add_argument("--match-pct", type=float, default=1.0)
    ap.add_argument("--match-s", type=float, default=5.0)
    ap.add_argument("--per-job", type=int, default=0, help="print the first N jobs side by side")
    ap.add_argument("--save-fixture", help="write the inputs and the peer's job results to this folder")
    ap.add_argument("--skip-default", action="store_true", help="do not run kant's default policy")
    args = ap.parse_args()
    global CORE
    CORE = args.core
    try:
        sizes = args.jobs or [10000]
        schedules = args.schedule or ["fifo", "dlas-gpu-8"]
        sim = peer_dir(args.peer, Path(args.cache))
        python2 = find_python2(args.python2)
        work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="tiresias-repro-"))
        print(f"peer: {sim} ({python2}); work: {work}; match: within {args.match_pct:g} % or {args.match_s:g} s")
        hdr = (
            f"{'jobs':>6} {'schedule':<11} {'run':<14} {'mean JCT s':>12} {'vs peer':>8} {'match %':>8} "
            f"{'preempt':>8} {'makespan s':>11} {'CPU s':>8}"
        )
        rows: list[str] = []
        for n in sizes:
            d = work / f"j{n}"
            trace, spec, pool = write_inputs(n, d, args.nodes)
            for sch in schedules:
                peer = run_peer(sim, python2, trace, spec, sch, d)
                if args.save_fixture:
                    fx = Path(args.save_fixture)
                    fx.mkdir(parents=True, exist_ok=True)
                    shutil.copy(trace, fx / "jobs.csv")
                    shutil.copy(spec, fx / "cluster.csv")
                    shutil.copy(pool, fx / "pool.csv")
                    shutil.copy(d / f"peer-{sch}" / "job.csv", fx / f"peer-{sch}.csv")
                s = summary(peer)
                rows.append(
                    f"{n:>6} {sch:<11} {'peer':<14} {s['mean_jct']:>12.0f} {'':>8} {'':>8} "
                    f"{s['preemptions']:>8} {s['makespan']:>11.0f} {peer.cpu_s:>8.1f}"
                )
                runs = [] if args.skip_default else [("kant default", DEFAULT_POLICY[sch], True, spec)]
                if sch == "fifo":
                    runs.append(("kant options", PEER_POLICY[sch], True, spec))
                else:  # the peer's 2D-LAS counts GPUs: the pool is its model; the nodes are shown too
                    runs += [
                        ("kant options", PEER_POLICY[sch], True, pool),
                        ("options, nodes", PEER_POLICY[sch], True, spec),
                    ]
                for label, pol, keep, where in runs:
                    k = run_kant(trace, where, pol, keep, d, f"{sch}-{label.replace(', ', '-').split()[-1]}")
                    c = compare(peer, k, args.match_pct, args.match_s)
                    rows.append(
                        f"{n:>6} {sch:<11} {label:<14} {c['mean_jct']:>12.0f} {c['diff_pct']:>+7.2f}% "
                        f"{c['match_pct']:>7.1f}% {c['preemptions']:>8} {c['makespan']:>11.0f} "
                        f"{k.cpu_s:>8.1f}"
                    )
                    if args.per_job and label == "kant options":
                        print(f"\n{n} jobs, {sch}: per job (JCT s, preemptions) peer | {label}")
                        for j in sorted(peer.jct)[: args.per_job]:
                            print(
                                f"  job {j:>6}  {peer.jct[j]:>10.0f} {peer.preempt[j]:>4} | "
                                f"{k.jct[j]:>10.0f} {k.preempt[j]:>4}"
                            )
                print(hdr, *rows[-len(runs) - 1 :], sep="\n", flush=True)
        print("\nall rows:", hdr, *rows, sep="\n")
    except HarnessError as e:
        sys.exit(f"bench_tiresias_repro: {e}")


if __name__ == "__main__":
    main()
