"""Inference services next to training: services files, traffic stretching, the simulator's process
hook, and the unified / separate co-scheduling (reclaim latency, GPU accounting, partitions, headroom)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.cli.main import cli
from kant.config import load_policy, parse_policy
from kant.errors import ConfigError
from kant.inference.services import load_services, parse_services
from kant.inference.traffic import RateFunction, StretchSpec, base_bins, stretch
from kant.inference.unified import InferenceDriver, simulate_with_services
from kant.metrics.recorder import JobStatus
from kant.model import Cluster, JobTable, JobTableBuilder
from kant.model.job import JobKind
from kant.plugins.co_schedule import CoSchedule
from kant.sim import ExecutionModel, Simulator
from kant.traces.load import LoadSeries

# --- helpers ---------------------------------------------------------------------------------------


def _rates(values: list[float], window: float = 600.0) -> LoadSeries:
    """A one-stream rate series: ``values[k]`` requests/s on ``[600 k, 600 (k + 1))``."""
    n = len(values)
    return LoadSeries(kind="rate", time=np.arange(n) * window, rate=np.asarray(values, dtype=float),
                      stream=np.zeros(n, dtype=np.int64), input_tokens=np.full(n, -1, dtype=np.int64),
                      output_tokens=np.full(n, -1, dtype=np.int64), duration=np.full(n, np.nan),
                      cv=np.full(n, np.nan), window=window)


def _requests(times: list[float], out_tokens: list[int]) -> LoadSeries:
    n = len(times)
    return LoadSeries(kind="requests", time=np.asarray(times, dtype=float), rate=np.full(n, np.nan),
                      stream=np.zeros(n, dtype=np.int64), input_tokens=np.full(n, 100, dtype=np.int64),
                      output_tokens=np.asarray(out_tokens, dtype=np.int64), duration=np.full(n, np.nan),
                      cv=np.full(n, np.nan))


def _service(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": "svc", "gpus_per_replica": 8, "min_replicas": 1, "max_replicas": 2,
                            "capacity_rps": 1.0, "slo_ms": 5000, "startup_delay_s": 60,
                            "traffic": {"trace": "hand", "repeat": "tile"},
                            "autoscaler": {"period_s": 30, "target_utilization": 1.0}}
    base.update(kw)
    return base


def _training(n: int, *, gpus: list[int], duration: float, spacing: float = 1.0, seed: int = 0) -> JobTable:
    rng = np.random.default_rng(seed)
    b = JobTableBuilder(source="hand")
    for i in range(n):
        b.add(f"t{i}", submit=i * spacing, duration=duration * (0.5 + rng.random()),
              gpus_per_worker=int(rng.choice(gpus)), tenant=f"vc{i % 3}")
    return b.build()


POLICY_NO_RECLAIM = {
    "name": "unified-no-reclaim",
    "actions": ["allocate"],
    "plugins": [{"name": "priority"}, {"name": "fifo"}, {"name": "co-schedule", "args": {"mode": "unified"}},
                {"name": "binpack"}],
}


def _with_headroom(name: str, **args: Any) -> Any:
    doc = yaml.safe_load(Path(str(load_policy(name).source)).read_text())
    for p in doc["plugins"]:
        if p["name"] == "co-schedule":
            p["args"] = {**p.get("args", {}), **args}
    return parse_policy(doc, f"{name}+headroom")


# --- services files ----------------------------------------------------------------------------------
GOOD = _service(name="ok", gpus_per_replica=4)


def _one(**kw: Any) -> dict[str, Any]:
    return {"services": [_service(**kw)]}


BAD_FILES = [
    ({"services": [GOOD, _service(name="big", gpus_per_replica=16)]},
     "services.yaml: services[1].gpus_per_replica: 16 GPUs per replica, but the largest node has 8"),
    (_one(capacity_rps=-5.0), "services[0].capacity_rps: Input should be greater than 0"),
    (_one(capacity_rps=None, capacity_tps=0.0), "services[0].capacity_tps: Input should be greater"),
    (_one(capacity_tps=100.0), "services[0]: give exactly one of capacity_rps"),
    (_one(capacity_rps=None), "services[0]: give exactly one of capacity_rps"),
    (_one(min_replicas=3, max_replicas=2), "services[0]: min_replicas (3) is above max_replicas (2)"),
    (_one(gpus_per_replica=0), "services[0].gpus_per_replica: Input should be greater than or equal to 1"),
    (_one(slo_ms=0), "services[0].slo_ms: Input should be greater than 0"),
    (_one(gpu_type="H100"), "services[0].gpu_type: no node has GPU type H100"),
    # 2 nodes x 8 GPUs hold 2 replicas of 8
    (_one(max_replicas=3), "services[0].max_replicas: 3 replicas of 8 GPUs, but the whole cluster has room for 2"),
    # 2 x 8 + 1 x 8 = 24 > 16
    ({"services": [_service(), _service(name="b", max_replicas=1)]},
     "services: the services need 24 GPUs at max_replicas together, but the cluster has 16"),
    ({"services": [GOOD, _service(name="ok")]}, "services[1].name: service 'ok' already defined at services[0]"),
    (_one(colour="red"), "services[0].colour: Extra inputs are not permitted"),
    (_one(traffic={"trace": "x", "scale": 2, "mean_rps": 3}), "services[0].traffic: give scale or mean_rps, not both"),
    (_one(traffic={"trace": "x", "repeat": "loop"}), "services[0].traffic.repeat: Input should be"),
    (_one(autoscaler={"period_s": 0}), "services[0].autoscaler.period_s: Input should be greater than 0"),
    ({"autoscaler": {"tolerance": 2}, "services": [GOOD]}, "autoscaler.tolerance: Input should be less than 1"),
    ({"services": []}, "services: List should have at least 1 item"),
    ({"servics": [GOOD]}, "services.yaml: services: Field required"),
    ({"services": [GOOD], "horizon": 5}, "services.yaml: horizon: Extra inputs are not permitted"),
]


@pytest.mark.parametrize(("doc", "message"), BAD_FILES, ids=[m[:40] for _, m in BAD_FILES])
def test_impossible_or_malformed_services_are_rejected(tmp_path: Path, doc: dict[str, Any], message: str) -> None:
    path = tmp_path / "services.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_services(path).check_cluster(Cluster.uniform(2, 8))


def test_unreadable_services_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_services(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("services: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_services(bad)
    with pytest.raises(ConfigError, match="must be a mapping"):
        parse_services([1, 2])


def test_cli_rejects_an_impossible_service(tmp_path: Path) -> None:
    path = tmp_path / "services.yaml"
    path.write_text(yaml.safe_dump({"services": [_service(gpus_per_replica=16)]}))
    res = CliRunner().invoke(cli, ["simulate", "--policy", "unified", "--trace", "philly", "--limit", "50",
                                   "--cluster", "tiny", "--services", str(path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert "services[0].gpus_per_replica: 16 GPUs per replica, but the largest node has 8" in res.output


# --- traffic -------------------------------------------------------------------------------------------
def test_base_bins_of_a_request_log() -> None:
    # arrivals 0, 10, 30 | 61, 119 | 150: span 150 s = 2 whole 60-s bins (the partial third is dropped)
    rate, tokens = base_bins(_requests([0, 10, 30, 61, 119, 150], [10, 20, 30, 40, 50, 60]), 60.0)
    assert rate.tolist() == pytest.approx([3 / 60, 2 / 60])
    assert tokens is not None and tokens.tolist() == pytest.approx([20.0, 45.0])  # (10+20+30)/3, (40+50)/2
    _, total = base_bins(_requests([0, 10, 30, 61, 119, 150], [10, 20, 30, 40, 50, 60]), 60.0, token_field="total")
    assert total is not None and total.tolist() == pytest.approx([120.0, 145.0])  # + 100 input tokens each
    with pytest.raises(ValueError, match="unknown stream"):
        base_bins(_requests([0, 1], [1, 1]), 60.0, streams=("nope",))


def test_base_bins_of_a_rate_series() -> None:
    rate, tokens = base_bins(_rates([1.0, 4.0]), 300.0)
    assert rate.tolist() == pytest.approx([1.0, 1.0, 4.0, 4.0]) and tokens is None


@pytest.mark.parametrize(
    ("repeat", "expected"),
    [("tile", [1, 2, 3, 1, 2, 3, 1]), ("none", [1, 2, 3, 0, 0, 0, 0])],
)
def test_repeat(repeat: str, expected: list[float]) -> None:
    f = stretch(np.array([1.0, 2.0, 3.0]), None, start=0.0, bin_s=60.0, n_bins=7,
                spec=StretchSpec(repeat=repeat))  # type: ignore[arg-type]
    assert f.rate.tolist() == expected


def test_shuffle_rotates_copies_and_is_seeded() -> None:
    base = np.arange(1.0, 6.0)
    a = stretch(base, None, start=0.0, bin_s=60.0, n_bins=50, spec=StretchSpec(repeat="shuffle", seed=3))
    b = stretch(base, None, start=0.0, bin_s=60.0, n_bins=50, spec=StretchSpec(repeat="shuffle", seed=3))
    c = stretch(base, None, start=0.0, bin_s=60.0, n_bins=50, spec=StretchSpec(repeat="shuffle", seed=4))
    assert a.rate.tolist() == b.rate.tolist() and a.rate.tolist() != c.rate.tolist()
    rotations = {tuple(np.roll(base, -k)) for k in range(5)}
    assert all(tuple(a.rate[i:i + 5]) in rotations for i in range(0, 50, 5))


def test_shuffle_keeps_whole_days_for_long_traces() -> None:
    base = np.repeat([1.0, 2.0, 3.0], 24)  # three days of hourly bins, one level per day
    f = stretch(base, None, start=0.0, bin_s=3600.0, n_bins=24 * 30, spec=StretchSpec(repeat="shuffle", seed=1))
    days = f.rate.reshape(30, 24)
    assert np.all(days == days[:, :1])  # every day is one of the base days, in phase


def test_diurnal_weekend_scale_and_mean() -> None:
    ones = np.ones(24)
    f = stretch(ones, None, start=0.0, bin_s=3600.0, n_bins=24 * 7,
                spec=StretchSpec(repeat="tile", diurnal_amplitude=0.5, peak_hour=14.0, weekend_factor=0.5, scale=2.0))
    # the bin of 14:00 has its midpoint at 14.5 h: 2 x (1 + 0.5 cos(2 pi 0.5 / 24)) = 2 x 1.4957224
    assert f.rate[14] == pytest.approx(2 * (1 + 0.5 * math.cos(2 * math.pi * 0.5 / 24)))
    assert f.rate[:24].mean() == pytest.approx(2.0)  # the daily factor averages 1 over midpoints
    assert f.rate[5 * 24:7 * 24].mean() == pytest.approx(1.0)  # days 5 and 6 at half
    g = stretch(ones, None, start=0.0, bin_s=3600.0, n_bins=100,
                spec=StretchSpec(repeat="tile", noise=0.3, mean_rps=7.5, seed=2))
    assert g.rate.mean() == pytest.approx(7.5) and g.rate.std() > 0


def test_rate_function_integral_and_mean() -> None:
    f = RateFunction(start=0.0, bin_s=10.0, rate=np.array([1.0, 3.0]))
    # [5, 15): 1 x 5 + 3 x 5 = 20 requests over 10 s
    assert float(f.mean(5.0, 15.0)) == pytest.approx(2.0)
    assert float(f.integral(100.0)) == pytest.approx(40.0)  # zero after the end
    assert float(f.mean(3.0, 3.0)) == 0.0


# --- the simulator's process hook ----------------------------------------------------------------------
def test_process_submits_and_stops_held_rows() -> None:
    b = JobTableBuilder()
    b.add("train", submit=0.0, duration=100.0, gpus_per_worker=4)
    b.add("replica", submit=0.0, duration=math.inf, gpus_per_worker=4, kind=JobKind.INFERENCE, priority=100)
    b.add("spare", submit=0.0, duration=math.inf, gpus_per_worker=4, kind=JobKind.INFERENCE, priority=100)
    jobs = b.build()
    sim = Simulator(Cluster.uniform(1, 8), jobs, load_policy("volcano-binpack"), held=[1, 2], check_every=1)
    calls: list[float] = []

    def proc(s: Simulator, now: float) -> float | None:
        calls.append(now)
        if now == 5.0:
            assert s.submit(1).ok
            return 20.0
        assert s.stop(1) and not s.stop(1)  # a second stop finds nothing to stop
        return None

    sim.add_process(proc, 5.0)
    res = sim.run()
    assert calls == [5.0, 20.0]
    assert res.status.tolist() == [JobStatus.FINISHED, JobStatus.STOPPED, JobStatus.STOPPED]
    assert res.first_start[1] == 5.0 and res.gpu_seconds[1] == pytest.approx(15 * 4)  # 5..20 on 4 GPUs
    assert res.preemptions.tolist() == [0, 0, 0] and res.runs[2] == 0
    with pytest.raises(Exception, match="held names a row"):
        Simulator(Cluster.uniform(1, 8), jobs, load_policy("volcano-binpack"), held=[7])


# --- co-scheduling -------------------------------------------------------------------------------------
def _config(rates: list[float], **svc: Any) -> Any:
    return parse_services({"horizon_s": 600.0 * len(rates), "services": [_service(**svc)]}, "hand.yaml")


def _run(policy: Any, rates: list[float], training: JobTable, cluster: Cluster, *, check: Any = None,
         **svc: Any) -> tuple[Any, InferenceDriver, Simulator]:
    cfg = _config(rates, **svc)
    driver = InferenceDriver(cfg, training, cluster, load=lambda name: _rates(rates))
    sim = Simulator(cluster, driver.jobs, policy, execution=ExecutionModel(checkpoint_interval_s=300.0,
                                                                            restart_cost_s=10.0),
                    check_every=1, held=driver.held)
    driver.attach(sim)
    if check is not None:
        sim.add_process(check, 0.0)
    result = sim.run()
    result.info["inference"] = driver.report(result)
    return result, driver, sim


def _accounting(result: Any, driver: InferenceDriver) -> None:
    """GPU-seconds held by jobs = integral of allocated GPUs; replica runs in the driver's log = the
    recorder's replica GPU-seconds; reclaim counters = training preemptions."""
    times = np.append(result.times, result.end_time)
    alloc = float(np.dot(result.series["allocated_gpus"], np.diff(times)))
    assert float(result.gpu_seconds.sum()) == pytest.approx(alloc)
    rows = driver.runs[0].rows
    starts, stops, _ = driver._runs_of(driver.runs[0], float(result.end_time))
    g = driver.runs[0].spec.gpus_per_replica
    assert float(result.gpu_seconds[rows].sum()) == pytest.approx(float((stops - starts).sum()) * g)
    rep = result.info["inference"]
    training = result.jobs.kind == JobKind.TRAINING
    assert rep["reclaim_victims"] == rep["training_preemptions"] == int(result.preemptions[training].sum())
    assert rep["gpus_reclaimed"] == int((result.preemptions * result.jobs.total_gpus)[training].sum())
    assert 0.0 <= rep["gpu_hours_loaned"] <= rep["gpu_hours_training"] + 1e-9
    assert rep["gpu_hours_inference"] == pytest.approx(rep["replica_hours"] * g)


