"""Jobs run like Slurm's, without Ray: ``--time`` and ``--export`` as Slurm reads them, a tenant's
default and maximum time limit, the state ``timeout`` (the loop stops a run at its limit, for the
simulated executor too), backfill planning with the smaller of estimate and limit, bad options as
one line, and the admin token file (written once ready, atomically, never over another running
service's). A real ``kant serve`` (SQLite, manual clock) where the service is the subject."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import click.testing
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kant.cli.main import cli
from kant.model.cluster import Cluster
from kant.model.store import JobStore
from kant.service.jobenv import parse_export, parse_time, resolve_export
from service.serve_proc import Server, free_port, running_server


# --- parsing --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 1800), ("30:15", 1815), ("2:00:00", 7200), ("1-12", 129600), ("1-0:30", 88200), ("0-0:0:5", 5),
    ("UNLIMITED", None), ("infinite", None),
])
def test_slurm_time_forms(text: str, seconds: float | None) -> None:
    assert parse_time(text) == seconds


@pytest.mark.parametrize("text", ["", "1h", "1:2:3:4", "-5", "0", "0:00", "1-", "a-1", "1.5", "1-2:3:4:5"])
def test_a_bad_time_says_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match="time limit"):
        parse_time(text)


@given(d=st.integers(0, 30), h=st.integers(0, 23), m=st.integers(0, 59), s=st.integers(0, 59))
def test_every_slurm_form_gives_its_seconds(d: int, h: int, m: int, s: int) -> None:
    total = ((d * 24 + h) * 60 + m) * 60 + s
    if total == 0:
        return
    assert parse_time(f"{d}-{h}:{m:02d}:{s:02d}") == total
    assert parse_time(f"{d * 24 + h}:{m:02d}:{s:02d}") == total


def test_export_has_slurms_meaning() -> None:
    env = {"A": "1", "B": "2", "HOME": "/h"}
    assert resolve_export("ALL", env) == env
    assert resolve_export("NONE", env) == {}
    assert resolve_export("A,C=3,MISSING", env) == {"A": "1", "C": "3"}  # a name not set here is skipped
    assert resolve_export("ALL,B=x", env) == {"A": "1", "B": "x", "HOME": "/h"}
    assert resolve_export("C=a=b", env) == {"C": "a=b"}
    assert resolve_export(None, None) is None and resolve_export(None, env) == env
    for bad, what in (("1X", "'1X' is not NAME"), ("A,NONE", "NONE may only come alone"), ("", "is empty"),
                      ("A,,B", "'' is not NAME"), ("A-B=1", "'A-B=1' is not NAME")):
        with pytest.raises(ValueError, match=what):
            parse_export(bad)


def test_backfill_plans_with_the_smaller_of_estimate_and_limit() -> None:
    """SchedulerEnv.estimate, the one place a plan's run time is read, caps it at the limit (an
    estimator's prediction too)."""
    from kant.framework.context import SchedulerEnv

    store = JobStore(tenant_names=["t"])
    store.add("a", submit=0.0, tenant="t", estimate=3600.0, time_limit=600.0)
    store.add("b", submit=0.0, tenant="t", estimate=300.0, time_limit=600.0)
    store.add("c", submit=0.0, tenant="t", estimate=None, default_estimate=math.inf)
    env = SchedulerEnv(Cluster.uniform(1, 8), store)
    assert [env.estimate(j) for j in range(3)] == [600.0, 300.0, math.inf]
    env.estimator = lambda job: 5000.0
    assert [env.estimate(j) for j in range(3)] == [600.0, 600.0, 5000.0]


# --- the CLI's options ------------------------------------------------------------------------------
def _cli(*args: str) -> click.testing.Result:
    env = {"KANT_URL": f"http://127.0.0.1:{free_port()}", "KANT_TOKEN": "kant_nothing"}
    return click.testing.CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


@pytest.mark.parametrize(("args", "message"), [
    (["--time", "1h"], "Invalid value for '--time' / '-t': '1h' is not a time limit (MINUTES, MM:SS"),
    (["--time", "0"], "'0': a time limit must be more than 0"),
    (["--export", "1X"], "Invalid value for '--export': '1X': '1X' is not NAME or NAME=value"),
    (["--export", "A,NONE"], "NONE may only come alone"),
])
def test_bad_time_and_export_are_one_line(args: list[str], message: str) -> None:
    result = _cli("submit", *args, "--", "true")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr


# --- the service -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("serve-env")
    with running_server(work, f"sqlite:///{work / 'kant.db'}", cluster="1x8:V100") as server:
        yield server


def _tenant(srv: Server, name: str, **limits: float) -> None:
    r = srv.admin.post("/v1/tenants", json={"name": name, **limits})
    assert r.status_code == 201, r.text
    assert {k: r.json()[k] for k in limits} == limits


def test_a_tenants_time_limits(srv: Server) -> None:
    _tenant(srv, "capped", default_time_limit_s=600.0, max_time_limit_s=3600.0)
    _tenant(srv, "max-only", max_time_limit_s=900.0)
    r = srv.admin.post("/v1/jobs", json={"tenant": "capped", "time_limit_s": 7200.0, "duration_s": 1})
    assert r.status_code == 422
    assert r.json()["detail"] == ("time_limit_s: a time limit of 2.0 h is above tenant capped's maximum of "
                                  "60.0 min")
    ids = [srv.admin.post("/v1/jobs", json={"tenant": t, "duration_s": 1, **extra}).json()["id"]
           for t, extra in (("capped", {}), ("capped", {"time_limit_s": 1800.0}), ("max-only", {}))]
    assert [srv.admin.get(f"/v1/jobs/{i}").json()["time_limit_s"] for i in ids] == [600.0, 1800.0, 900.0]
    bad = srv.admin.patch("/v1/tenants/capped", json={"default_time_limit_s": 7200.0})
    assert bad.status_code == 422 and "default time limit is above the maximum" in bad.text
    assert srv.admin.patch("/v1/tenants/capped", json={"max_time_limit_s": None}).status_code == 200
    r = srv.admin.post("/v1/jobs", json={"tenant": "capped", "time_limit_s": 7200.0, "duration_s": 1})
    assert r.status_code == 201, r.text


