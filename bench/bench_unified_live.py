"""Unified against separate, live: a real ``kant serve --executor ray`` serving real traffic to an
inference service and running a training queue on the same GPUs, once per policy, next to what
``kant simulate`` predicts for the same inputs.

    python bench/bench_unified_live.py                           # unified and separate, 180 s of traffic each
    python bench/bench_unified_live.py --duration 600 --speed 6  # the trace's hour in 10 minutes (CPU allowing)
    python bench/bench_unified_live.py --day --duration 600      # a day made from the hour, in 10 minutes

Per policy (``--policy``, default ``unified`` then ``separate``), from scratch:

* a local Ray cluster (Ray's ``cluster_utils``: a head without GPUs and ``--nodes`` raylets on this
  machine, each declaring ``--gpus`` GPUs and labelled ``kant.node`` n0, n1, ...) and a real ``kant
  serve --executor ray --clock wall`` on 127.0.0.1 (SQLite) with ``--services FILE``: one service
  ``chat`` whose replicas are ``examples/model_server.py`` (1 GPU each, ``--min-replicas`` to
  ``--max-replicas``, autoscaled by the simulator's HPA from the route's measured arrival rate);
* traffic: ``kant load chat --trace azure:code --speed S --duration D`` (the Azure LLM inference
  trace's code stream, its arrivals divided by S, its token counts in the bodies), started once the
  first replica is ready; with ``--day``, ``kant load --day --rate R``: a day made from the trace's
  hour (24 shuffled copies thinned by the simulator's diurnal factor, ``--diurnal``, to ``--rate``
  requests per wall second on average) played in D seconds;
* training: ``--jobs`` synthetic gangs (seeded: 1 or 2 workers of 1 or 2 GPUs, 20-60 steps of one
  second, arrivals over the first half of the traffic) of a shell command that keeps its step in
  ``$KANT_CHECKPOINT_DIR``: on SIGUSR1 or SIGTERM it saves the step and exits, and a new run resumes
  from it. The bench waits for every training job to finish (at most ``--drain`` s after the traffic).

Measured (printed, never asserted): training wait (first start - submit) P50/P90, SLO attainment
(``kant load``'s: 2xx answers within the service's ``slo_ms``, over every request sent), GPUs lent
(GPU-seconds and the peak of training GPUs above ``total - pool``, pool = ``max_replicas`` GPUs, the
simulator's definition, sampled every second from ``GET /v1/jobs``), reclaims and their P50/P99
latency (``GET /v1/services/{id}``'s ``serving``: scale decision -> new replica ready), requests
served. Then ``kant simulate`` with the same training jobs (a CSV) and the same services file, whose
traffic is the very requests ``kant load`` sent (a Parquet request log with the arrival times
divided by S), on the same cluster (``NODESxGPUS``), under the same policy, and the differences.

Everything started is stopped at the end, also on failure or Ctrl-C: ``kant serve``, the Ray
cluster, and any process left by a replica or a job (found by a tag in their environment).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TAG = "KANT_BENCH_UNIFIED_LIVE"

#: a training step is one second; SIGUSR1 (kant's checkpoint signal) or SIGTERM saves the step and exits
TRAIN = ('i=$(cat "$KANT_CHECKPOINT_DIR/step" 2>/dev/null || echo 0); '
         'trap \'echo $i > "$KANT_CHECKPOINT_DIR/step"; echo "checkpoint at step $i"; exit 143\' USR1 TERM; '
         'echo "start at step $i"; while [ "$i" -lt {steps} ]; do sleep 1; i=$((i+1)); done; echo done')


def shape_args(args: argparse.Namespace) -> list[str]:
    """kant load's options for the traffic's shape: the trace at --speed, or a day (--day)."""
    if args.day:
        return ["--day", "--rate", f"{args.rate:g}", "--diurnal", f"{args.diurnal:g}", "--seed", str(args.seed)]
    return ["--speed", f"{args.speed:g}"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], p: float) -> float | None:
    return float(np.percentile(values, p)) if values else None


def training_jobs(n: int, seed: int, span: float) -> list[dict[str, Any]]:
    """``n`` gangs: arrival (s from the traffic's start), workers, GPUs per worker, steps."""
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.uniform(0, span, n))
    out = []
    for k in range(n):
        out.append({"name": f"train-{k}", "arrival": round(float(arrivals[k]), 3),
                    "workers": int(rng.integers(1, 3)), "gpus_per_worker": int(rng.integers(1, 3)),
                    "steps": int(rng.integers(20, 61))})
    return out


