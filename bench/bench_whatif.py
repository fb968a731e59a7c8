"""The digital twin's accuracy and speed (docs/whatif.md, issues 12 and 30).

    python bench/bench_whatif.py --accuracy [--jobs 5000 --start-day 42 --cluster SPEC --runs 10 ...]
    python bench/bench_whatif.py --accuracy --live [--jobs 3300 --warmup-h 15 --live-speed 600 ...]
    python bench/bench_whatif.py --capacity [--capacity-at-h 24 --capacity-horizon-h 48 --capacity-add 8 ...]
    python bench/bench_whatif.py --ratio-check                        # (bench/whatif_ratios.py)
    python bench/bench_whatif.py --work-check 24 --work-check 70      # (bench/whatif_ratios.py)
    python bench/bench_whatif.py --predict-cost 70                    # (bench/whatif_ratios.py)
    python bench/bench_whatif.py --speed [--nodes 10000 --running 8000 --pending 10000]
    python bench/bench_whatif.py --sweep 32x8:V100,leaf=4,spine=2 --sweep 40x8:V100,leaf=4,spine=2 ...

``--live``: the same slice through a real ``kant serve --demo philly`` (subprocess, accelerated clock,
SQLite in a temporary folder, noisy estimates by ``--estimate-noise``), its pending jobs polled over
HTTP (``GET /v1/jobs/{id}/why``) as a user would (:func:`live_replay`). Its size is ``--jobs`` and
``--live-speed``: a config takes about (arrival hours - 0) x 3600 / speed wall seconds, plus the
start and the drain. ``--capacity``: the capacity-planning example (:func:`capacity`).

Accuracy: a contiguous Philly slice is replayed through the live service's scheduling loop
(:class:`~kant.service.loop.ServiceLoop` in-process: SQLite in a temporary folder, the manual clock,
the simulated executor; each job is submitted at its trace time, as tests/service/test_equivalence.py
does). At every simulated hour after a warm-up, until the last arrival, the loop's twin snapshot is run
forward (``predict(snap, runs=R)``) and every pending job's predicted start (P10 / P50 / P90) is
recorded with its queue position (``loop.why(id)["position"]``), the mean run time of the jobs
finished so far and the number of running jobs. When the replay is over, each prediction is compared
with the job's actual first start. Two estimate regimes: ``exact`` (the estimate is the true run time:
only later arrivals make the twin wrong) and ``noisy`` (the estimate is the true run time times
``exp(N(0, sigma))``, drawn once per job with a fixed seed: estimates are wrong as users' are, and the
twin's run-time ratios carry that error). Two naive baselines: ``naive`` = prediction time + position x
mean run time of finished jobs; ``naive/R`` = the same divided by the number of running jobs (one job
ends every mean / R seconds).

Speed: a plain :class:`~kant.scheduler.Scheduler` on N 8-GPU nodes with jobs running and jobs pending
(Philly's gang and run-time mix); times the snapshot, its JSON form, loading it back, ``predict`` with
1 and 10 runs, and a what-if with one scenario (100 more nodes) over 24 h, for kant and volcano-binpack.

Everything is deterministic (fixed seeds). Figures, never asserts. Pin with ``taskset -c 1``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kant.config import load_policy
from kant.model.cluster import Cluster
from kant.model.job import JobTable
from kant.model.store import JobStore
from kant.scheduler import Scheduler
from kant.service.loop import Advance
from kant.traces import load_cluster, read_philly
from kant.twin import TwinSnapshot, predict
from kant.twin.whatif import Scenario, compare
from whatif_slice import (
    HOUR,
    fast_folder,
    noisy_estimates,
    philly_slice,
    slice_loop,
    snapshot_after,
    submit_instant,
    table,
)

ACCURACY_CLUSTER = "40x8:V100,leaf=4,spine=2"
ACCURACY_POLICIES = ("kant", "k8s-default", "slurm-backfill")
REGIMES = ("exact", "noisy")


# --- accuracy ---------------------------------------------------------------------------------------
@dataclass
class Replay:
    """One policy x regime: every prediction (rows of ``preds``) and each job's actual first start."""

    policy: str
    regime: str
    preds: list[tuple[int, float, float | None, float | None, float | None, int, float, int]] = field(
        default_factory=list)  # (slice row, time, p10, p50, p90, position, mean run time, running jobs)
    actual: dict[int, float | None] = field(default_factory=dict)  # slice row -> first start
    ticks: int = 0
    arrival_preds: int = 0  # preds[:arrival_preds] were made while jobs still arrived; the rest, after
    wall_s: float = 0.0
    predict_s: float = 0.0


