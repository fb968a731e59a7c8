"""The twin's arrival model (kant.twin.arrivals) and what it feeds: rates by hour of the day and
bootstrapped jobs from the history, deterministic draws, predictions whose band covers future
arrivals and says so, one answer from predict and what-if, capacity figures by gang size, and the
band's resolution."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.config import load_policy
from kant.model.job import JobTable, JobTableBuilder
from kant.sim import Simulator
from kant.traces import load_cluster
from kant.twin import SnapshotError, TwinSnapshot, predict
from kant.twin.arrivals import ARRIVAL_COLUMNS, MIN_ARRIVALS, ArrivalModel
from kant.twin.predict import join_parts, predict_part
from kant.twin.whatif import Scenario, compare

HOUR = 3600.0


def history(submits: list[float], gpus: int = 8, estimate: float = 3600.0, tenant: str = "t") -> dict[str, tuple]:
    n = len(submits)
    cols: dict[str, Any] = {"submit": submits, "tenant": [tenant] * n, "user": [tenant] * n, "workers": [1] * n,
                            "gpus_per_worker": [gpus] * n, "gpu_milli": [0] * n, "cpu_milli": [0] * n,
                            "memory_mib": [0] * n, "gpu_type": [None] * n, "priority": [0] * n, "kind": [0] * n,
                            "estimate": [estimate] * n}
    return {c: tuple(cols[c]) for c in ARRIVAL_COLUMNS}


def test_the_rate_follows_the_hour_of_the_day_and_jobs_come_from_the_whole_history() -> None:
    # two days: a burst of 30 one-GPU jobs in hour 3 each day, and one 8-GPU job at noon
    sub, gpus = [], []
    for day in range(2):
        sub += [day * 86400 + 3 * HOUR + 60 * i for i in range(30)]
        gpus += [1] * 30
        sub.append(day * 86400 + 12 * HOUR)
        gpus.append(8)
    hist = history(sub)
    hist["gpus_per_worker"] = tuple(gpus)
    model = ArrivalModel.learn(hist, now=2 * 86400.0)
    assert model is not None
    assert model.rate[3] > 10 * model.rate[12] > 0  # per hour: about 12 against 0.8
    # hour 3: 60 arrivals in 2 h of exposure, shrunk by two hours at the overall rate (62 in the 45 h from
    # the first arrival)
    assert model.rate[3] * HOUR == pytest.approx((60 + 2 * 62 / 45) / 4)
    assert model.rate[12] * HOUR == pytest.approx((2 + 2 * 62 / 45) / 4)
    # four bursts (each day's 30 jobs a minute apart, and each noon job alone): the rare 8-GPU job is
    # drawn as often as the 30-job burst, so at its share of the whole history (2 of 62), in any hour
    assert model.burst_bounds.tolist() == [0, 30, 31, 61, 62]
    arr = model.sample(np.random.default_rng(1), 60 * 86400.0)
    picked = np.asarray(hist["gpus_per_worker"])[arr.rows]
    hours = ((arr.submit % 86400) // HOUR).astype(int)
    assert (picked[hours == 3] == 8).any()
    assert (picked == 8).mean() == pytest.approx(2 / 62, rel=0.3)  # (about 120 bursts drawn)
    assert model.describe()["largest_gang"] == 8
    assert np.all(np.diff(arr.submit) >= 0) and arr.submit.min() >= 2 * 86400.0


def test_one_busy_day_among_quiet_ones_is_averaged_out() -> None:
    # six quiet days of 24 jobs (one an hour) and a last day of 240: the rate is near the week's mean
    # ((6 x 24 + 240) / 7 days: 2.3 an hour), not the last day's 10 an hour
    sub = [d * 86400 + h * HOUR + 1800 for d in range(6) for h in range(24)]
    sub += [6 * 86400 + i * 360.0 for i in range(240)]
    model = ArrivalModel.learn(history(sub), now=7 * 86400.0)
    assert model is not None
    per_hour = model.rate * HOUR
    assert np.all(per_hour > 1.0) and np.all(per_hour < 3.5)
    assert model.expected(86400.0) == pytest.approx((6 * 24 + 240) / 7, rel=0.05)


def test_a_users_burst_arrives_together_at_its_offsets_and_interleaved_users_are_apart() -> None:
    # two users submit sweeps at the same minutes (interleaved in submit order): a's 6 jobs 2 min apart,
    # b's 4 jobs 4 min apart, every 6 hours for two days; each sweep is one burst of its own user
    sub: list[float] = []
    users: list[str] = []
    gpus: list[int] = []
    for start in range(0, 2 * 86400, 6 * 3600):
        for i in range(6):
            sub.append(start + 120.0 * i)
            users.append("a")
            gpus.append(1)
        for i in range(4):
            sub.append(start + 30.0 + 240.0 * i)
            users.append("b")
            gpus.append(8)
    order = np.argsort(sub, kind="stable")
    hist = history([sub[i] for i in order])
    hist["user"] = tuple(users[i] for i in order)
    hist["gpus_per_worker"] = tuple(gpus[i] for i in order)
    model = ArrivalModel.learn(hist, now=2 * 86400.0)
    assert model is not None
    bounds = model.burst_bounds
    assert bounds.size - 1 == 16 and set(np.diff(bounds).tolist()) == {6, 4}
    for b in range(16):  # each burst: one user's jobs, at offsets 0, 120, ... (a) or 0, 240, ... (b)
        rows = model.burst_rows[bounds[b]:bounds[b + 1]]
        who = {hist["user"][r] for r in rows.tolist()}
        assert len(who) == 1
        step = 120.0 if who == {"a"} else 240.0
        assert model.burst_offset[bounds[b]:bounds[b + 1]].tolist() == [step * i for i in range(rows.size)]
    # sampled: each copied burst arrives whole, at its offsets (grouped by burst and start time)
    horizon = 30 * 86400.0
    arr = model.sample(np.random.default_rng(7), horizon)
    burst_of = np.empty(len(model), dtype=np.int64)
    offset_of = np.empty(len(model))
    for b in range(16):
        rows = model.burst_rows[bounds[b]:bounds[b + 1]]
        burst_of[rows] = b
        offset_of[rows] = model.burst_offset[bounds[b]:bounds[b + 1]]
    groups: dict[tuple[int, float], list[int]] = {}
    for r, t in zip(arr.rows.tolist(), arr.submit.tolist(), strict=True):
        groups.setdefault((int(burst_of[r]), round(t - offset_of[r], 3)), []).append(r)
    assert len(groups) >= 100
    for (b, start), rows in groups.items():
        whole = model.burst_rows[bounds[b]:bounds[b + 1]].tolist()
        if start + 720.0 < model.now + horizon:  # (a burst begun near the end is cut there)
            assert sorted(rows) == sorted(whole)
    # the expected count is the hours' rates: bursts are drawn at the rate over the mean burst size
    assert arr.submit.size == pytest.approx(model.expected(30 * 86400.0), rel=0.15)


def test_bursts_do_not_depend_on_the_historys_row_order() -> None:
    sub = [start + 60.0 * i for start in range(0, 2 * 86400, 3 * 3600) for i in range(5)]
    hist = history([float(t) for t in sub])
    model = ArrivalModel.learn(hist, now=2 * 86400.0)
    perm = np.random.default_rng(5).permutation(len(sub))
    shuffled = ArrivalModel.learn({c: tuple(v[i] for i in perm.tolist()) for c, v in hist.items()}, now=2 * 86400.0)
    assert model is not None and shuffled is not None
    assert np.array_equal(model.burst_bounds, shuffled.burst_bounds)
    assert np.array_equal(model.burst_offset, shuffled.burst_offset)
    assert np.array_equal(perm[shuffled.burst_rows], model.burst_rows)  # (the same rows, renumbered)


def test_bursty_history_gives_bursty_draws() -> None:
    # a sweep of 20 jobs a minute apart every 2 hours, across a week: 10-minute counts vary far more
    # than a Poisson process with the same rate would (whose variance equals its mean)
    sub = [start + 60.0 * i for start in range(0, 7 * 86400, 2 * 3600) for i in range(20)]
    model = ArrivalModel.learn(history([float(t) for t in sub]), now=7 * 86400.0)
    assert model is not None
    arr = model.sample(np.random.default_rng(3), 7 * 86400.0)
    counts = np.bincount(((arr.submit - model.now) // 600).astype(np.int64), minlength=7 * 144)
    assert counts.var() > 5 * counts.mean()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(MIN_ARRIVALS, 200), horizon_h=st.floats(0.5, 72))
def test_draws_are_deterministic_and_a_longer_horizon_draws_the_same_first_arrivals(
        seed: int, n: int, horizon_h: float) -> None:
    rng = np.random.default_rng(seed)
    model = ArrivalModel.learn(history(sorted(rng.uniform(0, 3 * 86400, n).tolist())), now=3 * 86400.0)
    assert model is not None
    a = model.sample(np.random.default_rng([seed, 1]), horizon_h * HOUR)
    b = model.sample(np.random.default_rng([seed, 1]), horizon_h * HOUR)
    assert np.array_equal(a.submit, b.submit) and np.array_equal(a.rows, b.rows)
    # whole hours of a shorter draw are a prefix of a longer one's
    whole = np.floor(horizon_h) * HOUR
    c = model.sample(np.random.default_rng([seed, 1]), whole + 7 * HOUR)
    k = int((a.submit < model.now + whole).sum())
    assert np.array_equal(a.submit[:k], c.submit[:k]) and np.array_equal(a.rows[:k], c.rows[:k])


def test_too_little_history_is_no_model() -> None:
    assert ArrivalModel.learn(history([float(i) for i in range(MIN_ARRIVALS - 1)]), now=86400.0) is None
    assert ArrivalModel.learn(history([float(i) for i in range(100)]), now=100.0) is None  # (under an hour)


def busy(policy: str = "fifo-strict") -> tuple[JobTable, TwinSnapshot]:
    """One 8-GPU node: a job running (1 h), two pending (1 h each); a history of 8-GPU jobs every
    30 minutes for two days."""
    b = JobTableBuilder(source="test")
    for i in range(3):
        b.add(f"j{i}", submit=0, duration=HOUR, gpus_per_worker=8, estimate=HOUR)
    jobs = b.build()
    sim = Simulator(load_cluster("1x8:V100"), jobs, load_policy(policy))
    sim.run(until=10.0)
    hist = history([10.0 - 86400 * 2 + 1800 * i for i in range(96)], estimate=1800.0)
    snap = TwinSnapshot.capture(sim.scheduler, 10.0, arrivals=hist)
    return jobs, snap


def test_arrivals_delay_the_pending_jobs_and_the_answer_says_what_the_band_covers() -> None:
    _, snap = busy()
    without = predict(snap, runs=10, arrivals=False)
    assert without.starts.shape[0] == 1  # (nothing uncertain: one run)
    assert [j["p50"] for j in without.pending()] == [HOUR, 2 * HOUR]
    assert "nothing" in without.covers
    fifo = predict(snap, runs=10)
    assert fifo.covers.startswith("future arrivals only")
    # fifo: later arrivals queue behind, so the pending jobs' starts do not move
    assert [j["p50"] for j in fifo.pending()] == [HOUR, 2 * HOUR]
    # under k8s-default (no blocking) a later 8-GPU job may take the node first: starts can only be later
    k8s = predict(snap, runs=10, policy=load_policy("k8s-default"))
    assert np.all(k8s.starts >= without.starts[0][None, :] - 1e-9)
    again = predict(TwinSnapshot.from_dict(json.loads(json.dumps(snap.to_dict()))), runs=10,
                    policy=load_policy("k8s-default"))
    assert np.array_equal(k8s.starts, again.starts, equal_nan=True)  # same snapshot, same bits


def test_predict_and_whatif_give_one_answer_and_capacity_by_gang_size() -> None:
    _, snap = busy("k8s-default")
    pred = predict(snap, runs=6)
    now, more = compare(snap, [Scenario("more", add_nodes=1)], horizon_s=24 * HOUR, runs=6, arrivals=True)
    assert np.array_equal(now.prediction.starts, pred.starts, equal_nan=True)
    assert now.changes_text == "as it is" and more.changes_text == "+1 node of 8 x V100"
    assert now.capacity["arrivals_sampled"] > 20
    # every job of the history plans 8 GPUs x 30 min: 4 GPU-hours per sampled arrival, and 8 arrived
    # per hour of the history (96 in its 48 h)
    assert now.capacity["arrivals_gpu_hours"] == pytest.approx(4 * now.capacity["arrivals_sampled"])
    assert now.capacity["arrival_model"]["planned_gpu_h_per_hour"] == 8.0
    gangs = {g["gang"]: g for g in now.capacity["wait_by_gang"]}
    assert set(gangs) == {"5-8"}
    assert more.capacity["queue_mean"] <= now.capacity["queue_mean"]
    # one node for a job of 30 minutes every 30 minutes and a backlog: a tenth wait past the horizon
    # ("> horizon": None); a second node keeps up
    assert now.capacity["wait_all"]["p90"] is None and more.capacity["wait_all"]["p90"] < 2 * HOUR
    out = json.loads(json.dumps(now.to_dict()))
    assert out["band_covers"] == "future arrivals only (no job has finished yet: estimates taken as exact)"
    assert out["waits"]["from_now_p50"] == pytest.approx(out["waits"]["p50"] - 10.0 + 0.0, abs=1e-6)


def test_the_band_is_at_least_the_clock_resolution_wide() -> None:
    _, snap = busy()
    exact = predict(TwinSnapshot.from_dict({**snap.to_dict(), "arrivals": {}, "info": {"resolution_s": 30.0}}))
    for job in exact.pending():
        assert job["p90"] - job["p10"] == 30.0 and job["p10"] == job["p50"] and job["reason"] is None


def test_bad_arrivals_in_a_snapshot_are_named() -> None:
    _, snap = busy()
    data = snap.to_dict()
    data["arrivals"]["workers"][3] = "x"
    with pytest.raises(SnapshotError, match=r"arrivals.workers\[3\]"):
        TwinSnapshot.from_dict(data)
    data = snap.to_dict()
    data["arrivals"]["tenant"].pop()
    with pytest.raises(SnapshotError, match=r"arrivals\.tenant: 95 values for 96 arrivals"):
        TwinSnapshot.from_dict(data)


# --- the band calibrated on the twin's own past errors ------------------------------------------------
def test_calibration_widens_the_band_by_past_errors_scaled_to_the_lead_time() -> None:
    from kant.twin.calibrate import MIN_RESIDUALS, SCALE_S, Calibration

    cal = Calibration()
    lead = 3600.0 - SCALE_S  # (errors are scaled by lead + SCALE_S: one hour here)
    jobs = [{"id": i, "p50": lead, "p10": lead, "p90": lead} for i in range(2 * MIN_RESIDUALS)]
    assert not cal.apply(0.0, [dict(j) for j in jobs])  # nothing learned yet: unchanged
    cal.observe(0.0, jobs)
    # every job started 360 s after its P90 (even ids) or 180 s before its P10 (odd); job 0 was cancelled
    starts = {i: lead + (360.0 if i % 2 == 0 else -180.0) for i in range(1, 2 * MIN_RESIDUALS)}
    cal.started(starts, pending=[])
    assert len(cal) == 2 * MIN_RESIDUALS - 1
    new = [{"id": 999, "p50": 1000.0 + lead, "p10": 990.0 + lead, "p90": 1005.0 + lead},
           {"id": 998, "p50": None, "p10": None, "p90": None},
           {"id": 997, "p50": 1000.0 + 3 * 3600.0 - SCALE_S, "p10": 1000.0 + 3 * 3600.0 - SCALE_S, "p90": None}]
    assert cal.apply(1000.0, new)
    # the runs' band widened by -0.05 h / +0.1 h per hour of lead + SCALE_S
    assert new[0]["p10"] == pytest.approx(990.0 + lead - 180.0)
    assert new[0]["p90"] == pytest.approx(1005.0 + lead + 360.0)
    assert new[1]["p10"] is None
    assert new[2]["p10"] == pytest.approx(1000.0 + 3 * 3600.0 - SCALE_S - 3 * 180.0) and new[2]["p90"] is None
    assert "widened to the twin's own errors on 99 past predictions" in cal.covers("run-time error only")


def test_calibration_follows_the_recent_errors() -> None:
    from kant.twin.calibrate import SCALE_S, Calibration

    cal = Calibration()
    lead = 3600.0 - SCALE_S
    # 100 predictions two days ago started an hour late; 100 made 10 minutes ago started on time
    old = [{"id": i, "p50": lead, "p10": lead, "p90": lead} for i in range(100)]
    recent = [{"id": 100 + i, "p50": 48 * 3600.0 + lead, "p10": 48 * 3600.0 + lead, "p90": 48 * 3600.0 + lead}
              for i in range(100)]
    cal.observe(0.0, old)
    cal.observe(48 * 3600.0, recent)
    cal.started({**{i: lead + 3600.0 for i in range(100)}, **{100 + i: 48 * 3600.0 + lead for i in range(100)}}, [])
    now = 48 * 3600.0 + 600.0
    job = {"id": 5000, "p50": now + lead, "p10": now + lead, "p90": now + lead}
    assert cal.apply(now, [job])
    # half the errors were an hour late, but those are 8 half-lives old: the band follows the recent ones
    assert job["p90"] == pytest.approx(now + lead)


@pytest.mark.parametrize("policy", ["kant", "k8s-default", "slurm-backfill", "fifo-strict"])
def test_stopping_once_every_pending_job_started_changes_no_start(policy: str) -> None:
    _, snap = busy(policy)
    full = predict(snap, runs=4, until_started=False)
    short = predict(snap, runs=4)
    assert np.array_equal(full.starts, short.starts, equal_nan=True)
    assert all(s.end_time <= f.end_time for s, f in zip(short.runs, full.runs, strict=True))


def test_jobs_still_waiting_count_as_censored_errors() -> None:
    from kant.twin.calibrate import MIN_RESIDUALS, Calibration

    cal = Calibration()
    early = [{"id": i, "p50": 100.0} for i in range(MIN_RESIDUALS)]
    late = [{"id": 1000 + i, "p50": 100.0} for i in range(MIN_RESIDUALS)]
    cal.observe(0.0, early + late)
    # the early half started 30 s before its P50; the late half still waits at 1,100 s (1,000 s late)
    cal.started({i: 70.0 for i in range(MIN_RESIDUALS)}, pending=[j["id"] for j in late])
    job = {"id": 5000, "p50": 1200.0, "p10": 1200.0, "p90": 1200.0}
    assert cal.apply(1100.0, [job])
    # the observed errors alone say "30 s early"; the waiting jobs say "at least 1,000 s late" for half
    # (both leads are 100 s: the scaled errors carry over as they are)
    assert job["p10"] == pytest.approx(1170.0) and job["p90"] == pytest.approx(2200.0)


def sampled() -> TwinSnapshot:
    """Two 4-GPU jobs running on one 8-GPU node, five pending, run times drawn from ten past ratios
    and arrivals from a history: each run differs."""
    b = JobTableBuilder(source="test")
    for i in range(7):
        b.add(f"j{i}", submit=0, duration=HOUR * (0.5 + 0.2 * i), gpus_per_worker=4, estimate=HOUR)
    sim = Simulator(load_cluster("1x8:V100"), b.build(), load_policy("k8s-default"))
    sim.run(until=10.0)
    ratios = [0.3 + 0.15 * i for i in range(10)]
    hist = history([10.0 - 86400 * 2 + 1800 * i for i in range(96)], gpus=4, estimate=1800.0)
    return TwinSnapshot.capture(sim.scheduler, 10.0, ratios=ratios, planned=[HOUR] * 10, arrivals=hist)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=6, max_size=6), st.permutations([0, 1, 2]))
def test_runs_made_in_parts_join_to_the_same_prediction(owner: list[int], order: list[int]) -> None:
    """The service's prediction workers each make some of the runs (kant serve --predict-workers): put
    together in any order, they are the prediction of one process, bit for bit."""
    snap = sampled()
    whole = predict(snap, runs=6)
    assert len({tuple(r) for r in np.nan_to_num(whole.starts, nan=-1.0)}) > 1  # (runs differ: the test can tell)
    parts = [predict_part(snap, [k for k in range(6) if owner[k] == i], runs=6) for i in order]
    joined = join_parts(snap, parts)
    assert np.array_equal(joined.starts, whole.starts, equal_nan=True)
    assert joined.pending() == whole.pending() and joined.covers == whole.covers


def test_parts_that_miss_or_repeat_a_run_are_refused() -> None:
    _, snap = busy("k8s-default")
    a, b = predict_part(snap, [0, 1], runs=3), predict_part(snap, [1, 2], runs=3)
    with pytest.raises(ValueError, match="not each of"):
        join_parts(snap, [a, b])
    with pytest.raises(ValueError, match="not each of"):
        join_parts(snap, [predict_part(snap, [1, 2], runs=3)])
    # nothing uncertain (no arrival history, no finished job): one run, whatever the parts ask
    exact = TwinSnapshot.from_dict({**snap.to_dict(), "arrivals": {}})
    parts = [predict_part(exact, [0, 2], runs=3), predict_part(exact, [1], runs=3)]
    assert [p.ks for p in parts] == [(0,), ()]
    assert np.array_equal(join_parts(exact, parts).starts, predict(exact, runs=3).starts, equal_nan=True)
