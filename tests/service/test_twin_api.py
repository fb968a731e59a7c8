"""The digital twin through the live service: predicted starts in why and the job, exact on a hand-made
case; what-if over the API (JSON for tenants, HTML for admins), a saved snapshot run by the CLI gives the
same answer, and bad what-if payloads are 422 naming the field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.serve_proc import Server, running_server


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("twin")
    with running_server(work, f"sqlite:///{work / 'kant.db'}", cluster="1x8:V100", policy="fifo-strict",
                        extra=["--predict-every", "0.1", "--clock-start", "0", "--predict-workers", "2"]) as s:
        yield s


@pytest.fixture(scope="module")
def jobs(srv: Server) -> dict[str, Any]:
    """Three whole-node jobs of 100, 200 and 300 s (estimates exact) at time 0: they start at 0, 100, 300."""
    token = srv.tenant("team-a")
    other = srv.tenant("team-b")
    a = srv.client(token)
    ids = [a.post("/v1/jobs", json={"workers": 1, "gpus_per_worker": 8, "estimate_s": d, "duration_s": d}).json()["id"]
           for d in (100, 200, 300)]
    srv.advance(0.0)
    return {"ids": ids, "token": token, "other": other}


def wait_prediction(srv: Server, token: str, job: int) -> dict[str, Any]:
    c = srv.client(token)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        why = c.get(f"/v1/jobs/{job}/why").json()
        if why.get("prediction") is not None:
            return why  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError(f"no prediction for job {job} within 60 s: {why}")


def test_pending_jobs_get_exact_predicted_starts(srv: Server, jobs: dict[str, Any]) -> None:
    _, second, third = jobs["ids"]
    why = wait_prediction(srv, jobs["token"], second)
    # (the band is at least the clock's resolution wide, 1 s here, so an exact start counts as inside it)
    assert why["prediction"] == {"p50": 100.0, "p10": 100.0, "p90": 101.0, "as_of": 0.0, "runs": 1, "reason": None,
                                 "covers": "nothing: estimates taken as exact and no arrival history (if nothing "
                                           "else arrives)"}
    assert why["prediction_text"] == "predicted start in ~1m40s"
    assert why["summary"] == f"pending because {why['reason']}; predicted start in ~1m40s"
    assert wait_prediction(srv, jobs["token"], third)["prediction"]["p50"] == 300.0
    detail = srv.client(jobs["token"]).get(f"/v1/jobs/{third}").json()
    assert detail["why"]["prediction"]["p50"] == 300.0
    # the CLI says it in one line
    env = {**os.environ, "KANT_URL": srv.url, "KANT_TOKEN": jobs["token"]}
    out = subprocess.run([sys.executable, "-m", "kant.cli.main", "why", str(third)], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("; predicted start in ~5m00s"), out.stdout


def test_whatif_json_for_a_tenant_and_html_for_admins(srv: Server, jobs: dict[str, Any]) -> None:
    _, second, third = jobs["ids"]
    body = {"horizon_h": 1, "runs": 3, "scenarios": [{"name": "more", "add_nodes": 2},
                                                     {"name": "k8s", "policy": "k8s-default"}]}
    r = srv.client(jobs["token"]).post("/v1/whatif", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    now, more, k8s = out["scenarios"]
    assert [s["name"] for s in out["scenarios"]] == ["now", "more", "k8s"] and out["runs"] == 1
    assert {j["id"]: j["p50"] for j in now["jobs"]} == {second: 100.0, third: 300.0}
    assert {j["id"]: j["p50"] for j in more["jobs"]} == {second: 0.0, third: 0.0}
    assert now["waits"]["max"] == 300.0 and more["waits"]["max"] == 0.0 and k8s["policy"] == "k8s-default"
    # each scenario names its changes; one time base (from now, the clock is at 0); what the band covers
    assert [s["changes_text"] for s in out["scenarios"]] == ["as it is", "+2 nodes of 8 x V100",
                                                            "policy k8s-default"]
    assert now["waits"]["from_now_max"] == 300.0 and out["arrivals"] == "history"
    assert out["band_covers"].startswith("nothing: estimates taken as exact and no arrival history")
    # one answer: the same start as the job's own prediction, from the same snapshot
    why = wait_prediction(srv, jobs["token"], third)["prediction"]
    assert why["p50"] == {j["id"]: j["p50"] for j in now["jobs"]}[third] and why["as_of"] == out["as_of"]
    bad = srv.client(jobs["token"]).post("/v1/whatif", json={**body, "arrivals": "future"})
    assert bad.status_code == 422 and "arrivals" in bad.json()["message"], bad.text
    assert 0 < more["gar"] < now["gar"] <= 1  # more GPUs, the same work
    # another tenant sees the cluster's figures but none of these jobs
    theirs = srv.client(jobs["other"]).post("/v1/whatif", json=body).json()
    assert all(s["jobs"] == [] for s in theirs["scenarios"]) and theirs["scenarios"][0]["gar"] == now["gar"]
    assert srv.client(jobs["other"]).post("/v1/whatif", params={"format": "html"}, json=body).status_code == 403
    page = srv.admin.post("/v1/whatif", params={"format": "html"}, json=body)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "kant what-if" in page.text and "more" in page.text


@pytest.mark.parametrize("scenario, words", [
    ({"name": "x", "add_nodes": -1}, "scenarios.0.add_nodes"),
    ({"name": "x", "policy": "nope"}, "scenarios.0.policy: no bundled policy 'nope'"),
    ({"name": "x", "policy": {"name": "p", "actions": ["allocate"], "plugins": [{"name": "zzz"}]}},
     "scenarios.0.policy: plugins[0].name"),
    ({"name": "x", "drain": ["nope"]}, "scenario 'x': drain: no node 'nope'"),
    ({"name": "now"}, "is used twice (or is 'now'"),
    ({"name": "x", "bogus": 1}, "scenarios.0.bogus"),
])
def test_bad_whatif_is_422_naming_the_field(srv: Server, jobs: dict[str, Any], scenario: dict[str, Any],
                                            words: str) -> None:
    r = srv.client(jobs["token"]).post("/v1/whatif", json={"scenarios": [scenario]})
    assert r.status_code == 422, r.text
    assert words in r.json()["message"], r.json()["message"]


def test_a_saved_snapshot_gives_the_same_answer_offline(srv: Server, jobs: dict[str, Any], tmp_path: Path) -> None:
    assert srv.client(jobs["token"]).get("/v1/snapshot").status_code == 403  # admins only
    env = {**os.environ, "KANT_URL": srv.url, "KANT_TOKEN": srv.admin_token}
    path = tmp_path / "snap.json"

    def kant(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kant.cli.main", *args], env=env, capture_output=True,
                              text=True, timeout=120)

    saved = kant("whatif", "--save-snapshot", str(path))
    assert saved.returncode == 0, saved.stderr
    live = json.loads(kant("whatif", "--add-nodes", "2", "--horizon", "1h", "--json").stdout)
    offline = json.loads(kant("whatif", "--snapshot", str(path), "--add-nodes", "2", "--horizon", "1h",
                              "--json").stdout)
    assert offline["scenarios"] == live["scenarios"]
    html = tmp_path / "w.html"
    table = kant("whatif", "--snapshot", str(path), "--policy", "k8s-default", "--html", str(html))
    assert table.returncode == 0, table.stderr
    assert "what if" in table.stdout and "k8s-default" in table.stdout and html.read_text().startswith("<!DOCTYPE")
    sizes = kant("whatif", "--snapshot", str(path), "--add-nodes", "1", "--add-nodes", "2", "--horizon", "7d",
                 "--arrivals", "history")
    assert sizes.returncode == 0, sizes.stderr
    for words in ("add-1", "add-2", "+1 node of 8 x V100", "+2 nodes of 8 x V100", "start P50 from now",
                  "the band covers"):
        assert words in sizes.stdout, sizes.stdout
    wrong = kant("whatif", "--snapshot", str(path), "--arrivals", "future")
    assert wrong.returncode == 2 and "future" in wrong.stderr + wrong.stdout
    bad = kant("whatif", "--snapshot", str(path), "--quota", "team-a=x")
    assert bad.returncode == 2 and "is not TENANT=GUARANTEED:MAX" in bad.stderr + bad.stdout


def test_a_new_job_gets_a_prediction_without_a_cycle(srv: Server, jobs: dict[str, Any]) -> None:
    """(Last: it adds a job.) An arrival alone is a change the twin hears of: the fourth job, queued
    behind the others with no cycle run since, is predicted at 600 s."""
    a = srv.client(jobs["token"])
    late = a.post("/v1/jobs", json={"workers": 1, "gpus_per_worker": 8, "estimate_s": 50, "duration_s": 50}).json()
    assert wait_prediction(srv, jobs["token"], late["id"])["prediction"]["p50"] == 600.0


def test_a_killed_twin_worker_is_replaced(srv: Server, jobs: dict[str, Any]) -> None:
    """(Last: it adds a job.) kill -9 of the prediction worker costs one refresh: the next change is
    predicted by a new worker, and the service goes on."""
    workers = subprocess.run(["pgrep", "-P", str(srv.proc.pid), "-f", "spawn_main"], capture_output=True, text=True)
    pids = [int(x) for x in workers.stdout.split()]
    assert pids, "the service should have a twin worker by now"
    for pid in pids:
        os.kill(pid, 9)
    a = srv.client(jobs["token"])
    job = a.post("/v1/jobs", json={"workers": 1, "gpus_per_worker": 8, "estimate_s": 10, "duration_s": 10}).json()
    assert wait_prediction(srv, jobs["token"], job["id"])["prediction"]["p50"] == 650.0
    metrics = srv.admin.get("/metrics").text
    assert "kant_twin_prediction_seconds_count" in metrics


def test_a_pending_job_without_a_prediction_says_why() -> None:
    from kant.service.queries import no_prediction
    from kant.service.twin import Predicted, Twin, describe_prediction

    twin = Twin(lambda: None)
    assert "the twin's first prediction is under way" in no_prediction(twin, 5.0)
    twin.as_of = 10.0
    assert "it arrived after the twin's last snapshot; the next refresh predicts it" in no_prediction(twin, 12.0)
    assert "failed or is under way" in no_prediction(twin, 8.0)
    assert "predictions are off" in no_prediction(Twin(lambda: None, predict_on=False), 1.0)
    # a P50 already past is said as such (not "~0s"); a job the twin cannot start says why
    stale = Predicted(100.0, 90.0, 400.0, 0.0, 10, "run-time error only")
    assert describe_prediction(stale, 160.0) == ("predicted to start 1m00s ago (a prediction made 2m40s ago); its "
                                                 "band runs to 4m00s from now")
    never = Predicted(None, None, None, 0.0, 10, "", "does not start in the twin's run: never started; too big")
    assert describe_prediction(never, 0.0) == "no predicted start: does not start in the twin's run: never started; " \
                                              "too big"


def test_predictions_from_several_workers_are_those_of_one() -> None:
    """kant serve --predict-workers: each worker process makes some of the runs; the answers are the
    same as one process's, bit for bit (and the band calibrated the same)."""
    from kant.service.twin import Twin
    from test_twin_arrivals import sampled

    snap = sampled()
    got = []
    for workers in (1, 3):
        twin = Twin(lambda: snap, version=lambda: 1, runs=7, workers=workers)
        try:
            assert twin.refresh(timeout=120.0)
            got.append({job: twin.predicted(job) for job in snap.sched.pending})
        finally:
            twin.close()
    assert got[0] == got[1] and all(p is not None and p.runs == 7 for p in got[0].values())
    assert len({p.p50 for p in got[0].values()}) > 1