def replay(jobs: JobTable, estimates: np.ndarray, policy: str, regime: str, cluster: str, *, runs: int,
           warmup_s: float, tick_s: float, drain_ticks: bool = True, arrivals: bool = True,
           calibrate: bool = True) -> Replay:
    from kant.twin.calibrate import Calibration

    out = Replay(policy, regime)
    cal = Calibration()  # (as the service's twin does: bands widened to its own past errors)
    dump: list[Any] | None = [] if os.environ.get("KANT_CAL_DUMP") else None
    t_wall = time.perf_counter()
    submit = jobs.submit.tolist()
    duration = jobs.duration.tolist()
    est = estimates.tolist()
    n = len(jobs)
    with slice_loop(jobs, policy, cluster, "kant-whatif-") as (db, loop):
        row_of: dict[int, int] = {}  # service job id -> slice row
        submitted: list[int] = []  # service ids in submit order
        finished_sum, finished_n, finished_seen = 0.0, 0, set()
        draining = False

        def tick(t: float) -> None:
            nonlocal finished_sum, finished_n
            loop.turn([Advance(t)])  # the instant's events and cycle: the live state at t
            for job_id in submitted:  # jobs that have left the loop since the last tick ended
                if job_id not in loop.active and job_id not in finished_seen:
                    finished_seen.add(job_id)
                    finished_sum += duration[row_of[job_id]]
                    finished_n += 1
            mean_rt = finished_sum / finished_n if finished_n else math.nan
            snap = loop.twin_snapshot()
            t0 = time.perf_counter()
            # (after the last arrival nothing more comes: the arrival model, which cannot know the trace
            # ended, is left out, so that the table of those predictions checks the replay itself)
            pred = predict(snap, runs=runs, arrivals=arrivals and not draining)
            jobs_pred = pred.pending()
            if dump is not None:  # (KANT_CAL_DUMP: the calibrator's inputs, for offline study)
                ids = snap.ids
                dump.append((snap.now, {ids[r]: run.start for r, run in snap.sched.running.items()},
                             [ids[r] for r in snap.sched.pending], [dict(p) for p in jobs_pred],
                             {p["id"]: row_of[p["id"]] for p in jobs_pred}, draining))
            if calibrate:
                cal.calibrate(snap, jobs_pred)
            out.predict_s += time.perf_counter() - t0
            running = len(loop.sched.running)
            for p in jobs_pred:
                pos = loop.why(p["id"])["position"]
                out.preds.append((row_of[p["id"]], t, p["p10"], p["p50"], p["p90"], int(pos), mean_rt, running))
            out.ticks += 1

        next_tick = submit[0] + warmup_s
        last = submit[-1]
        i = 0
        while i < n:
            t = submit[i]
            while next_tick < t:
                tick(next_tick)
                next_tick += tick_s
            i, got = submit_instant(db, loop, jobs, est, submit, i)
            for job_id, row in got:
                row_of[job_id] = row
                submitted.append(job_id)
        while next_tick <= last:
            tick(next_tick)
            next_tick += tick_s
        out.arrival_preds = len(out.preds)
        draining = True
        # after the last arrival nothing new comes: with exact estimates the twin must be exact here
        while drain_ticks and len(loop.sched.queue) and next_tick <= last + 30 * 86400:
            tick(next_tick)
            next_tick += tick_s
        loop.turn([Advance(last + 1e9)])  # every job ends
        after = None
        while True:
            page = db.jobs.list(limit=1000, after_id=after)
            if not page:
                break
            for job in page:
                out.actual[row_of[job.id]] = job.first_start_time
            after = page[-1].id
    if dump is not None:
        import pickle
        with open(f"{os.environ['KANT_CAL_DUMP']}-{policy}-{regime}.pkl", "wb") as fh:
            pickle.dump({"ticks": dump, "actual": out.actual, "arrival_preds": out.arrival_preds}, fh)
    out.wall_s = time.perf_counter() - t_wall
    return out


# --- accuracy through a real kant serve ------------------------------------------------------------------
@dataclass
class LivePolls:
    """What the live replay saw besides the scored predictions: pending jobs polled, and how many of
    those polls had no predicted start (all of them; those the twin's last snapshot already held)."""

    polls: int = 0
    no_prediction: int = 0
    no_prediction_after_refresh: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    ages: list[float] = field(default_factory=list)  # per scored prediction: poll time - the snapshot's time


