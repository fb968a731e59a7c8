"""Accounting (issue 28): every run kept in ``job_runs`` (start, end, nodes, GPUs, how it ended, exit),
``GET /v1/accounting/jobs|usage`` (tenant-scoped), the Prometheus counter of GPU-seconds per tenant, and
``kant acct`` as a table, CSV, JSON and Parquet; on SQLite and PostgreSQL, on a manual clock."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from service.inproc import App, app_for


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    with app_for(request, tmp_path_factory.mktemp("acct"), request.param) as a:
        yield a


@pytest.fixture(scope="module")
def jobs(app: App) -> dict[str, Any]:
    return scenario(app)


def scenario(app: App) -> dict[str, Any]:
    """Three jobs on tiny (4 nodes x 8 GPUs): ``one`` (tenant a, alice, 2 x 4 GPUs) runs 0-100 and
    finishes; ``two`` (b, bob, 1 x 8) runs 100-150, its node fails, runs again 150-200 and is cancelled;
    ``three`` (a, alice, half a GPU) runs 200-250."""
    tokens = {"a": app.tenant("a"), "b": app.tenant("b")}

    def submit(tenant: str, user: str, **body: Any) -> int:
        r = app.call("POST", "/v1/jobs", json={"tenant": tenant, "user": user, **body})
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    one = submit("a", "alice", name="one", workers=2, gpus_per_worker=4, duration_s=100.0)
    app.advance(0)
    app.advance(100)
    two = submit("b", "bob", name="two", gpus_per_worker=8, duration_s=1000.0)
    app.advance(100)
    node = app.call("GET", f"/v1/jobs/{two}").json()["placement"][0]
    app.advance(150)
    assert app.call("POST", f"/v1/nodes/{node}/fail", json={"reason": "test"}).status_code == 200
    app.advance(150)
    assert app.call("GET", f"/v1/jobs/{two}").json()["runs"] == 2
    app.advance(200)
    assert app.call("POST", f"/v1/jobs/{two}/cancel").status_code == 200
    three = submit("a", "alice", name="three", gpu_milli=500, duration_s=50.0)
    app.advance(200)
    app.advance(250)
    assert app.call("POST", f"/v1/nodes/{node}/repair").status_code == 200
    return {"one": one, "two": two, "three": three, "node": node, "tokens": tokens}


def test_every_run_is_kept(app: App, jobs: dict[str, Any]) -> None:
    runs = app.svc.db.runs.ended_between(None, None)
    got = [
        (r.job_id, r.run, r.tenant, r.user, r.start_time, r.end_time, r.gpus, r.gpu_milli, r.end, r.exit_code)
        for r in runs
    ]
    assert got == [
        (jobs["one"], 1, "a", "alice", 0.0, 100.0, 8, 1000, "finished", 0),
        (jobs["two"], 1, "b", "bob", 100.0, 150.0, 8, 1000, "requeued", None),
        (jobs["two"], 2, "b", "bob", 150.0, 200.0, 8, 1000, "cancelled", None),
        (jobs["three"], 1, "a", "alice", 200.0, 250.0, 1, 500, "finished", 0),
    ]
    assert runs[1].nodes == [jobs["node"]] and runs[1].reason == f"node {jobs['node']} failed"
    assert len(runs[0].nodes) == 2 and runs[2].nodes != [jobs["node"]]
    assert [r.gpu_seconds for r in runs] == [800.0, 400.0, 400.0, 25.0]


def test_usage_per_tenant_and_user_over_a_window(app: App, jobs: dict[str, Any]) -> None:
    usage = app.call("GET", "/v1/accounting/usage").json()["usage"]
    assert [
        (
            u["tenant"],
            u["user"],
            round(u["gpu_hours"] * 3600, 6),
            u["runs"],
            u["jobs_submitted"],
            u["jobs_started"],
            u["finished"],
            u["cancelled"],
        )
        for u in usage
    ] == [("a", None, 825.0, 2, 2, 2, 2, 0), ("b", None, 800.0, 2, 1, 1, 0, 1)]
    window = app.call("GET", "/v1/accounting/usage", params={"since": 50, "until": 120, "by": "user"}).json()
    assert [
        (u["tenant"], u["user"], round(u["gpu_hours"] * 3600, 6), u["jobs_submitted"], u["jobs_started"], u["finished"])
        for u in window["usage"]
    ] == [("a", "alice", 400.0, 0, 0, 1), ("b", "bob", 160.0, 1, 1, 0)]
    assert window["usage"][1]["wait_p50_s"] == 0.0
    assert app.call("GET", "/v1/accounting/usage", params={"since": 10, "until": 5}).status_code == 422


def test_per_job_and_tenant_scope(app: App, jobs: dict[str, Any]) -> None:
    rows = app.call("GET", "/v1/accounting/jobs", params={"since": 120}).json()["jobs"]
    assert [(j["id"], j["state"], j["runs"], j["gpu_seconds"]) for j in rows] == [
        (jobs["two"], "cancelled", 2, 8 * 30 + 400.0),
        (jobs["three"], "finished", 1, 25.0),
    ]
    token = jobs["tokens"]["a"]
    mine = app.call("GET", "/v1/accounting/jobs", token).json()["jobs"]
    assert {j["tenant"] for j in mine} == {"a"} and len(mine) == 2
    assert [u["tenant"] for u in app.call("GET", "/v1/accounting/usage", token).json()["usage"]] == ["a"]
    assert app.call("GET", "/v1/accounting/usage", token, params={"tenant": "b"}).status_code == 403


def test_prometheus_gpu_seconds_per_tenant(app: App, jobs: dict[str, Any]) -> None:
    text = app.call("GET", "/metrics").text
    assert 'kant_tenant_gpu_seconds_total{tenant="a"} 825.0' in text
    assert 'kant_tenant_gpu_seconds_total{tenant="b"} 800.0' in text


def test_kant_acct_formats(app: App, jobs: dict[str, Any], tmp_path: Path) -> None:
    table = app.kant("acct", "--report", "tenant")
    assert table.exit_code == 0, table.stderr
    lines = [line.split() for line in table.stdout.splitlines()]
    assert lines[0][:4] == ["TENANT", "GPU_HOURS", "RUNS", "SUBMITTED"] and lines[1][:3] == ["a", "0.23", "2"]
    got = app.kant("acct", "--format", "csv", "--since", "120")
    assert got.exit_code == 0, got.stderr
    records = list(csv.DictReader(io.StringIO(got.stdout)))
    assert [(int(r["id"]), r["state"], float(r["gpu_seconds"])) for r in records] == [
        (jobs["two"], "cancelled", 640.0),
        (jobs["three"], "finished", 25.0),
    ]
    got = app.kant("acct", "--report", "user", "--format", "json", "--until", "120")
    assert [(u["user"], round(u["gpu_hours"] * 3600, 6)) for u in json.loads(got.stdout)] == [
        ("alice", 800.0),
        ("bob", 160.0),
    ]
    out = tmp_path / "acct.parquet"
    got = app.kant("acct", "--format", "parquet", "--out", str(out))
    assert got.exit_code == 0, got.stderr
    assert pq.read_table(out).column("id").to_pylist() == [jobs["one"], jobs["two"], jobs["three"]]
    jobs_table = app.kant("acct", "--tenant", "a")
    assert [line.split()[0] for line in jobs_table.stdout.splitlines()] == [
        "JOBID",
        str(jobs["one"]),
        str(jobs["three"]),
    ]
    assert (
        app.kant("acct", "--format", "parquet").stderr.strip()
        == "error: --format parquet writes a file: give --out FILE"
    )
    assert "is not a time" in app.kant("acct", "--since", "yesterday").stderr
    assert "a date is a time on a wall clock" in app.kant("acct", "--since", "2026-12-01").stderr


def test_migration_0004_keeps_the_last_run_of_ended_jobs(backend: str, fresh_url: str) -> None:
    """A database of 0003 (the jobs table kept each job's last run only) upgraded to 0004: a job that
    ended after running gets that run in ``job_runs``; a pending job, or one cancelled before it ran, none."""
    from alembic import command
    from alembic.config import Config

    from kant.service.db.base import MIGRATIONS_DIR
    from kant.service.db.database import Database
    from kant.service.db.jobs import JobUpdate, NewJob

    db = Database(fresh_url)
    db.migrate()  # (the jobs are inserted by today's code, then the database taken back to 0003)
    db.tenants.create("t")
    (ran, _), (waiting, _), (never, _) = db.jobs.insert(
        [NewJob(tenant="t", user="u", name=n, workers=2, gpus_per_worker=4) for n in "abc"], now_time=5.0, now_wall=0.0
    )
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with db.tx(write=True) as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0003")
    with db.tx(write=True) as conn:  # (0003's columns only: Database.apply would write job_runs)
        db.jobs.write_updates(
            conn,
            [
                JobUpdate(
                    ran,
                    state="failed",
                    first_start_time=10.0,
                    start_time=10.0,
                    end_time=70.0,
                    placement=["n1", "n2"],
                    runs=1,
                    exit_code=3,
                    reason="exit code 3",
                ),
                JobUpdate(never, state="cancelled", end_time=7.0, reason="cancelled by u"),
            ],
        )
    db.migrate()
    (run,) = db.runs.ended_between(None, None)
    assert (
        run.job_id,
        run.run,
        run.tenant,
        run.user,
        run.submit_time,
        run.start_time,
        run.end_time,
        run.nodes,
        run.gpus,
        run.end,
        run.exit_code,
        run.gpu_seconds,
    ) == (ran, 1, "t", "u", 5.0, 10.0, 70.0, ["n1", "n2"], 8, "failed", 3, 480.0)
    assert waiting != ran
    db.close()
