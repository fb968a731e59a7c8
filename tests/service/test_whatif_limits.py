"""What-if requests are bounded (a real ``kant serve`` on 127.0.0.1 with ``--whatif-budget 3
--whatif-queue 2``): a request asking for more runs than fit in the budget gets a partial answer that
says it was cut; one that cannot finish a run of each scenario within twice the budget is stopped
(422 naming the fields; the next request gets a new worker; on a second server with
``--whatif-budget 1``); a second request of the same tenant
while one runs is 429 with ``Retry-After``, as is one more than the queue holds; the scheduling loop
and submits go on meanwhile. And :func:`~kant.twin.whatif.compare_within` without a cut is
:func:`~kant.twin.whatif.compare` / :func:`~kant.twin.predict.predict`, bit for bit."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from kant.config import load_policy
from kant.model.cluster import Cluster
from kant.model.job import JobTableBuilder
from kant.sim import Simulator
from kant.twin import TwinSnapshot, predict
from kant.twin.whatif import Scenario, compare, compare_within
from service.serve_proc import Server, running_server

BUDGET = 3.0
#: the budget of the server that refuses: TOO_BIG's one round took 5.4 s on a quiet machine, under
#: twice BUDGET, so that test has its own server where twice the budget is 2 s
TIGHT_BUDGET = 1.0
#: 16 scenarios of 0-15 more nodes over 300 pending jobs: a round takes ~0.5-1 s on a 2-core machine
MANY_RUNS = {"horizon_h": 24, "runs": 100, "scenarios": [{"name": f"s{k}", "add_nodes": k} for k in range(16)]}
#: 16 scenarios of 100,000 more nodes over a year (the largest a request may ask): 0.3-1.5 s each
TOO_BIG = {"horizon_h": 24 * 366, "runs": 1,
           "scenarios": [{"name": f"s{k}", "add_nodes": 100_000} for k in range(16)]}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("whatif-limits")
    with running_server(work, f"sqlite:///{work / 'kant.db'}", cluster="4x8:V100", policy="fifo-strict",
                        extra=["--no-predict", "--clock-start", "0", "--whatif-budget", str(BUDGET),
                               "--whatif-queue", "2"]) as s:
        yield s


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("whatif-tight")
    with running_server(work, f"sqlite:///{work / 'kant.db'}", cluster="4x8:V100", policy="fifo-strict",
                        extra=["--no-predict", "--clock-start", "0", "--whatif-budget", str(TIGHT_BUDGET)]) as s:
        yield s


@pytest.fixture(scope="module")
def tokens(srv: Server) -> dict[str, str]:
    return _loaded(srv)


def _loaded(srv: Server) -> dict[str, str]:
    """Eight jobs finished with estimates that were wrong (so the twin samples several runs), then 300
    pending jobs of 1-8 GPUs."""
    toks = {name: srv.tenant(name) for name in ("a", "b", "c")}
    a = srv.client(toks["a"])
    for d in (30, 60, 90, 120, 150, 80, 70, 40):
        assert a.post("/v1/jobs", json={"workers": 1, "gpus_per_worker": 8, "estimate_s": 100,
                                        "duration_s": d}).status_code == 201
    srv.advance(1000.0)
    for i in range(300):
        r = a.post("/v1/jobs", json={"workers": 1, "gpus_per_worker": 1 + i % 8, "estimate_s": 100 + i,
                                     "duration_s": 50})
        assert r.status_code == 201, r.text
    srv.advance(1001.0)
    return toks


def post(srv: Server, token: str, body: dict[str, Any]) -> httpx.Response:
    with srv.client(token) as c:
        return c.post("/v1/whatif", json=body)


def test_a_request_past_its_budget_gets_a_partial_answer_that_says_so(srv: Server, tokens: dict[str, str]) -> None:
    t0 = time.monotonic()
    r = post(srv, tokens["a"], MANY_RUNS)
    took = time.monotonic() - t0
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["runs_asked"] == 100 and 1 <= out["runs"] < 100, out["runs"]
    assert "--whatif-budget" in out["cut"] and f"after {out['runs']} of 100 runs" in out["cut"], out["cut"]
    assert len(out["scenarios"]) == 17
    assert took < 2 * BUDGET + 5, took  # (twice the budget at the most, and the snapshot's transfer)
    small = post(srv, tokens["a"], {"horizon_h": 1, "runs": 2})
    assert small.status_code == 200 and small.json()["cut"] is None and small.json()["runs"] == 2


def test_a_request_that_cannot_finish_one_round_is_stopped_and_refused(tight: Server) -> None:
    tokens = _loaded(tight)
    t0 = time.monotonic()
    r = post(tight, tokens["b"], TOO_BIG)
    took = time.monotonic() - t0
    assert r.status_code == 422, r.text
    message = r.json()["message"]
    assert "\n" not in message and message.startswith("horizon_h, scenarios: ") and "--whatif-budget" in message
    assert took < 2 * TIGHT_BUDGET + 5, took
    # a new worker answers the next request
    again = post(tight, tokens["b"], {"horizon_h": 1, "runs": 1, "scenarios": [{"name": "more", "add_nodes": 1}]})
    assert again.status_code == 200, again.text
    assert "Traceback" not in tight.log_text()


def _whatif_requests(srv: Server) -> tuple[int, int]:
    """(running, waiting) from the service's ``kant_whatif_requests`` gauge."""
    text = srv.admin.get("/metrics").text
    seen = {line.split('"')[1]: int(float(line.split()[-1]))
            for line in text.splitlines() if line.startswith("kant_whatif_requests{")}
    return seen["running"], seen["waiting"]