def services_yaml(args: argparse.Namespace, requests_file: Path) -> str:
    cmd = f"{sys.executable} {ROOT / 'examples' / 'model_server.py'} --ms-per-token {args.ms_per_token:g}"
    return f"""# written by bench/bench_unified_live.py
horizon_s: {args.duration:g}
seed: 0
autoscaler:
  period_s: {args.period:g}
  target_utilization: 0.7
  metric_window_s: {2 * args.period:g}
  scale_down:
    stabilization_window_s: {args.down_window:g}
    policies: [{{type: Percent, value: 100, period_s: 15}}]
services:
  - name: chat
    gpus_per_replica: 1
    min_replicas: {args.min_replicas}
    max_replicas: {args.max_replicas}
    capacity_rps: {args.capacity:g}
    concurrency: 1
    slo_ms: {args.slo_ms:g}
    startup_delay_s: {args.startup_delay:g}
    tenant: inference
    command: {json.dumps(cmd)}
    port: 0
    ready_path: /health
    ready_timeout_s: 60
    traffic:
      trace: {json.dumps(str(requests_file))}
      bin_s: {args.bin:g}
      repeat: none
      scale: 1.0
"""


def separate_policy(pool: int) -> str:
    text = (ROOT / "src" / "kant" / "policies" / "separate.yaml").read_text()
    return text.replace("args: {mode: separate}", f"args: {{mode: separate, inference_gpus: {pool}}}")