def live_replay(policy: str, regime: str, args: argparse.Namespace) -> tuple[Replay, LivePolls]:
    """The slice replayed into a real ``kant serve --demo philly`` (accelerated clock at
    ``--live-speed``, noisy estimates with ``--estimate-noise``, SQLite in a temporary folder): every
    ``--live-poll`` wall seconds, from the warm-up's end to the last arrival, up to
    ``--live-polled`` pending jobs (in turn, by id) are asked ``GET /v1/jobs/{id}/why``; the
    predictions are then scored against the jobs' actual first starts (read from the API once every
    polled job has started). The naive baselines' inputs (mean run time of the jobs finished by then,
    running jobs) come from the jobs' final records."""
    import secrets
    import socket
    import subprocess
    import sys

    import httpx

    out = Replay(policy, regime)
    seen = LivePolls()
    t_wall = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kant-whatif-live-", dir=fast_folder()) as tmp:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        token = secrets.token_urlsafe(24)
        cmd = [sys.executable, "-m", "kant.cli.main", "serve", "--db", f"sqlite:///{tmp}/kant.db", "--cluster",
               args.cluster, "--policy", policy, "--port", str(port), "--demo", "philly", "--demo-start",
               f"{args.start_day * 86400:.0f}s", "--demo-limit", str(args.jobs), "--speed", str(args.live_speed),
               "--predict-runs", str(args.runs), "--predict-every", str(args.live_predict_every),
               "--predict-workers", str(args.live_predict_workers),
               "--token-out", f"{tmp}/token", "--log-level", "warning"]
        if regime == "noisy":
            cmd += ["--estimate-noise", str(args.sigma), "--estimate-noise-seed", str(args.seed)]
        log = open(f"{tmp}/serve.log", "wb")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "KANT_ADMIN_TOKEN": token})
        c = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"},
                         timeout=60.0)
        try:
            deadline = time.monotonic() + 120
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"kant serve exited: {Path(f'{tmp}/serve.log').read_text()[-3000:]}")
                try:
                    if c.get("/readyz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("kant serve not ready within 120 s")
                time.sleep(0.1)
            jobs = philly_slice(args.start_day, args.jobs)
            first, last = float(jobs.submit[0]), float(jobs.submit[-1])
            warm = first + args.warmup_h * HOUR
            polled: set[int] = set()
            turn = 0
            while True:
                t0 = time.monotonic()
                now = float(c.get("/v1/clock").json()["now"])
                if now > last:
                    break
                if now >= warm:
                    pending = sorted(_pending_ids(c))
                    k = min(args.live_polled, len(pending))
                    pick = [pending[(turn * k + i) % len(pending)] for i in range(k)] if pending else []
                    turn += 1
                    for job_id in pick:
                        why = c.get(f"/v1/jobs/{job_id}/why").json()
                        if why.get("state") != "pending":
                            continue
                        seen.polls += 1
                        pred = why.get("prediction")
                        at = float(c.get("/v1/clock").json()["now"])
                        if pred is None or pred.get("p50") is None:
                            seen.no_prediction += 1
                            text = str(why.get("prediction_text") or "")
                            if pred is not None or not text.startswith("no predicted start yet"):
                                seen.no_prediction_after_refresh += 1  # (not: arrived after the last snapshot)
                            key = (pred or {}).get("reason") or text.split(":")[0]
                            seen.reasons[key] = seen.reasons.get(key, 0) + 1
                            continue
                        polled.add(job_id)
                        seen.ages.append(at - float(pred["as_of"]))
                        out.preds.append((job_id, at, pred["p10"], pred["p50"], pred["p90"],
                                          int(why.get("position") or 0), math.nan, 0))
                    out.ticks += 1
                time.sleep(max(args.live_poll - (time.monotonic() - t0), 0.0))
            out.arrival_preds = len(out.preds)
            deadline = time.monotonic() + args.live_drain_wall
            while time.monotonic() < deadline and polled & set(_pending_ids(c)):
                time.sleep(2.0)
            rows = _all_jobs(c)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
            c.close()
    starts = {r["id"]: r["first_start_time"] for r in rows}
    out.actual = {j: starts.get(j) for j in {p[0] for p in out.preds}}
    # the naive baselines' inputs at each poll, from the final records
    done = sorted((float(r["end_time"]), float(r["end_time"]) - float(r["start_time"]))
                  for r in rows if r["end_time"] is not None and r["start_time"] is not None)
    ends = np.asarray([d[0] for d in done])
    cum = np.cumsum([d[1] for d in done]) if done else np.zeros(0)
    spans = [(float(r["start_time"]), math.inf if r["end_time"] is None else float(r["end_time"]))
             for r in rows if r["start_time"] is not None]
    st = np.sort(np.asarray([a for a, _ in spans]))
    en = np.sort(np.asarray([b for _, b in spans]))
    fixed = []
    for job_id, at, p10, p50, p90, pos, _, _ in out.preds:
        k = int(np.searchsorted(ends, at, side="right"))
        mean_rt = float(cum[k - 1] / k) if k else math.nan
        running = int(np.searchsorted(st, at, side="right") - np.searchsorted(en, at, side="right"))
        fixed.append((job_id, at, p10, p50, p90, pos, mean_rt, running))
    out.preds = fixed
    out.wall_s = time.perf_counter() - t_wall
    return out, seen


def read_later(r: Replay, age_s: float) -> Replay:
    """``r``'s predictions made while jobs arrived, as a user would read them ``age_s`` after their
    snapshot (as the live service answers, its twin's run taking wall time): only jobs still pending
    then, the naive baselines anchored at the reading (with the position, mean run time and running
    jobs of the snapshot: the in-process replay has no state in between)."""
    out = Replay(r.policy, r.regime, actual=r.actual, ticks=r.ticks)
    out.preds = [(row, t + age_s, *rest) for row, t, *rest in r.preds[:r.arrival_preds]
                 if (a := r.actual.get(row)) is not None and a >= t + age_s]
    out.arrival_preds = len(out.preds)
    return out


def _pending_ids(c: Any) -> list[int]:
    ids: list[int] = []
    after = None
    while True:
        params: dict[str, Any] = {"state": "pending", "limit": 1000}
        if after is not None:
            params["after"] = after
        page = c.get("/v1/jobs", params=params).json()
        ids += [int(j["id"]) for j in page["items"]]
        after = page["next"]
        if after is None:
            return ids


def _all_jobs(c: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    after = None
    while True:
        params: dict[str, Any] = {"limit": 1000}
        if after is not None:
            params["after"] = after
        page = c.get("/v1/jobs", params=params).json()
        out += page["items"]
        after = page["next"]
        if after is None:
            return out


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else math.nan


def summarise(r: Replay, drain: bool = False) -> dict[str, Any]:
    """Error figures of one replay's predictions made while jobs arrived (``drain``: those made after
    the last arrival), in hours (see the module docstring)."""
    rows: list[tuple[float, ...]] = []
    never = no_p50 = 0
    preds = r.preds[r.arrival_preds:] if drain else r.preds[:r.arrival_preds]
    for row, when, q10, q50, q90, pos, mean_rt, running in preds:
        started = r.actual.get(row)
        if started is None:
            never += 1
            continue
        if q50 is None:
            no_p50 += 1
            continue
        rows.append((started, q50, -math.inf if q10 is None else q10, math.inf if q90 is None else q90,
                     when + pos * mean_rt, when + pos * mean_rt / max(running, 1), when))
    a = np.asarray(rows, dtype=np.float64).reshape(-1, 7)
    actual, p50, lo, hi, naive, naive_r, t = (a[:, k] for k in range(7))
    err = np.abs(p50 - actual) / HOUR
    ok_naive = ~np.isnan(naive)  # (no job had finished yet: no mean run time)
    e_naive = np.abs(naive - actual)[ok_naive] / HOUR
    e_naive_r = np.abs(naive_r - actual)[ok_naive] / HOUR
    wait = (actual - t) / HOUR  # how far ahead the prediction looked
    long = wait >= 1.0
    return {
        "policy": r.policy, "regime": r.regime, "ticks": r.ticks, "predictions": len(preds),
        "compared": len(rows), "never_started": never, "no_p50": no_p50,
        "jobs_predicted": len({p[0] for p in preds}),
        "twin_p50_h": _pct(err, 50), "twin_p90_h": _pct(err, 90),
        "twin_bias_p50_h": _pct((p50 - actual) / HOUR, 50),
        "in_band": float(np.mean((lo <= actual) & (actual <= hi))) if len(rows) else math.nan,
        "below_band": float(np.mean(actual < lo)) if len(rows) else math.nan,  # the twin was too late
        "above_band": float(np.mean(actual > hi)) if len(rows) else math.nan,  # the twin was too early
        "exact_1min": float(np.mean(err <= 1 / 60)) if len(rows) else math.nan,
        "naive_compared": int(ok_naive.sum()),
        "naive_p50_h": _pct(e_naive, 50), "naive_p90_h": _pct(e_naive, 90),
        "naive_r_p50_h": _pct(e_naive_r, 50), "naive_r_p90_h": _pct(e_naive_r, 90),
        # issue 30's median-error target is this ratio (<= 0.5)
        "twin_over_naive_r_p50": _ratio(_pct(err, 50), _pct(e_naive_r, 50)),
        "remaining_wait_p50_h": _pct(wait, 50), "remaining_wait_p90_h": _pct(wait, 90),
        # the predictions that looked at least an hour ahead
        "long_compared": int(long.sum()),
        "long_twin_p50_h": _pct(err[long], 50), "long_twin_p90_h": _pct(err[long], 90),
        "long_in_band": float(np.mean(((lo <= actual) & (actual <= hi))[long])) if long.any() else math.nan,
        "long_naive_p50_h": _pct(np.abs(naive - actual)[long & ok_naive] / HOUR, 50),
        "long_naive_r_p50_h": _pct(np.abs(naive_r - actual)[long & ok_naive] / HOUR, 50),
        "wall_s": round(r.wall_s, 1), "predict_s": round(r.predict_s, 1),
    }


def _ratio(a: float, b: float) -> float:
    """``a / b`` (NaN where either is NaN or ``b`` is 0)."""
    return a / b if b and not (math.isnan(a) or math.isnan(b)) else math.nan


def _f(x: float, nd: int = 2) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def _p(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.0f} %"


def print_accuracy(summaries: Sequence[dict[str, Any]]) -> None:
    head = ("policy", "regime", "preds", "jobs", "twin P50", "twin P90", "bias P50", "in band", "< P10", "> P90",
            "naive P50",
            "naive P90", "naive/R P50", "naive/R P90", "twin / naive/R P50", "never", "no P50")
    lines: list[Sequence[str]] = [head]
    for s in summaries:
        lines.append((s["policy"], s["regime"], str(s["compared"]), str(s["jobs_predicted"]), _f(s["twin_p50_h"]),
                      _f(s["twin_p90_h"]), _f(s["twin_bias_p50_h"]), _p(s["in_band"]), _p(s["below_band"]),
                      _p(s["above_band"]), _f(s["naive_p50_h"]), _f(s["naive_p90_h"]), _f(s["naive_r_p50_h"]),
                      _f(s["naive_r_p90_h"]), _f(s["twin_over_naive_r_p50"]),
                      str(s["never_started"]), str(s["no_p50"])))
    table(lines)
    print("\nerrors |predicted - actual start| in hours; bias = median(predicted - actual) (< 0: too early); "
          "in band: P10 <= actual <= P90; < P10: started before the band (the twin was too late), > P90: after it; "
          "twin / naive/R P50: the twin's median error over naive/R's (issue 30's target: <= 0.5)")
    print("\npredictions whose job actually waited >= 1 h more after the prediction:")
    head2 = ("policy", "regime", "preds", "wait P50", "wait P90", "twin P50", "twin P90", "in band", "naive P50",
             "naive/R P50")
    lines = [head2]
    for s in summaries:
        lines.append((s["policy"], s["regime"], str(s["long_compared"]), _f(s["remaining_wait_p50_h"]),
                      _f(s["remaining_wait_p90_h"]), _f(s["long_twin_p50_h"]), _f(s["long_twin_p90_h"]),
                      _p(s["long_in_band"]), _f(s["long_naive_p50_h"]), _f(s["long_naive_r_p50_h"])))
    table(lines)
    print("(wait P50 / P90: of all compared predictions, actual start - prediction time)")
    print("\npredictions made after the last arrival (nothing more arrives: exact estimates should give exact "
          "predictions):")
    head3 = ("policy", "regime", "preds", "twin P50", "twin P90", "within 1 min", "in band")
    lines = [head3]
    for s in summaries:
        d = s["drain"]
        lines.append((s["policy"], s["regime"], str(d["compared"]), _f(d["twin_p50_h"]), _f(d["twin_p90_h"]),
                      _p(d["exact_1min"]), _p(d["in_band"])))
    table(lines)


def accuracy(args: argparse.Namespace) -> list[dict[str, Any]]:
    jobs = philly_slice(args.start_day, args.jobs)
    span_h = (float(jobs.submit[-1]) - float(jobs.submit[0])) / HOUR
    print(f"Philly slice: {len(jobs):,} jobs from day {args.start_day:g} ({span_h:.1f} h of arrivals); cluster "
          f"{args.cluster}; {args.runs} runs per prediction; predictions every {args.tick_h:g} h after a "
          f"{args.warmup_h:g} h warm-up; noisy estimates: lognormal sigma {args.sigma:g}, seed {args.seed}")
    estimates = {"exact": np.asarray(jobs.duration, dtype=np.float64),
                 "noisy": noisy_estimates(jobs, args.sigma, args.seed)}
    summaries, raw = [], []
    episodes: list[tuple[tuple[str, str], Replay]] = []
    t_all = time.perf_counter()
    for regime in args.regime or REGIMES:
        for policy in args.policy or ACCURACY_POLICIES:
            if args.live:
                r, seen = live_replay(policy, regime, args)
                s = summarise(r)
                s["drain"] = summarise(r, drain=True)
                s["polls"], s["no_prediction"] = seen.polls, seen.no_prediction
                s["no_prediction_after_refresh"] = seen.no_prediction_after_refresh
                s["no_prediction_reasons"] = seen.reasons
                ages = np.asarray(seen.ages) / HOUR
                s["age_p50_h"], s["age_p90_h"] = _pct(ages, 50), _pct(ages, 90)
                print(f"  {policy} / {regime}: {r.ticks} polls rounds, {seen.polls:,} pending jobs polled, "
                      f"{seen.no_prediction:,} without a prediction ({seen.no_prediction_after_refresh:,} of them "
                      f"already in the twin's snapshot), {r.wall_s:.1f} s wall; {seen.reasons}; the answers' age "
                      f"(poll - snapshot) P50 {s['age_p50_h']:.3f} h, P90 {s['age_p90_h']:.3f} h", flush=True)
            else:
                r = replay(jobs, estimates[regime], policy, regime, args.cluster, runs=args.runs,
                           warmup_s=args.warmup_h * HOUR, tick_s=args.tick_h * HOUR, arrivals=not args.no_arrivals,
                           calibrate=not args.no_calibration)
                s = summarise(r)
                s["drain"] = summarise(r, drain=True)
                episodes.append(((policy, regime), r))
                print(f"  {policy} / {regime}: {r.ticks} ticks, {len(r.preds):,} predictions, "
                      f"{r.wall_s:.1f} s wall ({r.predict_s:.1f} s predicting)", flush=True)
                for age_h in args.answer_age_h or []:
                    a = summarise(read_later(r, age_h * HOUR))
                    s.setdefault("answer_age", {})[str(age_h)] = a
                    print(f"    read {age_h:g} h after the snapshot: {a['compared']:,} predictions, twin P50 "
                          f"{a['twin_p50_h']:.3f} h, bias {a['twin_bias_p50_h']:+.3f} h, in band {a['in_band']:.0%}, "
                          f"naive/R P50 {a['naive_r_p50_h']:.3f} h, twin / naive/R {a['twin_over_naive_r_p50']:.2f}",
                          flush=True)
            summaries.append(s)
            raw.append({"policy": policy, "regime": regime,
                        "preds": [list(p) for p in r.preds], "ages": seen.ages if args.live else None,
                        "actual": {str(k): v for k, v in sorted(r.actual.items())}})
    print()
    print_accuracy(summaries)
    if not args.live:  # the median signed error before and after hour 30 of the predictions (two queueing episodes)
        for (policy, regime), r in episodes:
            rows = [((t - r.preds[0][1]) / HOUR, (q50 - a) / HOUR)
                    for row, t, _, q50, _, _, _, _ in r.preds[:r.arrival_preds]
                    if q50 is not None and (a := r.actual.get(row)) is not None]
            e = np.asarray(rows, dtype=np.float64).reshape(-1, 2)
            parts = []
            for name, m in (("before 30 h", e[:, 0] < 30), ("from 30 h", e[:, 0] >= 30)):
                if m.any():
                    parts.append(f"{name}: {int(m.sum()):,} predictions ({m.mean():.0%}), bias "
                                 f"{np.median(e[m, 1]):+.2f} h, {np.mean(e[m, 1] < 0):.0%} start after P50")
            print(f"  {policy} / {regime}: " + "; ".join(parts))
    print(f"\nwall time, all replays: {time.perf_counter() - t_all:.1f} s")
    if args.json:
        p = Path(args.json)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"args": vars(args), "summaries": summaries, "raw": raw}))
        print(f"wrote {p}")
    return summaries


