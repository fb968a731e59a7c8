"""The request route's overhead: a replica called through kant's route against the same replica
called directly, at a fixed request rate.

    python bench/bench_router.py                       # 500 requests/s, 15 s per phase
    python bench/bench_router.py --rate 500 --seconds 20 --rounds 2

Real parts on 127.0.0.1: one example model server (``examples/model_server.py``, a subprocess), and
``kant serve``'s app (:func:`kant.service.serve.build_app`, a SQLite database, the simulated executor)
on uvicorn in a second subprocess (this script with ``--kant``), which registers the model server into
its :class:`~kant.service.serving.endpoints.Endpoints` as the replica of service 1 (the replicas'
lifecycle is not the route's; the bench creates the service through the API). The load generator (this
process, uvloop + kept-alive connections by :class:`~kant.service.serving.upstream.Upstreams`, as
``kant load`` sends) sends ``--rate`` requests per second, evenly spaced: open loop, a request is due
whether or not earlier ones were answered, with at most 64 open (one due beyond that waits its turn here). The
generator's own CPU per request is printed per phase with the replica's and kant's: with httpx's pooled
client it was 1.0 ms (direct) to 1.7 ms (route) per request, most of a CPU at 500 requests/s, and the
generator fell behind. Each is ``POST .../v1/completions`` with ``{"max_tokens": 1}`` (about 50 us of
the replica's CPU at ``--ms-per-token 0.05``). Phases of ``--seconds`` alternate, direct then route,
``--rounds`` times, after a warm-up of each. Latency is the client's, from when the request was due to
its answer read; the route's overhead is the route's percentile minus the direct one's. Then
``--sequential`` requests on each path one at a time (each sent when the last was answered): the
overhead without any queueing. With more than 2 CPUs, kant is pinned to CPU 0, the replica to CPU 1 and
the generator to the others (``taskset``). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpcore
import httpx
import numpy as np

from kant.service.serving.upstream import Upstreams

HERE = Path(__file__).resolve().parent
CONCURRENCY = 64  # requests open at once at most, per phase
BODY = b'{"max_tokens": 1}'  # one token: about 50 us of the replica's CPU at --ms-per-token 0.05
ROOT = HERE.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pin(cpus: str) -> list[str]:
    return ["taskset", "-c", cpus] if shutil.which("taskset") and (os.cpu_count() or 1) > 2 else []


def run_kant(port: int, replica_port: int, workdir: Path, token: str) -> None:
    """(``--kant``) ``kant serve``'s app on uvicorn, with the replica registered for service 1."""
    import uvicorn

    from kant.service.config import ServeConfig
    from kant.service.serve import build_app
    from kant.service.server import Service
    from kant.service.serving.endpoints import Endpoint

    svc = Service(ServeConfig(db_url=f"sqlite:///{workdir / 'kant.db'}", cluster="2x8:V100", predict=False,
                              admin_token=token, token_out=workdir / "token", port=port, log_level="warning"))
    svc.prepare()
    svc.start()
    svc.endpoints.add(Endpoint(1, 1, 1, "127.0.0.1", replica_port, ready=True))
    try:
        uvicorn.run(build_app(svc), host="127.0.0.1", port=port, log_level="warning", access_log=False,
                    server_header=False)
    finally:
        svc.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process ``pid`` used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_http(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.05)
    raise SystemExit(f"{what} did not answer {url} in 60 s")


def _headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json"), *((k.lower().encode(), v.encode()) for k, v in headers.items())]


@contextlib.asynccontextmanager
async def _upstreams() -> AsyncIterator[Upstreams]:
    ups = Upstreams()
    try:
        yield ups
    finally:
        await ups.aclose()


