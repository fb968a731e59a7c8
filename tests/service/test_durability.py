"""Durability and high availability against real processes: ``kill -9`` of the service under a
sustained submit load from several clients, then a restart (SQLite and PostgreSQL); a restart that
keeps the exact state; leader failover between two services on one PostgreSQL database."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.conftest import new_pg_database
from service.serve_proc import Server, start_server


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'kant.db'}"
    else:
        request.getfixturevalue("pg_server")
        with new_pg_database() as url:
            yield url


def load_body(n: int) -> dict[str, float]:
    """The n-th job of a load client."""
    return {"gpus_per_worker": 1 + n % 4, "duration_s": 3600.0, "estimate_s": 3600.0}


class Load:
    """``clients`` threads submitting jobs (each with its own idempotency key) until stopped;
    ``acked`` maps every key the service acknowledged to the job id it answered."""

    def __init__(self, url: str, token: str, clients: int = 8) -> None:
        self.url, self.token = url, token
        self.acked: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(k,), daemon=True) for k in range(clients)]
        for t in self.threads:
            t.start()

    def _run(self, k: int) -> None:
        n = 0
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=10) as c:
            while not self.stop.is_set():
                key = f"c{k}-{n}"
                try:
                    r = c.post("/v1/jobs", json=load_body(n), headers={"Idempotency-Key": key})
                except httpx.HTTPError:
                    time.sleep(0.05)  # the service is down: the key is not acknowledged, try another
                    n += 1
                    continue
                if r.status_code in (200, 201):
                    with self.lock:
                        self.acked[key] = r.json()["id"]
                n += 1

    def finish(self) -> dict[str, int]:
        self.stop.set()
        for t in self.threads:
            t.join(30)
        return dict(self.acked)


def all_jobs(srv: Server, token: str) -> list[dict[str, Any]]:
    out, after = [], None
    with srv.client(token) as c:
        while True:
            page = c.get("/v1/jobs", params={"limit": 1000, **({"after": after} if after else {})}).json()
            out += page["items"]
            after = page["next"]
            if after is None:
                return out


def check_nothing_lost(srv: Server, token: str, acked: dict[str, int],
                       running_before: dict[int, Any]) -> list[dict[str, Any]]:
    """After a restart: every acknowledged submit is a job, and every job that was running kept its
    placement in its first run. Returns the jobs."""
    assert len(acked) > 50, len(acked)
    jobs = all_jobs(srv, token)
    by_id = {j["id"]: j for j in jobs}
    missing = sorted(set(acked.values()) - set(by_id))
    assert not missing, f"{len(missing)} acknowledged jobs lost, e.g. {missing[:5]}"
    for job_id, placement in running_before.items():
        assert by_id[job_id]["placement"] == placement and by_id[job_id]["runs"] == 1, job_id
    return jobs


def check_no_double_booking(srv: Server, jobs: list[dict[str, Any]]) -> None:
    held: Counter[str] = Counter()
    for job in jobs:
        if job["state"] == "running":
            assert len(job["placement"]) == job["workers"]  # gangs whole
            for node in job["placement"]:
                held[node] += job["gpus_per_worker"]
    capacity = {n["name"]: n["gpus"] for n in srv.admin.get("/v1/nodes").json()}
    assert all(held[n] <= capacity[n] for n in held), held


def test_kill_9_under_load_then_restart_loses_nothing(tmp_path: Path, db_url: str) -> None:
    srv = start_server(tmp_path, db_url, cluster="8x8:V100", clock="wall")
    try:
        token = srv.tenant("load")
        load = Load(srv.url, token)
        time.sleep(2.0)
        running_before = {j["id"]: j["placement"] for j in all_jobs(srv, token) if j["state"] == "running"}
        time.sleep(0.5)
        srv.kill()  # mid-load
        acked = load.finish()
        assert len(acked) > 100, f"only {len(acked)} submits were acknowledged before the kill"
        restarted = start_server(tmp_path, db_url, cluster="8x8:V100", clock="wall",
                                 admin_token=srv.admin_token, port=srv.port)
    finally:
        srv.stop()
    try:
        jobs = all_jobs(restarted, token)
        by_id = {j["id"]: j for j in jobs}
        # every acknowledged job is there, once (ids are keys: a job never appears twice)
        missing = sorted(set(acked.values()) - set(by_id))
        assert not missing, f"{len(missing)} acknowledged jobs lost, e.g. {missing[:5]}"
        # a retried submit of an acknowledged key finds its job: no duplicate is made
        with restarted.client(token) as c:
            for key in sorted(acked)[:50]:  # (the same job: a key used for another job is a 409)
                r = c.post("/v1/jobs", json=load_body(int(key.split("-")[1])), headers={"Idempotency-Key": key})
                assert (r.status_code, r.json()["id"]) == (200, acked[key])
        # jobs running before the kill still run, where they ran
        for job_id, placement in running_before.items():
            assert by_id[job_id]["state"] == "running" and by_id[job_id]["placement"] == placement, job_id
            assert by_id[job_id]["runs"] == 1
        check_no_double_booking(restarted, jobs)
        assert restarted.admin.get("/v1/cluster").json()["allocated_gpus"] == sum(
            j["workers"] * j["gpus_per_worker"] for j in jobs if j["state"] == "running")
    finally:
        restarted.stop()


def test_restart_keeps_the_exact_state(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    srv = start_server(tmp_path, url, cluster="2x8:V100")
    token = srv.tenant("t")
    with srv.client(token) as c:
        ids = [c.post("/v1/jobs", json={"gpus_per_worker": 8, "duration_s": 100.0 * (k + 1)}).json()["id"]
               for k in range(4)]
    srv.admin.post("/v1/nodes/v100-1/cordon")
    srv.advance(10)
    before = {j["id"]: (j["state"], j["placement"], j["start_time"]) for j in all_jobs(srv, token)}
    why = srv.client(token).get(f"/v1/jobs/{ids[2]}/why").json()
    srv.stop()
    again = start_server(tmp_path, url, cluster="2x8:V100", admin_token=srv.admin_token)
    try:
        after = {j["id"]: (j["state"], j["placement"], j["start_time"]) for j in all_jobs(again, token)}
        assert after == before
        assert again.admin.get("/v1/clock").json()["now"] >= 10  # the manual clock resumes where it was
        assert again.admin.get("/v1/nodes/v100-1").json()["state"] == "cordoned"
        assert again.client(token).get(f"/v1/jobs/{ids[2]}/why").json()["position"] == why["position"]
        again.advance(200)  # job 0 ends at 110; job 1 then starts on the one schedulable node
        states = {j["id"]: j["state"] for j in all_jobs(again, token)}
        assert states[ids[0]] == "finished" and states[ids[1]] == "running"
    finally:
        again.stop()


def test_a_restart_schedules_what_waits_without_being_asked(tmp_path: Path) -> None:
    """Jobs in the database when the service starts (pending, as after a crash) start on their own:
    the first cycle does not wait for a new event."""
    from kant.service.db.database import Database
    from kant.service.db.jobs import NewJob

    url = f"sqlite:///{tmp_path / 'k.db'}"
    db = Database(url)
    db.migrate()
    db.tenants.create("t")
    db.jobs.insert([NewJob(tenant="t", user="u", name=f"j{k}", gpus_per_worker=4, duration_s=1000.0)
                    for k in range(3)], now_time=time.time(), now_wall=time.time())
    db.close()
    srv = start_server(tmp_path, url, cluster="2x8:V100", clock="wall")
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if srv.admin.get("/v1/cluster").json()["running_jobs"] == 3:
                break
            time.sleep(0.05)
        assert srv.admin.get("/v1/cluster").json()["running_jobs"] == 3
    finally:
        srv.stop()


def test_leader_failover_on_postgresql(tmp_path: Path, pg_server: str) -> None:
    """Two services on one PostgreSQL database: one leads, the other stands by; ``kill -9`` the leader
    under load: the standby takes over, with every acknowledged job and no job started twice."""
    with new_pg_database() as url:
        a = start_server(tmp_path / "a", url, cluster="8x8:V100", clock="wall")
        b = start_server(tmp_path / "b", url, cluster="8x8:V100", clock="wall", admin_token=a.admin_token,
                         wait=False)
        try:
            b.wait_listening()
            time.sleep(1.0)
            ready = httpx.get(f"{b.url}/readyz")
            assert ready.status_code == 503 and ready.json()["leader"] == a.url
            r = b.admin.post("/v1/jobs", json={"tenant": "x"})
            assert r.status_code == 503 and r.headers["X-Kant-Leader"] == a.url
            token = a.tenant("load")
            load = Load(a.url, token, clients=4)
            time.sleep(1.5)
            running_before = {j["id"]: j["placement"] for j in all_jobs(a, token) if j["state"] == "running"}
            a.kill()
            t0 = time.monotonic()
            b.wait_ready(timeout=30)
            takeover = time.monotonic() - t0
            acked = load.finish()
            print(f"failover: the standby was ready {takeover:.2f} s after kill -9 of the leader "
                  f"({len(acked)} submits acknowledged before)")
            assert takeover < 10
            jobs = all_jobs(b, token)
            by_id = {j["id"]: j for j in jobs}
            assert set(acked.values()) <= set(by_id)
            for job_id, placement in running_before.items():
                assert by_id[job_id]["placement"] == placement and by_id[job_id]["runs"] == 1
            for job in jobs[:200]:
                starts = [e for e in b.admin.get(f"/v1/jobs/{job['id']}").json()["events"] if e["kind"] == "started"]
                assert len(starts) == job["runs"] <= 1, job["id"]
            check_no_double_booking(b, jobs)
            # the new leader schedules: a new job starts
            with b.client(token) as c:
                new = c.post("/v1/jobs", json={"gpus_per_worker": 0, "duration_s": 1.0}).json()["id"]
            deadline = time.monotonic() + 10
            while b.admin.get(f"/v1/jobs/{new}").json()["state"] == "pending" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert b.admin.get(f"/v1/jobs/{new}").json()["state"] in ("running", "finished")
        finally:
            a.stop()
            b.stop()