# --- capacity planning: the arrival model against the real arrivals ---------------------------------------
def capacity(args: argparse.Namespace) -> dict[str, Any]:
    """The capacity-planning example of docs/whatif.md: at ``--capacity-at-h`` hours into the slice,
    the twin's what-if (``compare(..., arrivals=True)``: the arrival model learned from the
    arrivals so far) with +0 / +N nodes over ``--capacity-horizon-h``, against the simulator run from
    the same snapshot with the slice's real later arrivals and every job's true run time (one run per
    scenario): the honest check of the arrival model."""
    from kant.twin.arrivals import ARRIVAL_COLUMNS, ArrivalModel
    from kant.twin.arrivals import Arrivals as Drawn
    from kant.twin.forward import run_forward
    from kant.twin.whatif import _apply, _capacity

    jobs = philly_slice(args.start_day, args.jobs)
    est = noisy_estimates(jobs, args.sigma, args.seed) if args.capacity_regime == "noisy" else \
        np.asarray(jobs.duration, dtype=np.float64)
    at = float(jobs.submit[0]) + args.capacity_at_h * HOUR
    horizon = args.capacity_horizon_h * HOUR
    policy = (args.policy or ["kant"])[0]
    t0 = time.perf_counter()
    snap, row_of = snapshot_after(jobs, est, policy, args.cluster, at)
    adds = [0, *(a for a in (args.capacity_add or [8, 16]) if a)]
    scen = [Scenario(f"+{a}", add_nodes=a) for a in adds if a]
    print(f"Philly slice: {len(jobs):,} jobs from day {args.start_day:g}; {policy} on {args.cluster}; snapshot at "
          f"{args.capacity_at_h:g} h ({len(snap.sched.pending):,} pending, "
          f"{len(snap.sched.running):,} running, "
          f"{len(snap.arrivals.get('submit', ())):,} arrivals of history); horizon {args.capacity_horizon_h:g} h; "
          f"{args.capacity_regime} estimates; {args.runs} runs (built in {time.perf_counter() - t0:.1f} s)")
    seen = np.flatnonzero(jobs.submit <= at)
    history = [_work(jobs, seen, est)]  # (planned, true GPU-hours, jobs, first submit) of each part
    if args.capacity_history_d:
        # a service that had run for longer: the trace's submits of the days before the slice join the
        # snapshot's arrival history (the cluster's state is the slice's, as without them)
        before = philly_slice(args.start_day - args.capacity_history_d, args.jobs * 10)
        keep = np.flatnonzero(before.submit < float(jobs.submit[0]))
        est_before = noisy_estimates(before, args.sigma, args.seed + 1) if args.capacity_regime == "noisy" else \
            np.asarray(before.duration, dtype=np.float64)
        history.append(_work(before, keep, est_before))
        old = _arrival_cols(before, keep, est_before)
        snap = dataclasses.replace(snap, arrivals={c: old[c] + tuple(snap.arrivals[c]) for c in ARRIVAL_COLUMNS})
        print(f"arrival history: {keep.size:,} submits of the {args.capacity_history_d:g} days before the slice added")
    model = ArrivalModel.learn(snap.arrivals, snap.now)
    if model is not None:
        print(f"arrival model: {model.describe()}")
    t0 = time.perf_counter()
    predicted = compare(snap, scen, horizon_s=horizon, runs=args.runs, arrivals=True)
    t_pred = time.perf_counter() - t0
    # the real future: the slice's arrivals in (at, at + horizon], every job with its true run time
    later = np.flatnonzero((jobs.submit > at) & (jobs.submit <= at + horizon))
    span = at - min(h[3] for h in history)
    per = horizon / span  # the history's rate, scaled to the horizon
    came = _work(jobs, later, est)
    print(f"arrivals' work in GPU-hours, planned / true: the history's rate over the horizon "
          f"{sum(h[0] for h in history) * per:,.0f} / {sum(h[1] for h in history) * per:,.0f} "
          f"({sum(h[2] for h in history):,} jobs in {span / HOUR / 24:.2f} days); "
          f"what came {came[0]:,.0f} / {came[1]:,.0f} ({came[2]:,} jobs)")
    real_cols = _arrival_cols(jobs, later, est)
    # (only its history is read: the real arrivals are given as the draw, so it has no rates or bursts)
    real = ArrivalModel(real_cols, np.zeros(24), at, at, np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64),
                        np.zeros(0))
    drawn = Drawn(np.asarray(real_cols["submit"]), np.arange(later.size, dtype=np.int64))
    true_active = np.asarray([float(jobs.duration[row_of[i]]) for i in snap.ids])
    true_later = np.asarray([float(jobs.duration[r]) for r in later])
    replayed = []
    t0 = time.perf_counter()
    for sc in (Scenario("+0"), *scen):
        pol, cl, sched, _ = _apply(snap, sc)
        res = run_forward(snap, true_active, policy=pol, cluster=cl, sched=sched, horizon_s=horizon,
                          arrivals=(real, drawn, true_later))
        replayed.append(_capacity(snap, [res], snap.now, snap.now + horizon, True))
    t_real = time.perf_counter() - t0
    lines: list[Sequence[str]] = [("nodes", "source", "arrivals", "wait P50", "wait P90", "1 GPU P90", "2-8 P90",
                                   "9+ GPUs P90", "queue mean", "queue at end")]
    out: dict[str, list[dict[str, Any]]] = {"predicted": [], "replayed": []}
    for p, r, a in zip(predicted, replayed, adds, strict=True):
        for source, cap in (("twin (model)", p.capacity), ("simulator (real)", r)):
            lines.append((f"+{a}", source, f"{cap['arrivals_sampled']:.0f}", _h(cap["wait_all"]["p50"]),
                          _h(cap["wait_all"]["p90"]), _h(_gang(cap, ("1",))), _h(_gang(cap, ("2-4", "5-8"))),
                          _h(_gang(cap, ("9-16", "17-32", "33-64", ">64"))), _f(cap["queue_mean"], 1),
                          _f(cap["queue_end"], 1)))
        out["predicted"].append(dict(p.capacity))
        out["replayed"].append(r)
    table(lines)
    print(f"(waits in hours over every job pending at the snapshot or arriving within the horizon; P90 of a gang "
          f"group: the largest of its buckets' P90s; '>h': later than the horizon; twin {t_pred:.1f} s, "
          f"simulator {t_real:.1f} s)")
    return out