class Live:
    """One Ray cluster and one kant serve on it, for one policy."""

    def __init__(self, args: argparse.Namespace, work: Path, policy: str, services: Path) -> None:
        from ray.cluster_utils import Cluster

        self.work = work
        self.proc: subprocess.Popen[bytes] | None = None
        self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0,
                                                                     "include_dashboard": False})
        for i in range(args.nodes):
            self.cluster.add_node(num_cpus=1, num_gpus=args.gpus, labels={"kant.node": f"n{i}"})
        self.cluster.wait_for_nodes()
        port = free_port()
        self.token = f"kant_bench_{secrets.token_hex(16)}"
        self.url = f"http://127.0.0.1:{port}"
        self.log = work / "serve.log"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kant.cli.main", "serve", "--db", f"sqlite:///{work / 'kant.db'}",
                 "--port", str(port), "--executor", "ray", "--ray-address", str(self.cluster.address),
                 "--clock", "wall", "--no-predict", "--policy", policy, "--services", str(services),
                 "--log-dir", str(work / "logs"), "--checkpoint-dir", str(work / "ckpt"),
                 "--checkpoint-grace", "10", "--stop-grace", "5", "--ray-start-timeout", "120",
                 "--log-level", "warning"],
                cwd=work, env={**os.environ, "KANT_ADMIN_TOKEN": self.token}, stdout=out, stderr=subprocess.STDOUT)
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=60)
        deadline = time.monotonic() + 300
        while True:
            try:
                if self.http.get("/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"kant serve did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def service(self) -> dict[str, Any]:
        deadline = time.monotonic() + 120  # the services file is applied once the service leads
        while not (found := [s for s in self.http.get("/v1/services").json() if s["name"] == "chat"]):
            if time.monotonic() > deadline:
                raise SystemExit(f"the service 'chat' was not created:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.5)
        row: dict[str, Any] = found[0]
        return row

    def jobs(self, **params: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        after = None
        while True:
            page = self.http.get("/v1/jobs", params={**params, "limit": 1000,
                                                     **({"after": after} if after is not None else {})}).json()
            out += page["items"]
            after = page["next"]
            if after is None:
                return out

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.cluster.shutdown()


def tagged_pids(tag: str) -> list[int]:
    """Processes of this machine whose environment carries ``TAG=tag`` (ours: the raylets' children)."""
    needle = f"{TAG}={tag}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if needle in (d / "environ").read_bytes().split(b"\0"):
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def end_tagged(tag: str) -> list[str]:
    """SIGKILL every tagged process; what they were (pid and command line)."""
    out = []
    for pid in tagged_pids(tag):
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            out.append(f"{pid}: {cmdline[:120]}")
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return out


def run_live(args: argparse.Namespace, policy: str, work: Path, services: Path, jobs: list[dict[str, Any]],
             pool: int, total: int) -> dict[str, Any]:
    print(f"[{Path(policy).stem}] starting Ray ({args.nodes} nodes x {args.gpus} GPUs) and kant serve ...", flush=True)
    t_start = time.monotonic()
    live = Live(args, work, policy, services)
    try:
        svc = live.service()
        t0 = time.monotonic()
        while live.service()["ready_replicas"] < 1:
            if time.monotonic() - t0 > 180:
                raise SystemExit(f"no replica of 'chat' ready after 180 s: {live.service()}\n"
                                 f"{live.log.read_text()[-3000:]}")
            time.sleep(0.5)
        print(f"[{Path(policy).stem}] ready: Ray + kant serve + first replica in {time.monotonic() - t_start:.1f} s",
              flush=True)
        assert live.http.post("/v1/tenants", json={"name": "train"}).status_code in (201, 409)
        load_json = work / "load.json"
        env = {**os.environ, "KANT_URL": live.url, "KANT_TOKEN": live.token}
        with open(load_json, "wb") as out:
            load = subprocess.Popen(
                [sys.executable, "-m", "kant.cli.main", "load", "chat", "--trace", args.trace, *shape_args(args),
                 "--duration", f"{args.duration:g}s", "--timeout", "30", "--out",
                 str(work / "requests.parquet"), "--json"], env=env, stdout=out, stderr=subprocess.PIPE)
        t_load = time.monotonic()
        ids: dict[str, int] = {}
        lent_s = 0.0
        lent_peak = 0
        replicas_seen: list[int] = []
        last = time.monotonic()
        pending = list(jobs)
        deadline = t_load + args.duration + args.drain
        while True:
            now = time.monotonic()
            while pending and now - t_load >= pending[0]["arrival"]:
                j = pending.pop(0)
                r = live.http.post("/v1/jobs", json={
                    "tenant": "train", "name": j["name"], "workers": j["workers"],
                    "gpus_per_worker": j["gpus_per_worker"], "command": TRAIN.replace("{steps}", str(j["steps"])),
                    "estimate_s": j["steps"], "priority": 0})
                assert r.status_code == 201, r.text
                ids[j["name"]] = int(r.json()["id"])
            running = live.jobs(state=["running"])
            train_gpus = sum(x["workers"] * x["gpus_per_worker"] for x in running if x["kind"] == "training")
            lent = max(0, train_gpus - (total - pool))
            lent_s += lent * (now - last)
            last = now
            lent_peak = max(lent_peak, lent)
            replicas_seen.append(live.service()["ready_replicas"])
            load_done = load.poll() is not None
            if load_done and not pending:
                states = {x["id"]: x["state"] for x in live.jobs(tenant="train")}
                if all(states.get(i) in ("finished", "failed", "cancelled", "timeout") for i in ids.values()):
                    break
            if now > deadline:
                print(f"[{policy}] --drain reached: not every training job finished", flush=True)
                break
            time.sleep(1.0)
        if load.poll() is None:
            load.wait(120)
        stderr = load.stderr.read().decode() if load.stderr else ""
        if load.returncode != 0:
            raise SystemExit(f"kant load failed ({load.returncode}): {stderr[-2000:]}")
        ld = json.loads(load_json.read_text())
        svc = live.service()
        serving = svc.get("serving") or {}
        stats = live.http.get(f"/v1/services/{svc['id']}/stats").json()
        train = [x for x in live.jobs(tenant="train")]
        end = time.time()
        waits = [(x["first_start_time"] if x["first_start_time"] is not None else end) - x["submit_time"]
                 for x in train]
        result = {
            "policy": policy, "wall_s": time.monotonic() - t_start,
            "wait_p50": pct(waits, 50), "wait_p90": pct(waits, 90),
            "not_started": sum(x["first_start_time"] is None for x in train),
            "finished": sum(x["state"] == "finished" for x in train), "jobs": len(train),
            "runs": sum(x["runs"] for x in train),
            "slo": ld["slo_attainment"], "requests": ld["requests"], "served": ld["ok"], "codes": ld["codes"],
            "latency_p50_ms": ld["ok_latency_ms"]["p50"], "latency_p99_ms": ld["ok_latency_ms"]["p99"],
            "route_slo_total": stats.get("slo_attainment_total"),
            "lent_gpu_s": lent_s, "lent_peak": lent_peak,
            "reclaims": serving.get("reclaims", 0), "reclaim_p50": serving.get("reclaim_p50_s"),
            "reclaim_p99": serving.get("reclaim_p99_s"), "scale_up_p50": serving.get("scale_up_p50_s"),
            "scale_up_p99": serving.get("scale_up_p99_s"), "failures": serving.get("failures"),
            "replicas_max": max(replicas_seen) if replicas_seen else 0,
            "replicas_mean": float(np.mean(replicas_seen)) if replicas_seen else 0.0,
            "state": svc["state"], "degraded_reason": svc.get("degraded_reason"),
        }
        (work / "live.json").write_text(json.dumps(result, indent=1))
        return result
    finally:
        live.close()


def run_sim(args: argparse.Namespace, policy: str, work: Path, services: Path, jobs_csv: Path) -> dict[str, Any]:
    out = work / "sim"
    cmd = [sys.executable, "-m", "kant.cli.main", "simulate", "--trace", str(jobs_csv), "--cluster",
           f"{args.nodes}x{args.gpus}:GPU", "--policy", policy, "--services", str(services),
           "--checkpoint-interval", "1", "--restart-cost", f"{args.restart_cost:g}", "--no-report",
           "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"kant simulate failed: {p.stderr[-2000:]}")
    return {"json": json.loads((out / "result.json").read_text()), "stdout": p.stdout}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", action="append", default=None, help="bundled policy (default: unified, separate)")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus", type=int, default=2, help="GPUs declared per node")
    ap.add_argument("--trace", default="azure:code", help="request trace for kant load")
    ap.add_argument("--speed", type=float, default=2.0, help="trace seconds per wall second")
    ap.add_argument("--day", action="store_true", help="a day made from the trace, in --duration (not --speed)")
    ap.add_argument("--rate", type=float, default=3.0, help="with --day: mean requests per wall second")
    ap.add_argument("--diurnal", type=float, default=0.5, help="with --day: the diurnal amplitude")
    ap.add_argument("--duration", type=float, default=180.0, help="wall seconds of traffic per policy")
    ap.add_argument("--drain", type=float, default=240.0, help="seconds after the traffic for training to finish")
    ap.add_argument("--jobs", type=int, default=10, help="training gangs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-replicas", type=int, default=1)
    ap.add_argument("--max-replicas", type=int, default=4)
    ap.add_argument("--capacity", type=float, default=4.0, help="capacity_rps of one replica")
    ap.add_argument("--slo-ms", type=float, default=2000.0)
    ap.add_argument("--ms-per-token", type=float, default=0.05, help="the model server's CPU ms per token")
    ap.add_argument("--period", type=float, default=5.0, help="the autoscaler's period_s")
    ap.add_argument("--down-window", type=float, default=20.0, help="scale-down stabilization window, s")
    ap.add_argument("--bin", type=float, default=5.0, help="the simulator's traffic bin_s")
    ap.add_argument("--startup-delay", type=float, default=5.0, help="the simulator's startup_delay_s")
    ap.add_argument("--restart-cost", type=float, default=2.5, help="the simulator's --restart-cost")
    ap.add_argument("--sim-only", action="store_true", help="only write the inputs and run kant simulate")
    ap.add_argument("--keep", type=Path, default=None, help="keep the work folders here")
    args = ap.parse_args()
    policies = args.policy or ["unified", "separate"]
    pool, total = args.max_replicas, args.nodes * args.gpus

    from kant.service.serving.replay import TRACE_ALIASES, Day, day_requests, trace_requests
    from kant.traces.load import LoadSeries
    from kant.traces.parquet import write_parquet
    from kant.traces.registry import load_load

    tag = secrets.token_hex(8)
    # kant serve, kant load and kant simulate run this tree's kant (whatever the cwd)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    os.environ[TAG] = tag  # inherited by the raylets, so by every replica and job: found and ended at the end
    base = args.keep or Path(tempfile.mkdtemp(prefix="kant-bench-unified-"))
    base.mkdir(parents=True, exist_ok=True)
    # the requests kant load will send, in wall time: the simulator's traffic
    r = (day_requests(args.trace, Day(args.duration, args.rate, args.diurnal, seed=args.seed), max_requests=100_000)
         if args.day else
         trace_requests(args.trace, start=0.0, duration=args.duration, speed=args.speed, max_requests=100_000))
    src = load_load(TRACE_ALIASES.get(args.trace, args.trace))
    n = len(r)
    series = LoadSeries(kind="requests", time=np.asarray(r.scheduled, dtype=np.float64), rate=np.ones(n),
                        stream=np.zeros(n, dtype=np.int64), input_tokens=np.asarray(r.prompt, dtype=np.int64),
                        output_tokens=np.asarray(r.output, dtype=np.int64), duration=np.zeros(n),
                        cv=np.full(n, np.nan), stream_names=("requests",), source=f"{src.source} / {r.speed:g}")
    requests_file = write_parquet(series, base / "requests-wall.parquet")
    services = base / "services.yaml"
    services.write_text(services_yaml(args, requests_file))
    jobs = training_jobs(args.jobs, args.seed, args.duration / 2)
    jobs_csv = base / "training.csv"
    jobs_csv.write_text("name,submit,duration,workers,gpus_per_worker,tenant,priority,estimate\n" + "".join(
        f"{j['name']},{j['arrival']},{j['steps']},{j['workers']},{j['gpus_per_worker']},train,0,{j['steps']}\n"
        for j in jobs))
    (base / "separate-pool.yaml").write_text(separate_policy(pool))
    rates = np.bincount((r.scheduled // 10).astype(np.int64)) / 10.0
    print("$ python bench/bench_unified_live.py " + " ".join(sys.argv[1:]))
    print(f"bench_unified_live: {args.nodes} nodes x {args.gpus} GPUs (Ray, one machine, {os.cpu_count()} CPUs); "
          f"traffic {args.trace}{' as a day' if args.day else ''} at speed {r.speed:g} for {args.duration:g} s: "
          f"{n} requests, "
          f"{n / args.duration:.1f}/s mean, 10-s peak {rates.max():.1f}/s; training: {len(jobs)} gangs, "
          f"{sum(j['workers'] * j['gpus_per_worker'] * j['steps'] for j in jobs)} GPU-s; "
          f"service chat: 1 GPU/replica, {args.min_replicas}-{args.max_replicas} replicas, capacity_rps "
          f"{args.capacity:g}, slo_ms {args.slo_ms:g}; work folder {base}", flush=True)
    results: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    try:
        for policy in policies:
            pfile = str(base / "separate-pool.yaml") if policy == "separate" else policy
            work = base / policy
            work.mkdir(exist_ok=True)
            if args.sim_only:
                sim = run_sim(args, pfile, work, services, jobs_csv)
                print(f"{policy}:\n{sim_line(sim['json'], args.bin)}")
                continue
            try:
                live = run_live(args, pfile, work, services, jobs, pool, total)
            finally:
                left = end_tagged(tag)
                if left:
                    print(f"[{policy}] ended {len(left)} processes left by replicas or jobs after the shutdown: "
                          + "; ".join(left), flush=True)
            sim = run_sim(args, pfile, work, services, jobs_csv)
            (work / "sim.json").write_text(json.dumps(sim["json"], indent=1))
            results[policy] = (live, sim["json"])
            print(f"[{policy}] live done in {live['wall_s']:.0f} s", flush=True)
    finally:
        end_tagged(tag)
    table(results, args)


def _sim_figures(s: dict[str, Any]) -> dict[str, Any]:
    m = s["metrics"]
    inf = m["extra"]["inference"]
    return {"wait_p50": m["jwtd"]["overall"]["p50"], "wait_p90": m["jwtd"]["overall"]["p90"],
            "never_started": m["jwtd"].get("never_started", 0), "slo": inf.get("slo_attainment"),
            "lent_gpu_s": inf.get("gpu_hours_loaned", 0.0) * 3600.0, "reclaims": inf.get("reclaims"),
            "requests": inf.get("requests")}


def sim_line(s: dict[str, Any], bin_s: float) -> str:
    """What the simulation scored the traffic on (the printed table's last line)."""
    inf = s["metrics"]["extra"]["inference"]
    c = inf["services"]["chat"]
    return (f"  simulated: {inf['requests']:.0f} requests scored, {c['mean_rps']:.1f}/s mean, {c['peak_rps']:.1f}/s in "
            f"the busiest {bin_s:g} s bin, overloaded {c['overloaded_s']:.0f} s, {inf['scale_ups']} scale-ups, "
            f"peak {c['peak_desired_replicas']} replicas")


def _f(x: Any, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def table(results: dict[str, tuple[dict[str, Any], dict[str, Any]]], args: argparse.Namespace) -> None:
    print()
    for policy, (live, simj) in results.items():
        sim = _sim_figures(simj)
        rows = [
            ("training wait P50 (s)", live["wait_p50"], sim["wait_p50"], ".1f"),
            ("training wait P90 (s)", live["wait_p90"], sim["wait_p90"], ".1f"),
            ("SLO attainment (%)", None if live["slo"] is None else 100 * live["slo"],
             None if sim["slo"] is None else 100 * sim["slo"], ".2f"),
            ("GPU-s lent to training", live["lent_gpu_s"], sim["lent_gpu_s"], ".0f"),
            ("reclaims", live["reclaims"], sim["reclaims"], "d"),
        ]
        print(f"policy {policy}: live (kant serve on Ray) against kant simulate, same jobs and services file")
        print(f"  {'':28} {'live':>10} {'simulated':>10} {'live - sim':>11}")
        for name, a, b, fmt in rows:
            d = None if a is None or b is None else a - b
            print(f"  {name:28} {_f(a, fmt):>10} {_f(b, fmt):>10} {_f(d, '+' + fmt):>11}")
        model = args.startup_delay + (30.0 if policy != "separate" else 0.0)
        print(f"  {'reclaim latency P50/P99 (s)':28} {_f(live['reclaim_p50'], '.1f'):>4} / "
              f"{_f(live['reclaim_p99'], '.1f'):<5} (simulated: startup_delay_s + reclaim_delay_s = "
              f"{args.startup_delay:g} + 30 s)" if policy != "separate" else
              f"  {'reclaim latency P50/P99 (s)':28} {_f(live['reclaim_p50'], '.1f'):>4} / "
              f"{_f(live['reclaim_p99'], '.1f'):<5}")
        del model
        print(f"  {'scale-up latency P50/P99 (s)':28} {_f(live['scale_up_p50'], '.1f'):>4} / "
              f"{_f(live['scale_up_p99'], '.1f'):<5} (simulated: startup_delay_s = {args.startup_delay:g} s)")
        print(f"  requests: {live['requests']} sent, {live['served']} served 2xx (codes {live['codes']}), "
              f"latency P50 {_f(live['latency_p50_ms'], '.1f')} ms, P99 {_f(live['latency_p99_ms'], '.1f')} ms; "
              f"GPUs lent at peak {live['lent_peak']}; ready replicas mean {live['replicas_mean']:.2f}, "
              f"max {live['replicas_max']}")
        print(f"  training: {live['finished']} of {live['jobs']} finished, {live['runs']} runs "
              f"({live['runs'] - (live['jobs'] - live['not_started'])} restarts), {live['not_started']} never started; "
              f"replica "
              f"failures {live['failures']}; service state {live['state']}; wall {live['wall_s']:.0f} s")
        print(sim_line(simj, args.bin))
        print()


if __name__ == "__main__":
    main()
