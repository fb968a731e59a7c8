"""A user's controls of a job (``kant hold``, ``release``, ``update``, ``requeue``; the API's hold,
release, requeue and PATCH), in process on SQLite and PostgreSQL (manual clock): what each changes,
its event in the job's history, a hold kept over a restart, and the refusals."""

from __future__ import annotations

import httpx
import pytest

from service.test_dependencies import Live, live  # noqa: F401  (the fixture)


def kinds(lv: Live, job: int) -> list[str]:
    return [e["kind"] for e in lv.job(job)["events"]]


def test_hold_and_release_a_pending_job_also_over_a_restart(live: Live) -> None:  # noqa: F811
    t0 = live.now()
    a = live.submit(duration_s=100).json()["id"]
    r = live.client.post(f"/v1/jobs/{a}/hold")
    assert r.status_code == 200 and r.json()["held"] == "admin", r.text
    assert r.json()["reason"] == f"JobHeld: held by admin (kant release {a})"
    live.advance(t0)
    got = live.job(a)
    assert got["state"] == "pending" and got["why"]["plugin"] == "hold" and got["why"]["position"] is None
    live.close()
    live.start()
    live.advance(t0 + 1)
    assert live.job(a)["state"] == "pending"  # still held after the restart
    r = live.client.post(f"/v1/jobs/{a}/release")
    assert r.status_code == 200 and r.json()["held"] is None
    assert live.client.post(f"/v1/jobs/{a}/release").status_code == 409  # not held any more
    live.advance(t0 + 2)
    got = live.job(a)
    assert got["state"] == "running" and got["submit_time"] == t0
    assert kinds(live, a) == ["submitted", "held", "released", "started"]
    r = live.client.post(f"/v1/jobs/{a}/hold")
    assert r.status_code == 409 and "only a pending job can be held" in r.text


def test_update_a_pending_job(live: Live) -> None:  # noqa: F811
    t0 = live.now()
    assert live.client.patch("/v1/tenants/a", json={"max_time_limit_s": 3600}).status_code == 200
    big = live.submit(workers=4, gpus_per_worker=8, duration_s=100).json()["id"]  # fills the 4 x 8 GPUs
    wait = live.submit(name="x", duration_s=10, time_limit_s=60).json()["id"]
    live.advance(t0)
    r = live.client.patch(f"/v1/jobs/{wait}", json={"name": "y", "priority": 5, "estimate_s": 30, "time_limit_s": 120})
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["name"], got["priority"], got["estimate_s"], got["time_limit_s"]) == ("y", 5, 30.0, 120.0)
    assert kinds(live, wait)[-1] == "updated"
    assert live.client.patch(f"/v1/jobs/{wait}", json={"estimate_s": None}).json()["estimate_s"] is None
    r = live.client.patch(f"/v1/jobs/{wait}", json={"time_limit_s": 7200})
    assert r.status_code == 422 and "above tenant a's maximum" in r.text
    assert live.client.patch(f"/v1/jobs/{wait}", json={}).status_code == 422
    assert live.client.patch(f"/v1/jobs/{wait}", json={"priority": None}).status_code == 422
    r = live.client.patch(f"/v1/jobs/{big}", json={"priority": 1})
    assert r.status_code == 409 and "only a pending job can be updated" in r.text
    live.advance(t0 + 100)
    live.advance(t0 + 101)
    got = live.job(wait)
    assert got["state"] == "running" and got["name"] == "y"
    live.advance(t0 + 112)  # its 10 s, well inside the new limit of 120 s
    assert live.job(wait)["state"] == "finished"


def test_requeue_a_running_job(live: Live) -> None:  # noqa: F811
    t0 = live.now()
    a = live.submit(duration_s=100).json()["id"]
    live.advance(t0)
    assert live.job(a)["state"] == "running"
    r = live.client.post(f"/v1/jobs/{a}/requeue")
    assert r.status_code == 200 and r.json()["state"] == "pending" and r.json()["reason"] == "requeued by admin"
    assert live.client.post(f"/v1/jobs/{a}/requeue").status_code == 409
    live.advance(t0 + 1)
    got = live.job(a)
    assert got["state"] == "running" and got["runs"] == 2
    assert kinds(live, a) == ["submitted", "started", "requeued", "started"]


def test_a_tenant_controls_its_own_jobs_only(live: Live) -> None:  # noqa: F811
    theirs = live.client.post("/v1/jobs", json={"tenant": "b", "duration_s": 10}).json()["id"]
    tok = live.client.post("/v1/tenants/a/tokens", json={"name": "ta"}).json()["token"]
    mine = httpx.Client(
        transport=live.client._transport, base_url="http://testserver", headers={"Authorization": f"Bearer {tok}"}
    )
    for verb in ("hold", "release", "requeue"):
        assert mine.post(f"/v1/jobs/{theirs}/{verb}").status_code == 404
    assert mine.patch(f"/v1/jobs/{theirs}", json={"priority": 1}).status_code == 404
    own = mine.post("/v1/jobs", json={"duration_s": 10}).json()["id"]
    r = mine.post(f"/v1/jobs/{own}/hold")
    assert r.status_code == 200 and r.json()["held"] == "tenant a"


def test_cli_hold_release_update_requeue(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    kant = live.cli(monkeypatch)

    a = int(kant("submit", "--tenant", "a", "--duration", "100", "--", "true").stdout)
    assert kant("hold", str(a)).stdout == f"job {a}: pending (JobHeld: held by admin (kant release {a}))\n"
    out = kant("update", str(a), "--priority", "7", "--time", "10:00")
    assert out.stdout == f"job {a}: updated\n", out.output
    assert live.job(a)["priority"] == 7 and live.job(a)["time_limit_s"] == 600
    assert kant("release", str(a)).stdout == f"job {a}: pending\n"
    live.advance(live.now())
    assert kant("requeue", str(a)).stdout == f"job {a}: pending (requeued by admin)\n"
    bad = kant("release", str(a))
    assert bad.exit_code == 2 and f"409: job {a} is not held" in bad.stderr
    none = kant("update", str(a))
    assert none.exit_code == 2 and "nothing to change" in none.stderr