def _work(jobs: JobTable, rows: np.ndarray, est: np.ndarray) -> tuple[float, float, int, float]:
    """Rows' planned and true GPU-hours, their count and their first submit."""
    gpus = np.asarray(jobs.total_gpus, dtype=np.float64)[rows]
    return (float((est[rows] * gpus).sum() / HOUR), float((np.asarray(jobs.duration)[rows] * gpus).sum() / HOUR),
            int(rows.size), float(jobs.submit[rows].min()) if rows.size else math.inf)


def _arrival_cols(jobs: JobTable, rows: np.ndarray, est: np.ndarray) -> dict[str, tuple[Any, ...]]:
    """Slice rows as an arrival history (kant.twin.arrivals.ARRIVAL_COLUMNS), planned at ``est``."""
    tn = jobs.tenant_names
    return {
        "submit": tuple(float(jobs.submit[r]) for r in rows), "tenant": tuple(tn[int(jobs.tenant[r])] for r in rows),
        "user": tuple(tn[int(jobs.tenant[r])] for r in rows), "workers": tuple(int(jobs.workers[r]) for r in rows),
        "gpus_per_worker": tuple(int(jobs.gpus_per_worker[r]) for r in rows),
        "gpu_milli": tuple(0 for _ in rows), "cpu_milli": tuple(0 for _ in rows),
        "memory_mib": tuple(0 for _ in rows), "gpu_type": tuple(None for _ in rows),
        "priority": tuple(0 for _ in rows), "kind": tuple(0 for _ in rows),
        "estimate": tuple(float(est[r]) if est[r] > 0 else 86400.0 for r in rows)}