async def drive(url: str, headers: dict[str, str], rate: float, seconds: float,
                timeout: float) -> tuple[np.ndarray, int, float]:
    """Send ``rate`` requests/s to ``url`` for ``seconds``; the latencies (s) of the 200s, the count of
    other answers, and the rate achieved."""
    n = int(rate * seconds)
    lat = np.full(n, np.nan)
    bad = 0
    # at most CONCURRENCY requests open at once; one due while the cap is reached waits here, and its
    # latency counts from when it was due (no coordinated omission)
    cap = asyncio.Semaphore(CONCURRENCY)
    target, hdrs = httpcore.URL(url), _headers(headers)
    async with _upstreams() as ups:
        async def one(i: int, due: float) -> None:
            nonlocal bad
            try:
                async with cap:
                    code, _ = await ups.call(b"POST", target, hdrs, BODY, timeout)
            except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError):
                bad += 1  # (a timeout: --timeout bounds each step of a request)
                return
            if code == 200:
                lat[i] = time.perf_counter() - due
            else:
                bad += 1

        tasks = []
        t0 = time.perf_counter()
        for i in range(n):
            due = t0 + i / rate
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(one(i, due)))
        sent = time.perf_counter() - t0
        await asyncio.gather(*tasks)
    return lat[~np.isnan(lat)], bad, n / sent if sent > 0 else float("nan")


async def one_at_a_time(url: str, headers: dict[str, str], n: int) -> np.ndarray:
    """``n`` requests, each sent when the previous one was answered: latencies (s)."""
    lat = np.empty(n)
    target, hdrs = httpcore.URL(url), _headers(headers)
    async with _upstreams() as ups:
        for i in range(n):
            t = time.perf_counter()
            await ups.call(b"POST", target, hdrs, BODY, 10.0)
            lat[i] = time.perf_counter() - t
    return lat