def test_reclaim_keeps_inference_at_its_need_and_no_reclaim_does_not() -> None:
    cluster = Cluster.uniform(4, 8, nodes_per_leaf=2, leaves_per_spine=2)
    # the cluster fills with long training jobs at once; traffic steps 1 -> 3 -> 1 -> 3 req/s
    training = _training(60, gpus=[1, 2], duration=20_000.0)
    rates = [1.0, 1.0, 3.0, 3.0, 1.0, 3.0]
    res, drv, _ = _run(load_policy("unified"), rates, training, cluster, max_replicas=3)
    rep = res.info["inference"]
    svc = rep["services"]["svc"]
    # the autoscaler wants 3 replicas from t=1230 (first tick after the step at 1200 seeing load 3 over
    # its 30 s window), so the scale-ups need reclaiming; with reclaim nothing is short beyond the
    # start-up delay (60 s) plus the reclaim delay (30 s)
    assert drv.runs[0].schedule.at([1229.0, 1230.0]).tolist() == [1, 3]
    assert svc["peak_desired_replicas"] == 3 and rep["reclaims"] >= 2
    assert rep["shortfall_s"] == 0.0
    _accounting(res, drv)
    # without the reclaim action the replicas wait for training to end: short for much longer
    res2, drv2, _ = _run(parse_policy(POLICY_NO_RECLAIM), rates, training, cluster, max_replicas=3)
    rep2 = res2.info["inference"]
    assert rep2["reclaims"] == 0 and rep2["services"]["svc"]["longest_shortfall_s"] > 600.0
    assert rep2["slo_attainment"] < rep["slo_attainment"]
    _accounting(res2, drv2)