def _h(x: float | None) -> str:
    return ">h" if x is None else f"{x / HOUR:.2f}"


def _gang(cap: Mapping[str, Any], buckets: tuple[str, ...]) -> float | None:
    """The largest P90 wait among these gang buckets (None: one is past the horizon; nan: none)."""
    got = [g for g in cap["wait_by_gang"] if g["gang"] in buckets]
    if not got:
        return math.nan
    if any(g["p90"] is None for g in got):
        return None
    return max(float(g["p90"]) for g in got)


def sweep(args: argparse.Namespace) -> None:
    """The slice in the plain simulator on each ``--sweep`` cluster: how long jobs wait (to size the
    accuracy cluster: queues that form for hours, then drain)."""
    from kant.sim import Simulator

    jobs = philly_slice(args.start_day, args.jobs)
    print(f"Philly slice: {len(jobs):,} jobs from day {args.start_day:g}; waits in hours (the simulator, exact "
          "estimates)")
    lines: list[Sequence[str]] = [("cluster", "policy", "started", "wait P50", "wait P90", "wait max")]
    for spec in args.sweep:
        for policy in args.policy or ACCURACY_POLICIES:
            res = Simulator(load_cluster(spec), jobs, load_policy(policy)).run()
            w = (res.first_start - jobs.submit) / HOUR
            ok = ~np.isnan(w)
            lines.append((spec, policy, f"{int(ok.sum()):,} / {len(jobs):,}", _f(_pct(w[ok], 50)),
                          _f(_pct(w[ok], 90)), _f(float(w[ok].max()) if ok.any() else math.nan)))
    table(lines)