def test_a_run_past_its_limit_ends_timeout(srv: Server) -> None:
    """With the simulated executor and the manual clock: a job of duration 100 and limit 30 ends
    'timeout' at 30 (the loop's timer), the next job starts then."""
    _tenant(srv, "sim")
    t0 = float(srv.admin.get("/v1/clock").json()["now"])
    long = srv.admin.post("/v1/jobs", json={"tenant": "sim", "gpus_per_worker": 8, "duration_s": 100,
                                            "time_limit_s": 30}).json()["id"]
    after = srv.admin.post("/v1/jobs", json={"tenant": "sim", "gpus_per_worker": 8, "duration_s": 5}).json()["id"]
    srv.advance(t0 + 29)
    assert srv.admin.get(f"/v1/jobs/{long}").json()["state"] == "running"
    srv.advance(t0 + 31)
    data = srv.admin.get(f"/v1/jobs/{long}").json()
    assert (data["state"], data["end_time"] - data["start_time"]) == ("timeout", 30.0)
    assert data["reason"].startswith("time limit of 30 s reached")
    assert [e["kind"] for e in data["events"]][-1] == "timeout"
    nxt = srv.admin.get(f"/v1/jobs/{after}").json()
    assert nxt["state"] in ("running", "finished") and nxt["start_time"] == data["end_time"]
    jobs = _cli_srv(srv, "jobs", "--state", "timeout")
    assert jobs.exit_code == 0 and str(long) in jobs.stdout


def _cli_srv(srv: Server, *args: str) -> click.testing.Result:
    env = {"KANT_URL": srv.url, "KANT_TOKEN": srv.admin_token}
    return click.testing.CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def test_submit_sends_folder_and_environment(srv: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KANT_TEST_X", "x")
    out = _cli_srv(srv, "submit", "--tenant", "sim", "--export", "KANT_TEST_X,Y=1,KANT_TOKEN", "--time", "1:00",
                   "--", "true")
    assert out.exit_code == 0, out.output
    data = srv.admin.get(f"/v1/jobs/{int(out.stdout)}").json()
    assert (data["chdir"], data["environment"], data["time_limit_s"]) == (str(tmp_path), {"KANT_TEST_X": "x",
                                                                                          "Y": "1"}, 60.0)
    shown = _cli_srv(srv, "show", str(data["id"]))
    assert "2 variable(s)" in shown.stdout and str(tmp_path) in shown.stdout
    # ALL: everything but kant's own credentials (the admin token of KANT_TOKEN is not stored with the job)
    out = _cli_srv(srv, "submit", "--tenant", "sim", "--", "true")
    env = srv.admin.get(f"/v1/jobs/{int(out.stdout)}").json()["environment"]
    assert env["KANT_TEST_X"] == "x" and "KANT_TOKEN" not in env and "KANT_URL" in env


def test_logs_of_a_worker_or_run_that_does_not_exist(srv: Server) -> None:
    job_id = srv.admin.post("/v1/jobs", json={"tenant": "sim", "workers": 2, "gpus_per_worker": 1,
                                              "duration_s": 1}).json()["id"]
    for args, line in ((["--worker", "2"], f"error: 404: job {job_id} has no worker 2: its workers are 0..1"),
                       (["--run", "4"], f"error: 404: job {job_id} has no run 4: ")):
        r = _cli_srv(srv, "logs", str(job_id), *args)
        assert r.exit_code == 2 and r.stderr.strip().startswith(line) and len(r.stderr.strip().splitlines()) == 1, \
            r.stderr


# --- the admin token file ----------------------------------------------------------------------------
def _serve(work: Path, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "KANT_ADMIN_TOKEN"}
    return subprocess.Popen([sys.executable, "-m", "kant.cli.main", "serve", "--db",
                             f"sqlite:///{work / f'kant-{port}.db'}", "--port", str(port), "--cluster", "1x8:V100",
                             "--clock", "manual", "--log-level", "warning"], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_the_token_file_is_written_once_ready_and_never_over_another_services(tmp_path: Path) -> None:
    first = _serve(tmp_path, port := free_port())
    try:
        token = tmp_path / "kant-admin.token"
        deadline = time.monotonic() + 60
        while not token.exists():
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        text = token.read_text()
        assert text.startswith("kant_") and text.endswith("\n") and oct(token.stat().st_mode)[-3:] == "600"
        import httpx

        r = httpx.get(f"http://127.0.0.1:{port}/v1/tenants", headers={"Authorization": f"Bearer {text.strip()}"})
        assert r.status_code == 200  # a whole, working token
        second = _serve(tmp_path, free_port())
        out, _ = second.communicate(timeout=60)
        assert second.returncode == 2
        assert f"kant-admin.token belongs to another running kant serve (pid {first.pid})" in out.decode()
        assert token.read_text() == text
        assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    finally:
        first.terminate()
        first.wait(30)