@settings(max_examples=15)
@given(
    rates=st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]), min_size=2, max_size=8),
    gpus=st.sampled_from([[1], [1, 2], [2, 4], [1, 8]]),
    g_replica=st.sampled_from([4, 8]),
    seed=st.integers(0, 5),
)
def test_reclaim_latency_and_accounting_on_random_load_steps(rates: list[float], gpus: list[int], g_replica: int,
                                                             seed: int) -> None:
    cluster = Cluster.uniform(4, 8, nodes_per_leaf=2, leaves_per_spine=2)
    training = _training(50, gpus=gpus, duration=3_000.0, spacing=20.0, seed=seed)
    res, drv, _ = _run(load_policy("unified"), rates, training, cluster, gpus_per_replica=g_replica, max_replicas=3,
                       min_replicas=0)
    rep = res.info["inference"]
    assert rep["shortfall_s"] == 0.0
    _accounting(res, drv)
    assert np.all(res.status[res.jobs.kind == JobKind.TRAINING] == JobStatus.FINISHED)


def test_separate_mode_keeps_the_split() -> None:
    cluster = Cluster.uniform(4, 8, nodes_per_leaf=2, leaves_per_spine=2)
    training = _training(40, gpus=[1, 2, 4], duration=2_000.0, spacing=10.0)
    seen = {"checks": 0}

    def check(sim: Simulator, now: float) -> float | None:
        co = sim.plugin(CoSchedule)
        assert co is not None
        for job, placement in sim.scheduler.state.allocations.items():
            on_pool = co.pool[list(placement.per_node)]
            assert np.all(on_pool) if sim.jobs.kind[job] == JobKind.INFERENCE else not np.any(on_pool)
        seen["checks"] += 1
        return now + 50.0 if now < 3600.0 else None

    res, drv, _ = _run(load_policy("separate"), [1.0, 2.0, 2.0, 1.0, 2.0, 1.0], training, cluster, check=check,
                         gpus_per_replica=4, max_replicas=2)
    rep = res.info["inference"]
    # pool = 2 replicas x 4 GPUs = 8 GPUs = the last node; training keeps the other 24
    assert (rep["pool_gpus"], rep["training_share_gpus"]) == (8, 24)
    assert rep["gpu_hours_loaned"] == 0.0 and rep["reclaims"] == 0 and rep["training_preemptions"] == 0
    assert seen["checks"] > 50 and rep["shortfall_s"] == 0.0
    _accounting(res, drv)