# --- speed ------------------------------------------------------------------------------------------
def speed_scheduler(policy: str, nodes: int, running: int, pending: int, seed: int) -> tuple[Scheduler, float]:
    """A live scheduler on ``nodes`` 8-GPU nodes with ``running`` jobs running (whole-node gangs of 1 or
    2 nodes, Philly run times) and ``pending`` jobs pending (Philly's gang and run-time mix), the
    queue topped up after each cycle until that many wait."""
    rng = np.random.default_rng(seed)
    philly = read_philly()
    store = JobStore(tenant_names=["t0", "t1", "t2", "t3"])
    sched = Scheduler(load_policy(policy), Cluster.uniform(nodes, 8, gpu_type="H100"), store)
    pick = rng.integers(0, len(philly), size=running + 3 * pending)
    durations = np.maximum(philly.duration[pick], 60.0)
    k = 0
    for j in range(running):  # gangs of 1 or 2 whole nodes: about 96 % of the GPUs busy
        store.add(f"r{j}", submit=0.0, workers=1 + int(rng.random() < 0.2), gpus_per_worker=8,
                  tenant=f"t{j % 4}", estimate=float(durations[k]))
        k += 1
    for row in range(running):
        sched.submit(row, 0.0)
    sched.cycle(0.0)
    now = 60.0
    while len(sched.queue) < pending:
        for _ in range(pending - len(sched.queue)):
            p = int(pick[k])
            row = store.add(f"p{k}", submit=now, workers=int(philly.workers[p]),
                            gpus_per_worker=int(philly.gpus_per_worker[p]), tenant=f"t{k % 4}",
                            estimate=float(durations[k]))
            sched.submit(row, now)
            k += 1
        sched.cycle(now)
        now += 1.0
    return sched, now - 1.0


def _clock() -> float:
    return time.perf_counter()


def speed_one(policy: str, args: argparse.Namespace, ratios: tuple[float, ...]) -> None:
    t = _clock()
    sched, now = speed_scheduler(policy, args.nodes, args.running, args.pending, args.seed)
    build = _clock() - t
    used = int(sched.state.used_gpus().sum())
    print(f"\n{policy}: {len(sched.running):,} running ({used:,} of {8 * args.nodes:,} GPUs busy), "
          f"{len(sched.queue):,} pending (built in {build:.1f} s)")
    figures: list[tuple[str, float, str]] = []
    t = _clock()
    snap = TwinSnapshot.capture(sched, now, ratios=ratios)
    figures.append(("TwinSnapshot.capture", _clock() - t, f"{len(snap):,} jobs"))
    t = _clock()
    text = json.dumps(snap.to_dict())
    figures.append(("to_dict + json.dumps", _clock() - t, f"{len(text) / 1e6:.1f} MB of JSON"))
    t = _clock()
    TwinSnapshot.from_dict(json.loads(text))
    figures.append(("json.loads + from_dict", _clock() - t, ""))
    pending = list(snap.sched.pending)
    for runs in (1, 10):
        t = _clock()
        pred = predict(snap, runs=runs)
        started = int(np.isfinite(pred.p50[pending]).sum())
        figures.append((f"predict(runs={runs})", _clock() - t, f"P50 start for {started:,} of {len(pending):,} "
                        "pending (no horizon)"))
    t = _clock()
    res = compare(snap, [Scenario("+100 nodes", add_nodes=100)], horizon_s=24 * HOUR, runs=1)
    figures.append(("compare(+100 nodes, 24 h, runs=1)", _clock() - t,
                    "; ".join(f"{r.name}: {r.waits['started']:,} start within 24 h" for r in res)))
    for name, s, note in figures:
        print(f"  {name:<36} {s:8.2f} s  {note}")