def phase(url: str, headers: dict[str, str], rate: float, seconds: float,
          timeout: float = 10.0) -> tuple[np.ndarray, int, float]:
    import uvloop

    return uvloop.run(drive(url, headers, rate, seconds, timeout))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=500.0, help="requests per second (default 500)")
    ap.add_argument("--seconds", type=float, default=15.0, help="seconds per phase (default 15)")
    ap.add_argument("--rounds", type=int, default=2, help="direct/route phase pairs (default 2)")
    ap.add_argument("--ms-per-token", type=float, default=0.05, help="the replica's CPU ms per token")
    ap.add_argument("--sequential", type=int, default=1000,
                    help="then this many requests one at a time on each path (0: none; default 1000)")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up per path (default 2)")
    ap.add_argument("--kant", nargs=3, metavar=("PORT", "REPLICA_PORT", "WORKDIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.kant:
        run_kant(int(args.kant[0]), int(args.kant[1]), Path(args.kant[2]), os.environ["KANT_ADMIN_TOKEN"])
        return
    cpus = os.cpu_count() or 1
    if shutil.which("taskset") and cpus > 2:
        os.sched_setaffinity(0, set(range(2, cpus)))
    work = Path(tempfile.mkdtemp(prefix="kant-bench-router-"))
    token = f"kant_bench_{secrets.token_hex(16)}"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    rport, kport = free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(work / "replica.log", "ab") as log:
            procs.append(subprocess.Popen([*pin("1"), sys.executable, str(ROOT / "examples" / "model_server.py"),
                                           "--ms-per-token", str(args.ms_per_token)],
                                          env={**env, "PORT": str(rport)}, stdout=log, stderr=subprocess.STDOUT))
        wait_http(f"http://127.0.0.1:{rport}/health", procs[0], "the model server")
        with open(work / "kant.log", "ab") as log:
            procs.append(subprocess.Popen([*pin("0"), sys.executable, __file__, "--kant", str(kport), str(rport),
                                           str(work)], env={**env, "KANT_ADMIN_TOKEN": token}, stdout=log,
                                          stderr=subprocess.STDOUT))
        wait_http(f"http://127.0.0.1:{kport}/readyz", procs[1], "kant")
        auth = {"Authorization": f"Bearer {token}"}
        r = httpx.post(f"http://127.0.0.1:{kport}/v1/tenants", json={"name": "bench"}, headers=auth)
        assert r.status_code == 201, r.text
        r = httpx.post(f"http://127.0.0.1:{kport}/v1/services", headers=auth,
                       json={"name": "model", "tenant": "bench", "gpus_per_replica": 1, "replicas": 0})
        assert r.status_code == 201 and r.json()["id"] == 1, r.text
        direct = f"http://127.0.0.1:{rport}/v1/completions"
        route = f"http://127.0.0.1:{kport}/v1/services/1/serve/v1/completions"
        print(f"bench_router: {args.rate:g} requests/s, {args.seconds:g} s per phase, {args.rounds} rounds, "
              f"{cpus} CPUs{' (kant on CPU 0, the replica on CPU 1)' if pin('0') else ' (not pinned)'}; load average "
              f"{os.getloadavg()[0]:.1f} at the start", flush=True)
        phase(direct, {}, args.rate, args.warmup)  # warm-ups
        phase(route, auth, args.rate, args.warmup)
        got: dict[str, list[np.ndarray]] = {"direct": [], "route": []}
        kant_cpu = routed = 0.0
        for k in range(args.rounds):
            for name, url, headers in (("direct", direct, {}), ("route", route, auth)):
                c0 = cpu_seconds(procs[1].pid)
                g0, r0 = cpu_seconds(os.getpid()), cpu_seconds(procs[0].pid)
                lat, bad, achieved = phase(url, headers, args.rate, args.seconds)
                k_us, g_us, r_us = (1e6 * (cpu_seconds(pid) - c) / max(1, len(lat) + bad)
                                    for pid, c in ((procs[1].pid, c0), (os.getpid(), g0), (procs[0].pid, r0)))
                if name == "route":
                    kant_cpu += cpu_seconds(procs[1].pid) - c0
                    routed += len(lat) + bad
                got[name].append(lat)
                p50, p99 = np.percentile(lat, [50, 99]) * 1000 if len(lat) else (np.nan, np.nan)
                print(f"  round {k + 1} {name:6s}: {len(lat)} answered 200 ({bad} other or no answer in 10 s), "
                      f"sent at {achieved:.0f}/s; P50 {p50:.2f} ms, P99 {p99:.2f} ms; CPU per request: generator "
                      f"{g_us:.0f} us, replica {r_us:.0f} us, kant {k_us:.0f} us", flush=True)
        d, r_ = np.concatenate(got["direct"]), np.concatenate(got["route"])
        d50, d99 = np.percentile(d, [50, 99]) * 1000
        r50, r99 = np.percentile(r_, [50, 99]) * 1000
        print(f"direct: P50 {d50:.2f} ms, P99 {d99:.2f} ms ({len(d)} requests)")
        print(f"route:  P50 {r50:.2f} ms, P99 {r99:.2f} ms ({len(r_)} requests)")
        print(f"route overhead: P50 {r50 - d50:.2f} ms (target <= 2 ms), P99 {r99 - d99:.2f} ms (target <= 10 ms)")
        print(f"kant's CPU per routed request: {1e6 * kant_cpu / routed:.0f} us "
              f"({kant_cpu:.1f} CPU s for {routed:.0f} requests)")
        if args.sequential:
            import uvloop

            seq = {"direct": [], "route": []}  # type: dict[str, list[np.ndarray]]
            for _ in range(2):
                for name, url, headers in (("direct", direct, {}), ("route", route, auth)):
                    seq[name].append(uvloop.run(one_at_a_time(url, headers, args.sequential // 2)))
            sd, sr = (np.percentile(np.concatenate(seq[k]), [50, 99]) * 1000 for k in ("direct", "route"))
            print(f"one at a time ({args.sequential} requests each): direct P50 {sd[0]:.2f} ms, P99 {sd[1]:.2f} ms; "
                  f"route P50 {sr[0]:.2f} ms, P99 {sr[1]:.2f} ms; overhead P50 {sr[0] - sd[0]:.2f} ms, "
                  f"P99 {sr[1] - sd[1]:.2f} ms")
        stats = httpx.get(f"http://127.0.0.1:{kport}/v1/services/1/stats", headers=auth).json()
        print(f"kant's own view (last 60 s): response P50 {stats['response_p50_ms']:.2f} ms, "
              f"P99 {stats['response_p99_ms']:.2f} ms, queue P99 {stats['queue_p99_ms']:.3f} ms")
    finally:
        for p in reversed(procs):
            p.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
            if p.poll() is None:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