def test_headroom_nodes_keep_empty_nodes_from_training() -> None:
    cluster = Cluster.uniform(4, 8, nodes_per_leaf=2, leaves_per_spine=2)
    training = _training(80, gpus=[1], duration=5_000.0)
    policy = _with_headroom("unified", headroom_nodes=1)
    sim = Simulator(cluster, training, policy, check_every=1)
    low = {"empty": 99}

    def check(s: Simulator, now: float) -> float | None:
        low["empty"] = min(low["empty"], s.scheduler.state.empty_nodes)
        return now + 10.0 if now < 2000.0 else None

    sim.add_process(check, 0.0)
    sim.run()
    assert low["empty"] == 1  # training filled three nodes and never the last empty one
    free = Simulator(cluster, training, load_policy("unified"))
    low["empty"] = 99
    free.add_process(check, 0.0)
    free.run()
    assert low["empty"] == 0  # without the guard it takes all four


def test_headroom_gpus_guard_and_feasibility() -> None:
    cluster = Cluster.uniform(2, 8)
    b = JobTableBuilder()
    for i in range(6):
        b.add(f"j{i}", submit=0.0, duration=100.0, gpus_per_worker=2)
    b.add("huge", submit=0.0, duration=100.0, workers=2, gpus_per_worker=8)
    policy = _with_headroom("unified", headroom_gpus=4)
    sim = Simulator(cluster, b.build(), policy, check_every=1)
    res = sim.run()
    # 16 GPUs, 4 kept free: at most 6 of the 2-GPU jobs' 12 GPUs... so 6 start at once (16 - 12 = 4 free)
    assert np.sum(res.first_start[:6] == 0.0) == 6
    # a 16-GPU job can never be admitted when 4 GPUs must stay free
    assert res.status[6] == JobStatus.UNSCHEDULABLE and "headroom guard" in res.reasons[6]