def speed(args: argparse.Namespace) -> None:
    ratios = tuple(np.exp(np.random.default_rng(1).normal(0.0, 1.0, 2000)).tolist())
    print(f"{args.nodes:,} nodes x 8 GPUs; target {args.running:,} running and {args.pending:,} pending jobs; "
          f"2,000 run-time ratios (lognormal sigma 1)")
    for policy in args.speed_policy or ("kant", "volcano-binpack"):
        speed_one(policy, args, ratios)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accuracy", action="store_true", help="replay a Philly slice and score the predictions")
    ap.add_argument("--speed", action="store_true", help="time the twin on a 10,000-node snapshot")
    ap.add_argument("--sweep", action="append", metavar="CLUSTER",
                    help="print the slice's waits in the simulator on this cluster (repeatable)")
    ap.add_argument("--jobs", type=int, default=5000, help="Philly slice size (jobs)")
    ap.add_argument("--start-day", type=float, default=42.0, help="the slice starts at this day of the trace")
    ap.add_argument("--cluster", default=ACCURACY_CLUSTER)
    ap.add_argument("--policy", action="append", help="accuracy: policies (default kant, k8s-default, "
                                                          "slurm-backfill)")
    ap.add_argument("--regime", action="append", choices=REGIMES)
    ap.add_argument("--runs", type=int, default=10, help="forward runs per prediction")
    ap.add_argument("--sigma", type=float, default=1.0, help="noisy estimates: lognormal sigma")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--warmup-h", type=float, default=12.0, help="no predictions in the first hours")
    ap.add_argument("--tick-h", type=float, default=1.0, help="hours between predictions")
    ap.add_argument("--json", help="accuracy: save summaries and every prediction here")
    ap.add_argument("--ratio-check", action="store_true",
                    help="how each way of drawing run-time ratios reproduces later jobs' work (docs/whatif.md)")
    ap.add_argument("--capacity", action="store_true",
                    help="the capacity-planning example: the twin's +0/+8/+16 nodes against the real arrivals")
    ap.add_argument("--capacity-at-h", type=float, default=24.0, help="--capacity: snapshot this far into the slice")
    ap.add_argument("--capacity-horizon-h", type=float, default=48.0, help="--capacity: what-if horizon")
    ap.add_argument("--capacity-add", type=int, action="append",
                    help="--capacity: nodes added (default 8 and 16; +0 always)")
    ap.add_argument("--capacity-history-d", type=float, default=0.0,
                    help="--capacity: replay this many days of the trace before the slice (arrival history)")
    ap.add_argument("--capacity-regime", choices=REGIMES, default="noisy")
    ap.add_argument("--no-calibration", action="store_true",
                    help="accuracy (in-process): the runs' band only (not widened to the twin's past errors)")
    ap.add_argument("--no-arrivals", action="store_true",
                    help="accuracy (in-process): predict without the arrival model (as before it)")
    ap.add_argument("--live", action="store_true",
                    help="accuracy through a real `kant serve --demo philly` (accelerated clock) polled over HTTP")
    ap.add_argument("--live-speed", type=float, default=600.0, help="--live: service seconds per wall second")
    ap.add_argument("--live-poll", type=float, default=2.0, help="--live: wall seconds between poll rounds")
    ap.add_argument("--live-polled", type=int, default=40, help="--live: pending jobs asked /why per round")
    ap.add_argument("--live-predict-every", type=float, default=1.0, help="--live: kant serve --predict-every")
    ap.add_argument("--live-predict-workers", type=int, default=2, help="--live: kant serve --predict-workers")
    ap.add_argument("--answer-age-h", type=float, action="append", metavar="H",
                    help="accuracy (in-process): also score each prediction as read H hours after its snapshot")
    ap.add_argument("--live-drain-wall", type=float, default=300.0,
                    help="--live: wall seconds to wait after the last arrival for the polled jobs to start")
    ap.add_argument("--work-check", type=float, action="append", metavar="H",
                    help="the twin's sampled work against the true one, H hours into the slice (kant, noisy)")
    ap.add_argument("--running-check", type=float, action="append", metavar="H",
                    help="the running jobs' remaining run times against the twin's, the full slice's and the "
                         "history's medians, H hours into the slice (kant, noisy)")
    ap.add_argument("--predict-cost", type=float, action="append", metavar="H",
                    help="CPU seconds of the ratio model and of predict(runs=10) on the slice's snapshot at H hours")
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--running", type=int, default=8_000)
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--speed-policy", action="append")
    args = ap.parse_args()
    if not (args.accuracy or args.speed or args.sweep or args.capacity or args.ratio_check or args.work_check
            or args.predict_cost or args.running_check):
        ap.error("give --accuracy, --speed, --capacity, --ratio-check, --work-check, --running-check, "
                 "--predict-cost and/or --sweep")
    if args.ratio_check or args.work_check or args.predict_cost or args.running_check:
        from whatif_ratios import predict_cost, ratio_check, running_check, work_check  # (bench/whatif_ratios.py)

        if args.ratio_check:
            ratio_check(args)
        if args.work_check:
            work_check(args)
        if args.running_check:
            running_check(args)
        if args.predict_cost:
            predict_cost(args)
    if args.capacity:
        capacity(args)
    if args.sweep:
        sweep(args)
    if args.accuracy:
        accuracy(args)
    if args.speed:
        speed(args)


if __name__ == "__main__":
    main()
