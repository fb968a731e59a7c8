"""Reliability runs of the live service, longer than the suite's (tests/reliability/); every figure
printed goes into docs/reliability.md. All against real ``kant serve`` processes on 127.0.0.1.

    python bench/bench_reliability.py fuzz --examples 75        # Schemathesis, admin + tenant (10,000+ requests)
    python bench/bench_reliability.py crash --rounds 10         # kill -9 under load, SQLite (and --db postgresql)
    python bench/bench_reliability.py failover --rounds 5       # leader failover on PostgreSQL under load
    python bench/bench_reliability.py pgrestart --rounds 5      # a private PostgreSQL server restarted under load
    python bench/bench_reliability.py timing --samples 2000     # 401 time of near and far wrong tokens
    python bench/bench_reliability.py inputs --examples 400     # malformed traces, mappings, policies, services
    python bench/bench_reliability.py whatif --budget 30        # a tenant's largest what-ifs against the bounds

* **fuzz**: every operation of ``/openapi.json``, ``--examples`` valid and as many invalid requests
  per operation, as an admin and as a tenant (tests/reliability/apifuzz.py); problems = 5xx, a
  rejection without a one-line message, a traceback in the server's log.
* **crash**: ``--rounds`` times: 8 clients submit with idempotency keys, the service is killed
  (``kill -9``) after a random 1-3 s, started again; lost = acknowledged jobs missing after the
  restart; duplicated = acknowledged keys whose retry makes a new job; moved = jobs running before
  the kill that run elsewhere (or ran again) after it; double-booked = nodes holding more GPUs than
  they have.
* **failover**: two services on one PostgreSQL database (the ``--pg`` server, a fresh database per
  round); the leader is killed under 4 clients' load; takeover = kill to the standby's ``/readyz``
  200; started twice = jobs with more ``started`` events than runs.
* **pgrestart**: a private PostgreSQL server (``initdb`` + ``pg_ctl``, as the postgres user when
  root) restarted in immediate mode under load; the service exits (code 3) and is started again,
  as a supervisor would.
* **inputs**: the fuzz tests of the input files (tests/test_traces_fuzz.py: every trace reader and
  the mapping files; tests/reliability/test_config_fuzz.py: policies and services files) run with
  ``KANT_FUZZ_EXAMPLES=--examples``, counting the generated inputs each one checked (every one may
  only end in a KantError that names the file, row or key).
* **whatif**: a service (``--nodes`` x 8 GPUs, ``--pending`` queued gangs behind a full cluster, a
  wall clock, ``--whatif-budget --budget``) under 4 clients' submits; a tenant sends the largest
  what-if the body allows (16 scenarios of 100,000 more nodes, a 366-day horizon) and one asking for
  100 runs of 4 scenarios (10-40 more nodes), while a second request of the same tenant probes for 429; printed:
  each answer's status, time and runs, the submits' latency (median, max) and the cycles meanwhile.
* **timing**: median time of a 401 for a wrong token that shares all but its last character with a
  real token and one that shares nothing (hash lookup + ``hmac.compare_digest``: they should not differ).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from reliability.apifuzz import fuzz, log_problems  # noqa: E402
from reliability.private_pg import private_postgres  # noqa: E402
from service.conftest import new_pg_database  # noqa: E402
from service.serve_proc import Server, start_server  # noqa: E402
from service.test_durability import Load, all_jobs, load_body  # noqa: E402

NO_PREDICT = ["--no-predict"]


def double_booked(srv: Server, jobs: list[dict[str, Any]]) -> int:
    held: Counter[str] = Counter()
    for job in jobs:
        if job["state"] == "running":
            for node in job["placement"]:
                held[node] += job["gpus_per_worker"]
    capacity = {n["name"]: n["gpus"] for n in srv.admin.get("/v1/nodes").json()}
    return sum(1 for n in held if held[n] > capacity[n])


def check_after(srv: Server, token: str, acked: dict[str, int], running_before: dict[int, list[str]],
                retries: int = 200) -> dict[str, int]:
    jobs = all_jobs(srv, token)
    by_id = {j["id"]: j for j in jobs}
    lost = len(set(acked.values()) - set(by_id))
    dup = 0
    with srv.client(token) as c:
        for key in random.sample(sorted(acked), min(retries, len(acked))):
            r = c.post("/v1/jobs", json=load_body(int(key.split("-")[1])), headers={"Idempotency-Key": key})
            dup += int(r.json().get("id") != acked[key] or r.status_code != 200)
    moved = sum(1 for i, p in running_before.items()
                if by_id.get(i, {}).get("placement") != p or by_id.get(i, {}).get("runs") != 1)
    return {"acked": len(acked), "lost": lost, "duplicated": dup, "retried": min(retries, len(acked)),
            "running_before": len(running_before), "moved": moved, "double_booked": double_booked(srv, jobs)}


def cmd_fuzz(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        srv = start_server(work, f"sqlite:///{work / 'kant.db'}", cluster="4x8:V100,leaf=2", extra=NO_PREDICT)
        try:
            tenant = srv.tenant("team-a")
            srv.client(tenant).post("/v1/jobs", json={"gpus_per_worker": 1, "duration_s": 100})
            keep = frozenset(t["id"] for t in srv.admin.get("/v1/tokens").json())
            t0 = time.monotonic()
            reports = []
            for role in args.roles.split(","):
                token = srv.admin_token if role == "admin" else tenant
                rep = fuzz(srv.url, token, examples=args.examples, keep_tokens=keep,
                           seed=args.seed + (role != "admin"))
                print(f"fuzz {role}: {rep.summary()}", flush=True)
                reports.append(rep)
            took = time.monotonic() - t0
        finally:
            srv.stop()
        logged = log_problems(srv.log_text())
        problems = [p for r in reports for p in r.problems]
        errors = sum(v for r in reports for k, v in r.by_status.items() if k >= 500)
        print(f"fuzz total: {sum(r.requests for r in reports)} requests in {took:.0f} s, operations "
              f"{len(reports[0].by_operation)}, 5xx {errors}, problems {len(problems)}, traceback lines in the log "
              f"{len(logged)}")
        for p in problems[:20]:
            print("  problem:", p)


def _db(kind: str, stack: contextlib.ExitStack, work: Path, k: int) -> str:
    if kind == "sqlite":
        return f"sqlite:///{work / f'kant-{k}.db'}"
    return stack.enter_context(new_pg_database())


def cmd_crash(args: argparse.Namespace) -> None:
    totals: Counter[str] = Counter()
    rng = random.Random(args.seed)
    for k in range(args.rounds):
        with tempfile.TemporaryDirectory() as d, contextlib.ExitStack() as stack:
            work = Path(d)
            url = _db(args.db, stack, work, k)
            srv = start_server(work, url, cluster="8x8:V100", clock="wall", extra=NO_PREDICT)
            token = srv.tenant("load")
            load = Load(srv.url, token, clients=8)
            time.sleep(rng.uniform(1.0, 3.0))
            running = {j["id"]: j["placement"] for j in all_jobs(srv, token) if j["state"] == "running"}
            time.sleep(0.2)
            srv.kill()
            acked = load.finish()
            again = start_server(work, url, cluster="8x8:V100", clock="wall", extra=NO_PREDICT,
                                 admin_token=srv.admin_token, port=srv.port)
            try:
                out = check_after(again, token, acked, running)
            finally:
                again.stop()
                srv.stop()
            totals.update(out)
            print(f"crash {args.db} round {k}: {out}", flush=True)
    print(f"crash {args.db} total over {args.rounds} kill -9: {dict(totals)}")


def cmd_failover(args: argparse.Namespace) -> None:
    totals: Counter[str] = Counter()
    takeovers = []
    for k in range(args.rounds):
        with tempfile.TemporaryDirectory() as d, new_pg_database() as url:
            work = Path(d)
            a = start_server(work / "a", url, cluster="8x8:V100", clock="wall", extra=NO_PREDICT)
            b = start_server(work / "b", url, cluster="8x8:V100", clock="wall", extra=NO_PREDICT,
                             admin_token=a.admin_token, wait=False)
            try:
                b.wait_listening()
                token = a.tenant("load")
                load = Load(a.url, token, clients=4)
                time.sleep(1.5)
                running = {j["id"]: j["placement"] for j in all_jobs(a, token) if j["state"] == "running"}
                a.kill()
                t0 = time.monotonic()
                b.wait_ready(timeout=60)
                takeovers.append(time.monotonic() - t0)
                acked = load.finish()
                out = check_after(b, token, acked, running)
                twice = 0
                for job in all_jobs(b, token)[:300]:
                    events = b.admin.get(f"/v1/jobs/{job['id']}").json()["events"]
                    twice += int(sum(e["kind"] == "started" for e in events) > max(job["runs"], 1))
                out["started_twice"] = twice
            finally:
                a.stop()
                b.stop()
            totals.update(out)
            print(f"failover round {k}: takeover {takeovers[-1]:.2f} s, {out}", flush=True)
    print(f"failover total over {args.rounds} rounds: {dict(totals)}; takeover median "
          f"{statistics.median(takeovers):.2f} s, max {max(takeovers):.2f} s")


def cmd_pgrestart(args: argparse.Namespace) -> None:
    totals: Counter[str] = Counter()
    with private_postgres() as pg:
        for k in range(args.rounds):
            with tempfile.TemporaryDirectory() as d:
                work = Path(d)
                import psycopg

                name = f"kant_r{k}"
                with psycopg.connect(f"postgresql://postgres@127.0.0.1:{pg.port}/postgres", autocommit=True) as c:
                    c.execute(f'CREATE DATABASE "{name}"')
                url = pg.url.rsplit("/", 1)[0] + f"/{name}"
                srv = start_server(work, url, cluster="8x8:V100", clock="wall", extra=NO_PREDICT)
                token = srv.tenant("load")
                load = Load(srv.url, token, clients=4)
                time.sleep(1.5)
                running = {j["id"]: j["placement"] for j in all_jobs(srv, token) if j["state"] == "running"}
                pg.restart("immediate")
                srv.proc.wait(60)
                code = srv.proc.returncode
                again = start_server(work, url, cluster="8x8:V100", clock="wall", extra=NO_PREDICT,
                                     admin_token=srv.admin_token, port=srv.port)
                time.sleep(1.0)
                acked = load.finish()
                try:
                    out = check_after(again, token, acked, running)
                finally:
                    again.stop()
                    srv.stop()
                out["tracebacks"] = len(log_problems(srv.log_text()) + log_problems(again.log_text()))
                totals.update(out)
                print(f"pgrestart round {k}: exit code {code}, {out}", flush=True)
    print(f"pgrestart total over {args.rounds} restarts: {dict(totals)}")


def cmd_timing(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        srv = start_server(work, f"sqlite:///{work / 'kant.db'}", cluster="1x8:V100", extra=NO_PREDICT)
        try:
            real = srv.tenant("t")
            near = real[:-1] + ("A" if real[-1] != "A" else "B")
            far = "kant_" + "z" * (len(real) - 5)
            times: dict[str, list[float]] = {"near": [], "far": []}
            with httpx.Client(base_url=srv.url) as c:
                for i in range(args.samples):
                    for label, tok in (("near", near), ("far", far)) if i % 2 else (("far", far), ("near", near)):
                        t0 = time.perf_counter()
                        r = c.get("/v1/clock", headers={"Authorization": f"Bearer {tok}"})
                        times[label].append(time.perf_counter() - t0)
                        assert r.status_code == 401
        finally:
            srv.stop()
        for label, ts in times.items():
            print(f"timing {label}-miss token: median {statistics.median(ts) * 1e6:.0f} us over {len(ts)} "
                  f"requests (P90 {statistics.quantiles(ts, n=10)[-1] * 1e6:.0f} us)")


def cmd_whatif(args: argparse.Namespace) -> None:
    import threading

    huge = {"horizon_h": 24 * 366, "runs": 100,
            "scenarios": [{"name": f"s{k}", "add_nodes": 100_000} for k in range(16)]}
    many = {"horizon_h": 24, "runs": 100, "scenarios": [{"name": f"s{k}", "add_nodes": 10 * k} for k in range(4)]}
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        srv = start_server(work, f"sqlite:///{work / 'kant.db'}", cluster=f"{args.nodes}x8:V100", clock="wall",
                           extra=[*NO_PREDICT, "--whatif-budget", str(args.budget)])
        try:
            token = srv.tenant("t")
            with srv.client(token) as c:
                # a cluster's worth of short jobs (2-10 s, planned 30 s: the twin's run-time ratios),
                # then whole-node jobs of 1-30 minutes: the cluster stays full, the rest waits
                short = [{"workers": 1, "gpus_per_worker": 8, "duration_s": 2.0 + i % 9, "estimate_s": 30.0}
                         for i in range(args.nodes)]
                for k in range(0, len(short), 500):
                    assert c.post("/v1/jobs/batch", json={"jobs": short[k:k + 500]}).status_code == 201
                for k in range(0, args.pending, 500):
                    jobs = [{"workers": 1, "gpus_per_worker": 8, "duration_s": 60.0 * (1 + (k + i) % 30),
                             "estimate_s": 60.0 * (1 + (k + i) % 25)} for i in range(min(500, args.pending - k))]
                    assert c.post("/v1/jobs/batch", json={"jobs": jobs}).status_code == 201
            time.sleep(12.0)  # the short ones end
            lat: list[float] = []
            stop = threading.Event()

            load = srv.tenant("load")

            def submits() -> None:
                with srv.client(load) as c:
                    while not stop.is_set():
                        t0 = time.perf_counter()
                        c.post("/v1/jobs", json={"gpus_per_worker": 1, "duration_s": 60.0})
                        lat.append(time.perf_counter() - t0)
                        time.sleep(0.05)

            threads = [threading.Thread(target=submits, daemon=True) for _ in range(4)]
            for th in threads:
                th.start()
            for label, body in (("largest", huge), ("100 runs x 4 scenarios", many)):
                lat.clear()
                cycles = srv.admin.get("/v1/cluster").json()["cycles"]
                probe: list[int] = []

                def second(probe: list[int] = probe) -> None:
                    time.sleep(1.0)
                    with srv.client(token) as c2:
                        r2 = c2.post("/v1/whatif", json={"horizon_h": 1})
                        probe.append(r2.status_code)

                th2 = threading.Thread(target=second)
                th2.start()
                t0 = time.monotonic()
                with srv.client(token) as c:
                    r = c.post("/v1/whatif", json=body, timeout=3600)
                took = time.monotonic() - t0
                th2.join()
                out = r.json()
                cycles = srv.admin.get("/v1/cluster").json()["cycles"] - cycles
                what = (f"runs {out['runs']} of {out['runs_asked']}, cut: {out['cut'] is not None}"
                        if r.status_code == 200 else out["message"])
                print(f"whatif {label}: {r.status_code} in {took:.1f} s ({what}); the same tenant's second "
                      f"request meanwhile: {probe}; {len(lat)} submits meanwhile, latency median "
                      f"{statistics.median(lat) * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms; {cycles} cycles",
                      flush=True)
            stop.set()
            for th in threads:
                th.join(30)
            print(f"whatif: tracebacks in the log: {len(log_problems(srv.log_text()))}")
        finally:
            srv.stop()


def cmd_inputs(args: argparse.Namespace) -> None:
    import os

    import hypothesis

    os.environ["KANT_FUZZ_EXAMPLES"] = str(args.examples)
    counts: Counter[str] = Counter()
    current = [""]
    real_given = hypothesis.given

    def counting_given(*a: Any, **kw: Any) -> Any:
        def wrap(fn: Any) -> Any:
            import functools

            @functools.wraps(fn)
            def inner(*fa: Any, **fkw: Any) -> Any:
                counts[current[0]] += 1
                return fn(*fa, **fkw)

            return real_given(*a, **kw)(inner)

        return wrap

    hypothesis.given = counting_given  # type: ignore[assignment]
    import test_traces_fuzz as traces
    from reliability import test_config_fuzz as configs

    cases: list[tuple[str, Any, tuple[Any, ...]]] = [
        *((f"trace {s.label}", traces.test_mutated_rows_raise_only_kant_errors, (s,)) for s in traces.SOURCES),
        ("mapping jsonl rows", traces.test_mutated_jsonl_through_the_example_mapping, ()),
        ("mapping yaml", traces.test_mutated_mapping_yaml_gives_config_errors, ()),
        ("parquet columns", traces.test_mutated_parquet_columns_give_input_errors, ()),
        ("random mappings", traces.test_random_mappings_give_only_kant_errors, ()),
        *((f"policy {n}", configs.test_mutated_policies_give_config_errors, (n, p)) for n, p in configs.POLICIES),
        *((f"services {p.stem}", configs.test_mutated_services_files_give_config_errors, (p,))
          for p in configs.SERVICES),
    ]
    failed, skipped = [], []
    t0 = time.monotonic()
    for label, fn, params in cases:
        current[0] = label
        try:
            fn(*params)
        except BaseException as exc:  # a failure (or pytest's skip) is reported, the run goes on
            if type(exc).__name__ == "Skipped":
                skipped.append(label)
            else:
                failed.append(f"{label}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        print(f"inputs {label}: {counts[label]} generated inputs", flush=True)
    print(f"inputs total: {sum(counts.values())} generated malformed inputs over {len(cases) - len(skipped)} "
          f"inputs kinds in {time.monotonic() - t0:.0f} s; failures {len(failed)}; skipped (file absent) "
          f"{len(skipped)}")
    for f in failed:
        print("  failure:", f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fuzz")
    f.add_argument("--examples", type=int, default=75)
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--roles", default="admin,tenant", help="whose tokens send the requests (admin, tenant)")
    c = sub.add_parser("crash")
    c.add_argument("--rounds", type=int, default=10)
    c.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    c.add_argument("--seed", type=int, default=0)
    fo = sub.add_parser("failover")
    fo.add_argument("--rounds", type=int, default=5)
    p = sub.add_parser("pgrestart")
    p.add_argument("--rounds", type=int, default=5)
    t = sub.add_parser("timing")
    t.add_argument("--samples", type=int, default=2000)
    i = sub.add_parser("inputs")
    i.add_argument("--examples", type=int, default=400)
    w = sub.add_parser("whatif")
    w.add_argument("--budget", type=float, default=30.0)
    w.add_argument("--nodes", type=int, default=100)
    w.add_argument("--pending", type=int, default=2000)
    args = ap.parse_args()
    {"whatif": cmd_whatif, "inputs": cmd_inputs,
     "fuzz": cmd_fuzz, "crash": cmd_crash, "failover": cmd_failover, "pgrestart": cmd_pgrestart,
     "timing": cmd_timing}[args.cmd](args)


if __name__ == "__main__":
    main()