def _until(srv: Server, want: tuple[int, int]) -> None:
    deadline = time.monotonic() + 30.0
    while (now := _whatif_requests(srv)) != want:
        assert time.monotonic() < deadline, f"kant_whatif_requests (running, waiting) stayed {now}, not {want}"
        time.sleep(0.02)


def test_one_request_per_tenant_and_a_bounded_queue(srv: Server, tokens: dict[str, str]) -> None:
    """While tenant a's long request runs: a's second is 429; b's waits its turn (the queue holds
    two); c's is 429 (the queue is full). Submits and the clock go on meanwhile. The gauge
    ``kant_whatif_requests`` says which requests run and wait (polled instead of sleeping)."""
    answers: dict[str, httpx.Response] = {}

    def run(name: str) -> None:
        answers[name] = post(srv, tokens[name], MANY_RUNS)

    assert _whatif_requests(srv) == (0, 0)
    first = threading.Thread(target=run, args=("a",))
    first.start()
    _until(srv, (1, 0))  # a's request is in the worker
    second = threading.Thread(target=run, args=("b",))
    second.start()
    _until(srv, (1, 1))  # b's waits for it
    again = post(srv, tokens["a"], {"horizon_h": 1})
    assert again.status_code == 429, again.text
    assert again.json()["message"] == "a what-if of tenant a is already running or waiting: one at a time each"
    assert int(again.headers["Retry-After"]) >= 1
    full = post(srv, tokens["c"], {"horizon_h": 1})
    assert full.status_code == 429, full.text
    assert "--whatif-queue" in full.json()["message"] and int(full.headers["Retry-After"]) >= 1
    # the service goes on while the twin's worker is busy: a submit is answered and a clock move
    # runs cycles, and b's request (which runs after a's, for the 3 s budget) is still not done
    with srv.client(tokens["c"]) as c:
        assert c.post("/v1/jobs", json={"workers": 1, "gpus_per_worker": 1, "duration_s": 5}).status_code == 201
    cycles = srv.admin.get("/v1/cluster").json()["cycles"]
    srv.advance(1002.0)
    assert srv.admin.get("/v1/cluster").json()["cycles"] > cycles
    assert second.is_alive() and sum(_whatif_requests(srv)) >= 1
    first.join(60)
    second.join(60)
    assert answers["a"].status_code == 200 and answers["b"].status_code == 200, (answers["a"].text, answers["b"].text)
    assert _whatif_requests(srv) == (0, 0)
    # both done: the tenants may ask again
    assert post(srv, tokens["a"], {"horizon_h": 1}).status_code == 200
    assert post(srv, tokens["c"], {"horizon_h": 1}).status_code == 200


def test_compare_within_without_a_cut_is_compare_bit_for_bit() -> None:
    rng = np.random.default_rng(7)
    b = JobTableBuilder(source="test")
    for i in range(40):
        b.add(f"j{i}", submit=0.0, duration=float(rng.uniform(50, 500)), gpus_per_worker=int(rng.choice([1, 2, 4, 8])),
              estimate=float(rng.uniform(50, 500)))
    sim = Simulator(Cluster.uniform(2, 8), b.build(), load_policy("fifo-strict"))
    sim.run(until=10.0)
    snap = TwinSnapshot.capture(sim.scheduler, 10.0, ratios=[0.5, 0.8, 1.0, 1.3, 2.0])
    scenarios = [Scenario("more", add_nodes=1)]
    full = compare_within(snap, scenarios, horizon_s=3600.0, runs=5)
    assert not full.cut and full.runs_done == 5
    for x, y in zip(full.results, compare(snap, scenarios, horizon_s=3600.0, runs=5), strict=True):
        assert np.array_equal(x.prediction.starts, y.prediction.starts, equal_nan=True) and x.waits == y.waits
    now = predict(snap, runs=5, horizon_s=3600.0)
    assert now.starts.shape[0] == 5
    assert np.array_equal(full.results[0].prediction.starts, now.starts, equal_nan=True)
    cut = compare_within(snap, scenarios, horizon_s=3600.0, runs=5, budget_s=0.0)
    assert cut.cut and cut.runs_done == 1 and cut.runs_asked == 5  # the first round always runs
    assert np.array_equal(cut.results[0].prediction.starts, now.starts[:1], equal_nan=True)


def test_the_options_are_checked(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "kant.cli.main", "serve", "--whatif-budget", "0"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 2 and "--whatif-budget" in out.stderr and out.stderr.count("\n") == 1, out.stderr