def test_token_capacity_and_simulate_with_services() -> None:
    cluster = Cluster.uniform(2, 8)
    log = _requests([float(t) for t in range(0, 1200, 2)], [200] * 600)  # 0.5 req/s of 200 output tokens
    cfg = parse_services({"horizon_s": 3600.0, "services": [_service(
        capacity_rps=None, capacity_tps=100.0, gpus_per_replica=4, max_replicas=4,
        traffic={"trace": "hand", "repeat": "tile", "bin_s": 60})]}, "tok.yaml")
    res, drv, _ = simulate_with_services(cluster, _training(5, gpus=[1], duration=100.0), load_policy("unified"), cfg,
                                         load=lambda name: log)
    run = drv.runs[0]
    # 100 tokens/s / 200 tokens per request = 0.5 requests/s per replica; load 0.5 req/s -> 1 replica
    assert run.capacity_rps.tolist() == pytest.approx([0.5] * len(run.capacity_rps))
    assert run.schedule.replicas.max() == 1
    assert res.info["inference"]["services"]["svc"]["requests"] == pytest.approx(0.5 * 3600.0)
    with pytest.raises(ConfigError, match="has no token counts; give tokens_per_request"):
        InferenceDriver(cfg, _training(5, gpus=[1], duration=100.0), cluster, load=lambda name: _rates([1.0]))


def test_cli_compare_with_services(tmp_path: Path) -> None:
    from kant.traces.registry import shared_traces_dir

    base = shared_traces_dir()
    if base is None or not (base / "azure-llm-inference-2023").exists():
        pytest.skip("shared traces not available")
    path = tmp_path / "services.yaml"
    path.write_text(yaml.safe_dump({"services": [_service(gpus_per_replica=4, max_replicas=2, traffic={
        "trace": "azure:conv", "scale": 0.2, "diurnal_amplitude": 0.5})]}))
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["compare", "--policy", "separate", "--policy", "unified", "--trace", "tiresias",
                                   "--cluster", "tiny", "--services", str(path), "--jobs", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "SLO" in res.output and "loaned" in res.output  # the inference rows are in the table
    import json

    runs = json.loads((out / "comparison.json").read_text())
    modes = sorted(r["metrics"]["extra"]["inference"]["mode"] for r in runs.values())
    assert modes == ["separate", "unified"]
    assert "extra.inference.slo_attainment" in (out / "comparison.csv").read_text().splitlines()[0]
