"""The twin's run-time ratio model against the Philly slice's true run times (docs/whatif.md, "Which
ratio a job draws"); run through ``bench/bench_whatif.py``:

    python bench/bench_whatif.py --ratio-check                      # later jobs' work, by way of drawing
    python bench/bench_whatif.py --work-check 24 --work-check 70    # the live snapshot's sampled work
    python bench/bench_whatif.py --predict-cost 70                  # CPU cost of the ratio model
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from kant.twin.predict import (
    ARRIVAL_HORIZON_S,
    RatioModel,
    arrival_model,
    draw_run,
    neighbours,
    predict,
    sample_durations,
)
from kant.twin.ratios import km
from whatif_slice import HOUR, noisy_estimates, philly_slice, snapshot_after, table

FREED_H = (1, 3, 6, 12)  # --work-check: GPUs the running jobs free by then


def _window_draws(planned: np.ndarray, ratio: np.ndarray, est: np.ndarray, slope: Any, rng: np.random.Generator,
                  times: int) -> np.ndarray:
    """The first model's draws (before the censoring-aware one): for each of ``est``, ``times`` ratios
    of the finished jobs nearest in planned run time (a quarter), carried along ``slope``."""
    o = np.argsort(planned)
    ps, rs = planned[o], ratio[o]
    n = ps.size
    k = n // 4
    lo = np.clip(np.searchsorted(ps, est) - k // 2, 0, n - k)
    rows = []
    for _ in range(times):
        pick = lo + rng.integers(0, k, est.size)
        rows.append(est * rs[pick] * (est / ps[pick]) ** slope)
    return np.vstack(rows)


def _local_slopes(planned: np.ndarray, ratio: np.ndarray, est: np.ndarray) -> np.ndarray:
    """Each window's own least-squares slope of log ratio on log planned (the local linear variant)."""
    o = np.argsort(planned)
    xs, ys = np.log(planned[o]), np.log(ratio[o])
    n = xs.size
    k = n // 4
    cx, cy = np.concatenate([[0], np.cumsum(xs)]), np.concatenate([[0], np.cumsum(ys)])
    cxx, cxy = np.concatenate([[0], np.cumsum(xs * xs)]), np.concatenate([[0], np.cumsum(xs * ys)])
    lo = np.clip(np.searchsorted(planned[o], est) - k // 2, 0, n - k)
    hi = lo + k
    mx, my = (cx[hi] - cx[lo]) / k, (cy[hi] - cy[lo]) / k
    vx, cv = (cxx[hi] - cxx[lo]) / k - mx * mx, (cxy[hi] - cxy[lo]) / k - mx * my
    out: np.ndarray = np.where(vx > 1e-9, cv / np.maximum(vx, 1e-12), 0.0)
    return out


def _ols_slope(planned: np.ndarray, ratio: np.ndarray) -> float:
    x, y = np.log(planned), np.log(ratio)
    return float(np.cov(x, y, bias=True)[0, 1] / np.var(x))


def _row(seed: int, history: str, mode: str, draws: np.ndarray, et: np.ndarray, dt: np.ndarray) -> tuple[str, ...]:
    top = et >= np.quantile(et, 0.99)
    return (str(seed), history, mode, f"{draws.sum(1).mean() / dt.sum():.2f}",
            f"{float(draws[:, top].mean() / dt[top].mean()):.2f}", f"{np.mean(dt < np.median(draws, 0)):.2f}")


def ratio_check(args: argparse.Namespace) -> None:
    """How well each way of drawing run-time ratios reproduces the work of later jobs: the slice's jobs
    with noisy estimates (seeds 12, 13, 14); 40 draws per job; printed: the sampled work over the
    actual, in all and for the top 1 % of planned run times, and how often the actual run time is below
    the job's median draw.

    First table, every ratio known: the ratios of jobs 0-1,999 (then 2,000-3,999) as the finished
    history, drawn for jobs 2,000-4,799 (then 4,000-4,899) from the quarter nearest in planned run time,
    as they are, carried along the global log-log slope, along each window's own slope, or by the
    censoring-aware model (:class:`kant.twin.ratios.RatioModel`, here with nothing censored).

    Second table, the history as a service sees it when job 2,000 (then 4,000) is submitted, each job
    taken to start at its submit (on the accuracy cluster most start at once): the last 2,000 jobs
    finished by then, and the jobs still running. Drawn for the next 2,800 (then 900) jobs: the first
    model (the finished jobs only, global slope) against the censoring-aware one (the running jobs
    censored, left-truncated at the history's cut)."""
    jobs = philly_slice(args.start_day, 5000)
    d0 = np.asarray(jobs.duration, dtype=np.float64)
    s0 = np.asarray(jobs.submit, dtype=np.float64)
    head = ("noise seed", "history", "draw", "work / actual", "top 1 %", "P(actual < median)")
    known: list[Sequence[str]] = [head]
    seen: list[Sequence[str]] = [head]
    for seed in (12, 13, 14):
        e0 = noisy_estimates(jobs, 1.0, seed)
        ok = (d0 > 0) & (e0 > 0)
        d, e, s = d0[ok], e0[ok], s0[ok]
        for h0, h1, t0, t1 in ((0, 2000, 2000, 4800), (2000, 4000, 4000, 4900)):
            planned, ratio = e[h0:h1], d[h0:h1] / e[h0:h1]
            et, dt = e[t0:t1], d[t0:t1]
            rng = np.random.default_rng(0)
            for mode, slope in (("window", 0.0), ("global slope", _ols_slope(planned, ratio)),
                                ("window's slope", _local_slopes(planned, ratio, et))):
                known.append(_row(seed, f"{h0}-{h1 - 1}", mode, _window_draws(planned, ratio, et, slope, rng, 40),
                                  et, dt))
            model = RatioModel.observed(planned, ratio, np.ones(planned.size, dtype=bool))
            known.append(_row(seed, f"{h0}-{h1 - 1}", "censoring-aware",
                              np.vstack([model.sample(et, rng) for _ in range(40)]), et, dt))
            # the history as the service has it when job h1 arrives
            now = s[h1]
            end = s + d
            done = np.flatnonzero((s < now) & (end <= now))
            done = done[np.argsort(end[done], kind="stable")]
            cut = float(end[done[-2001]]) if done.size > 2000 else None
            done = done[-2000:]
            running = np.flatnonzero((s < now) & (end > now))
            rng = np.random.default_rng(0)
            p_f, r_f = e[done], d[done] / e[done]
            before = _window_draws(p_f, r_f, et, _ols_slope(p_f, r_f), rng, 40)
            seen.append(_row(seed, f"at job {h1}", "finished only (before)", before, et, dt))
            p_all = np.concatenate([p_f, e[running]])
            exit_ = np.concatenate([r_f, (now - s[running]) / e[running]])
            event = np.concatenate([np.ones(done.size, dtype=bool), np.zeros(running.size, dtype=bool)])
            start = np.concatenate([s[done], s[running]])
            entry = np.full(exit_.size, -math.inf)
            if cut is not None:
                late = cut - start > 0
                entry[late] = np.log((cut - start[late]) / p_all[late])
            model = RatioModel.observed(p_all, exit_, event, entry)
            seen.append(_row(seed, f"at job {h1}", f"censored ({running.size} running)",
                             np.vstack([model.sample(et, rng) for _ in range(40)]), et, dt))
    table(known)
    print()
    table(seen)


def work_check(args: argparse.Namespace) -> None:
    """The work the twin samples (20 draws of :func:`sample_durations`) against the true run times, for
    the running jobs' remaining time and the pending jobs, in GPU-hours, at each ``--work-check`` hour;
    then the GPUs the running jobs free within 1, 3, 6 and 12 hours (mean over the draws / true) and how
    often a running job's true remaining time is below its median draw; then the model's slope and the
    window of the longest-planned pending job (:func:`_window_check`)."""
    jobs = philly_slice(args.start_day, args.jobs)
    est = noisy_estimates(jobs, args.sigma, args.seed)
    for h in args.work_check:
        snap, row_of = snapshot_after(jobs, est, "kant", args.cluster, float(jobs.submit[0]) + h * HOUR)
        model = RatioModel.fit(snap)
        gpus = np.asarray(snap.jobs["workers"], dtype=np.float64) * np.asarray(snap.jobs["gpus_per_worker"])
        true = np.asarray([float(jobs.duration[row_of[i]]) for i in snap.ids])
        draws = np.asarray([sample_durations(snap, np.random.default_rng([args.seed, k]), model) for k in range(20)])
        run = list(snap.sched.running)
        pend = list(snap.sched.pending)
        elapsed = np.asarray([snap.now - snap.sched.running[r].start for r in run])
        left_draws = np.maximum(draws[:, run] - elapsed, 0)
        left = left_draws.mean(0)
        true_left = np.maximum(true[run] - elapsed, 0)
        print(f"{h:g} h: {len(run)} running, GPU-hours left sampled {np.sum(left * gpus[run]) / HOUR:,.0f}, true "
              f"{np.sum(true_left * gpus[run]) / HOUR:,.0f}; {len(pend)} pending, GPU-hours "
              f"sampled {np.sum(draws[:, pend].mean(0) * gpus[pend]) / HOUR:,.0f}, true "
              f"{np.sum(true[pend] * gpus[pend]) / HOUR:,.0f}, planned "
              f"{np.sum(np.asarray(snap.jobs['estimate'], dtype=np.float64)[pend] * gpus[pend]) / HOUR:,.0f}",
              flush=True)
        freed = ", ".join(f"+{x} h {np.mean((left_draws <= x * HOUR) @ gpus[run]):.0f} / "
                          f"{np.sum((true_left <= x * HOUR) * gpus[run]):.0f}" for x in FREED_H)
        print(f"  GPUs freed by the running jobs (sampled / true): {freed}; true remaining below the median draw: "
              f"{np.mean(true_left < np.median(left_draws, 0)):.2f} of the running jobs", flush=True)
        _window_check(snap, model, true)


def _window_check(snap: Any, model: RatioModel, true: np.ndarray) -> None:
    """--work-check's last line: the slope (and the finished jobs' least-squares one), and the window the
    longest-planned pending job draws from: its planned run times, its ended jobs, the pending jobs that
    draw from it, and how the true ``z = log ratio - slope x log planned`` of its jobs (finished: their
    ratio; running: their true run time) goes with the planned run time (medians by quartile)."""
    est = np.asarray(snap.jobs["estimate"], dtype=np.float64)
    pend = [r for r in snap.sched.pending if 0 < est[r] < math.inf]
    fin_p, fin_r = np.asarray(snap.planned), np.asarray(snap.ratios)
    run = [r for r in snap.sched.running if 0 < est[r] < math.inf]
    p_all = np.concatenate([fin_p, est[run]])
    z_all = np.log(np.concatenate([fin_r, true[run] / est[run]])) - model.slope * np.log(p_all)
    ls = float(np.polyfit(np.log(fin_p), np.log(fin_r), 1)[0])
    line = (f"  ratio model: {fin_r.size:,} finished, {model.event.size - fin_r.size:,} running (censored); slope "
            f"{model.slope:.3f} (least squares over the finished: {ls:.3f}); windows of {model.k}")
    if pend:
        top = model.rows(float(est[pend].max()))
        p_w = model.planned[top]
        inside = [r for r in pend if model.rows(float(est[r])) == top]
        mine = (p_all >= p_w[0]) & (p_all <= p_w[-1])
        quart = np.searchsorted(np.quantile(p_w, [0.25, 0.5, 0.75]), p_all[mine])
        meds = ", ".join(f"{np.median(z_all[mine][quart == q]):.2f}" for q in range(4) if (quart == q).any())
        line += (f"; the longest-planned pending job's window: {p_w.size} jobs planned {p_w[0] / HOUR:.2f} to "
                 f"{p_w[-1] / HOUR:,.0f} h (median {np.median(p_w) / HOUR:.2f} h), {int(model.event[top].sum())} "
                 f"ended; {len(inside)} pending jobs draw from it (median planned "
                 f"{np.median(est[inside]) / HOUR:.2f} h); the true z of its jobs by planned quartile: {meds}")
    print(line, flush=True)


def running_check(args: argparse.Namespace) -> None:
    """How the running jobs' remaining run times compare with three medians, at each ``--running-check``
    hour of the slice (kant, noisy): the twin's (40 draws of :func:`sample_durations`); the full
    slice's (every job of the slice planned within a factor e^0.5 of the job's and longer than its
    elapsed time, an oracle that knows the future jobs); and the Kaplan-Meier estimate of the history in
    run-time space with every job started at its submission (no scheduler: what the history alone
    says, censored at the hour). A median that fits has about half of the true remaining times below it."""
    jobs = philly_slice(args.start_day, args.jobs)
    est0 = noisy_estimates(jobs, args.sigma, args.seed)
    true_all = np.asarray(jobs.duration, dtype=np.float64)
    log_est = np.log(np.maximum(est0, 1.0))
    sub = np.asarray(jobs.submit, dtype=np.float64) - float(jobs.submit[0])
    for h in args.running_check:
        snap, _ = snapshot_after(jobs, est0, "kant", args.cluster, float(jobs.submit[0]) + h * HOUR)
        model = RatioModel.fit(snap)
        est = np.asarray(snap.jobs["estimate"], dtype=np.float64)
        names = snap.jobs["name"]
        run = list(snap.sched.running)
        el = np.asarray([snap.now - snap.sched.running[r].start for r in run])
        draws = np.asarray([sample_durations(snap, np.random.default_rng([args.seed, k]), model)
                            for k in range(40)])[:, run]
        left = np.asarray([true_all[int(names[r])] for r in run]) - el
        twin = np.median(np.maximum(draws - el, 0), 0)
        pool = np.asarray([_median_left(true_all[(np.abs(log_est - np.log(est[r])) < 0.5) & (true_all > e)], e)
                           for r, e in zip(run, el, strict=True)])
        ok = ~np.isnan(pool)
        # the history alone, no scheduler: every job started at its submission, censored at the hour
        now = h * HOUR
        seen = sub <= now
        ended = seen & (sub + true_all <= now)
        going = np.flatnonzero(seen & ~ended)
        hist = np.flatnonzero(seen)
        run_time = np.where(ended, true_all, now - sub)
        below = []
        for j in going:
            e = now - sub[j]
            near = hist[np.abs(log_est[hist] - log_est[j]) < 0.5]
            m = _km_median_left(run_time[near], ended[near], e) if near.size >= 5 else math.nan
            if not math.isnan(m):
                below.append(true_all[j] - e < m)
        print(f"{h:g} h: {len(run)} running; true remaining below the twin's median draw: "
              f"{np.mean(left < twin):.2f}; below the full slice's median: {np.mean(left[ok] < pool[ok]):.2f} "
              f"({int(ok.sum())} jobs); no scheduler, {going.size} running: below the history's Kaplan-Meier "
              f"median {np.mean(below):.2f} ({len(below)} jobs with one)", flush=True)


def _median_left(run_times: np.ndarray, elapsed: float) -> float:
    return float(np.median(run_times - elapsed)) if run_times.size >= 5 else math.nan


def _km_median_left(run_time: np.ndarray, ended: np.ndarray, elapsed: float) -> float:
    """The Kaplan-Meier median of the run time left beyond ``elapsed`` (NaN: the estimate places less
    than half its mass beyond ``elapsed`` below its last observation)."""
    x, mass, tail = km(np.log(np.maximum(run_time, 1.0)), ended, np.full(run_time.size, -math.inf))
    keep = x > math.log(max(elapsed, 1.0))
    xm, mm = x[keep], mass[keep]
    total = float(mm.sum()) + tail
    if total <= 0 or mm.sum() / total < 0.5:
        return math.nan
    return float(np.exp(xm[np.searchsorted(np.cumsum(mm) / total, 0.5)]) - elapsed)


def predict_cost(args: argparse.Namespace) -> None:
    """CPU seconds (``time.process_time``) of the ratio model (its fit, and 10 runs' draws of every active
    job and of the sampled arrivals, as :func:`~kant.twin.predict.predict` draws them; best of 3) and
    of ``predict(snap, runs=10)`` (forward runs included), on the slice's live snapshot (kant, noisy)
    at each ``--predict-cost`` hour."""
    jobs = philly_slice(args.start_day, args.jobs)
    est = noisy_estimates(jobs, args.sigma, args.seed)
    for h in args.predict_cost:
        snap, _ = snapshot_after(jobs, est, "kant", args.cluster, float(jobs.submit[0]) + h * HOUR)
        arrivals = arrival_model(snap, True)
        best = math.inf
        for _ in range(3):
            t0 = time.process_time()
            model = RatioModel.fit(snap)
            for k in range(10):
                draw_run(snap, snap.seed, k, model, arrivals, ARRIVAL_HORIZON_S)
            best = min(best, time.process_time() - t0)
        t0 = time.process_time()
        pred = predict(snap, runs=10)
        t_pred = time.process_time() - t0
        print(f"{h:g} h: {len(snap):,} active jobs, {len(snap.ratios):,} ratios ({neighbours(len(snap.ratios))} "
              f"a window); ratio model (fit + 10 runs' draws) {best * 1000:.0f} ms; predict(runs=10) {t_pred:.2f} s "
              f"({int(np.sum(~np.isnan(pred.p50)))} P50s)", flush=True)
