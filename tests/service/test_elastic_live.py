"""Elastic gangs on the live service (docs/elastic.md): a real ``kant serve`` (uvicorn on 127.0.0.1,
PostgreSQL, the simulated executor, a manual clock moved by the test) under the ``elastic`` policy. Bad bounds are a 422
naming the field; an elastic job alone grows to its maximum when it starts; a rigid job that needs its
GPUs makes it shrink (a resize: a new run on fewer nodes, the event says so) instead of waiting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.conftest import NewPgDatabase
from service.serve_proc import Server, eventually, job_of, running_server


def _submit(srv: Server, **body: Any) -> Any:
    return srv.admin.post("/v1/jobs", json={"tenant": "a", "duration_s": 10_000, **body})


@pytest.mark.parametrize(("body", "field", "why"), [
    ({"workers": 2, "min_workers": 0, "max_workers": 4}, "min_workers", "greater than or equal to 1"),
    ({"workers": 2, "min_workers": 3, "max_workers": 2}, "max_workers", "must be >= min_workers"),
    ({"workers": 5, "min_workers": 1, "max_workers": 4}, "workers", "must be within [min_workers, max_workers]"),
    ({"workers": 2, "min_workers": 1}, "max_workers", "missing"),
    ({"workers": 2, "min_workers": "1", "max_workers": 4}, "min_workers", "valid integer"),
    ({"workers": 1, "gpu_milli": 500, "min_workers": 1, "max_workers": 2}, "min_workers", "whole GPUs"),
])
def test_bad_bounds_are_422_naming_the_field(elastic_server: Server, body: dict[str, Any], field: str,
                                             why: str) -> None:
    r = _submit(elastic_server, **body)
    assert r.status_code == 422, r.text
    message = r.json()["message"]
    assert field in message and why in message, message


@pytest.fixture(scope="module")
def elastic_server(tmp_path_factory: pytest.TempPathFactory, pg_server: str) -> Any:
    from service.conftest import new_pg_database

    with new_pg_database() as url, running_server(tmp_path_factory.mktemp("elastic"), url, cluster="1x8:V100",
                                                  policy="elastic") as srv:
        srv.tenant("a")
        yield srv


def test_grows_when_alone_and_shrinks_for_a_rigid_job(tmp_path: Path, new_pg_db: NewPgDatabase) -> None:
    with new_pg_db() as url:
        _grow_shrink_restart(tmp_path, url)


def _grow_shrink_restart(tmp_path: Path, url: str) -> None:
    with running_server(tmp_path, url, cluster="1x8:V100", policy="elastic") as srv:
        srv.tenant("a")
        r = _submit(srv, name="elastic", workers=2, min_workers=1, max_workers=8)
        assert r.status_code in (200, 201), r.text
        e = r.json()["id"]
        srv.advance(1.0)  # the manual clock's next instant: a cycle
        job = eventually(lambda: (j := job_of(srv, e))["state"] == "running" and j, "the elastic job starts",
                         detail=srv.log_text)
        assert job["min_workers"] == 1 and job["max_workers"] == 8
        assert len(job["placement"]) == 8 and job["runs"] == 1  # alone: it starts at its maximum

        r = _submit(srv, name="rigid", workers=1, gpus_per_worker=4)
        assert r.status_code in (200, 201), r.text
        rigid = r.json()["id"]
        srv.advance(2.0)
        eventually(lambda: job_of(srv, rigid)["state"] == "running", "the rigid job starts at once",
                   detail=srv.log_text)
        job = job_of(srv, e)
        assert job["state"] == "running" and len(job["placement"]) == 4 and job["runs"] == 2, job
        items = job["events"]
        assert any(ev["kind"] == "resized" and "8 -> 4 GPU(s)" in ev["message"] for ev in items), items
        assert srv.admin.post(f"/v1/jobs/{rigid}/cancel").status_code == 200
        srv.advance(3.0)  # the rigid job's GPUs are idle again: the elastic job grows back (the grow test
        # passes: 10,000 s planned x (1 - 4/8) is far above the 30 s resize)
        job = eventually(lambda: (j := job_of(srv, e))["runs"] == 3 and j, "the elastic job grows back",
                         detail=srv.log_text)
        assert len(job["placement"]) == 8 and job["state"] == "running"
        # accounting counts each run at its own size: 8, then 4, then 8 GPUs (not the 2 workers asked for)
        starts = [ev["time"] for ev in job_of(srv, e)["events"] if ev["kind"] == "started"]
        acct = srv.admin.get("/v1/accounting/jobs").json()
        row = next(dict(zip(acct["columns"], r, strict=True)) if isinstance(r, list) else r
                   for r in acct["jobs"] if (r["id"] if isinstance(r, dict) else r[0]) == e)
        want = 8 * (starts[1] - starts[0]) + 4 * (starts[2] - starts[1]) + 8 * (acct["now"] - starts[2])
        assert len(starts) == 3 and row["gpus"] == 8 and abs(row["gpu_seconds"] - want) < 1e-6, (starts, row, want)
    # a restart on the same database: the bounds come back from it, the job keeps its 8 workers
    with running_server(tmp_path / "again", url, cluster="1x8:V100", policy="elastic") as srv:
        job = job_of(srv, e)
        assert job["state"] == "running" and len(job["placement"]) == 8 and job["runs"] == 3, job
        r = _submit(srv, name="rigid-2", workers=1, gpus_per_worker=2)
        srv.advance(10.0)
        eventually(lambda: job_of(srv, r.json()["id"])["state"] == "running", "a rigid job after the restart",
                   detail=srv.log_text)
        job = job_of(srv, e)
        assert len(job["placement"]) == 6 and job["runs"] == 4, job  # shrank again: its bounds were kept


def test_cli_submits_bounds_and_shows_the_field_of_a_bad_one(elastic_server: Server) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "KANT_URL": elastic_server.url, "KANT_TOKEN": elastic_server.admin_token}
    base = [sys.executable, "-m", "kant.cli.main", "submit", "--tenant", "a", "--duration", "10", "--workers", "2"]
    bad = subprocess.run([*base, "--min-workers", "3", "--max-workers", "4", "--", "true"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "workers: must be within [min_workers, max_workers]" in bad.stdout + bad.stderr
    ok = subprocess.run([*base, "--min-workers", "1", "--max-workers", "4", "--", "true"], env=env,
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    job = elastic_server.admin.get(f"/v1/jobs/{int(ok.stdout.strip())}").json()
    assert (job["min_workers"], job["max_workers"]) == (1, 4)
    show = subprocess.run([sys.executable, "-m", "kant.cli.main", "show", str(job["id"])], env=env,
                          capture_output=True, text=True, timeout=60)
    assert show.returncode == 0 and "1 to 4 workers" in show.stdout, show.stdout + show.stderr
