"""Job arrays (``kant submit --array 0-9%2``), in process on SQLite and PostgreSQL (manual clock): one job
per task with its index and array id in its environment, the ``%N`` throttle (also over a restart),
cancel of a task and of the whole array, ``kant queue`` folding an array into one line."""

from __future__ import annotations

import httpx
import pytest

from kant.cli.client.jobs import fold_arrays
from kant.service.arrays import format_array, parse_array
from service.test_dependencies import Live, live  # noqa: F401  (the fixture)


def test_parse_and_format() -> None:
    assert parse_array("0-3%2") == ([0, 1, 2, 3], 2)
    assert parse_array("1,3,5-7") == ([1, 3, 5, 6, 7], None)
    assert parse_array("0-15:4") == ([0, 4, 8, 12], None)
    assert format_array([0, 1, 2, 5, 7, 8], 3) == "0-2,5,7-8%3"
    for bad, words in [
        ("3-1", "goes up"),
        ("1,1", "given twice"),
        ("0-5%0", "task limit"),
        ("a", "not an index"),
        ("0-1000", "more than 1000 tasks"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_array(bad)


def states(lv: Live, ids: range) -> list[str]:
    return [lv.job(i)["state"] for i in ids]


def test_an_array_runs_its_tasks_at_most_n_at_once(live: Live) -> None:  # noqa: F811
    t0 = live.now()
    r = live.submit(name="sweep", duration_s=10, array="0-4%2")
    assert r.status_code == 201, r.text
    first, n = r.json()["id"], r.json()["tasks"]
    ids = range(first, first + n)
    got = live.job(first + 3)
    assert (got["array_job_id"], got["array_task_id"], got["array_throttle"]) == (first, 3, 2)
    live.advance(t0)
    assert states(live, ids) == ["running", "running", "pending", "pending", "pending"]
    why = live.client.get(f"/v1/jobs/{first + 2}/why").json()
    assert why["reason"] == f"JobArrayTaskLimit: at most 2 task(s) of array {first} at once"
    assert why["plugin"] == "array"
    # the loop gives each task its index and the array's id (the simulated executor's launches)
    svc = live.svc
    assert svc is not None and svc.loop is not None
    env = svc.loop.call(lambda lp: lp.live.launch_of(first + 1, ["gpu-0"], t0).env)
    assert env == {"KANT_ARRAY_JOB_ID": str(first), "KANT_ARRAY_TASK_ID": "1"}
    # a waiting task cannot be held, but may be updated (it joins the queue with the new values)
    r = live.client.post(f"/v1/jobs/{first + 2}/hold")
    assert r.status_code == 409 and "waits for a place in its array" in r.text
    assert live.client.patch(f"/v1/jobs/{first + 2}", json={"priority": 3}).json()["priority"] == 3
    # a restart keeps the limit: 2 running, the others wait
    live.close()
    live.start()
    live.advance(t0 + 1)
    assert states(live, ids) == ["running", "running", "pending", "pending", "pending"]
    live.advance(t0 + 10)
    live.advance(t0 + 11)
    assert states(live, ids) == ["finished", "finished", "running", "running", "pending"]
    # cancel one task, then the whole array
    assert live.client.post(f"/v1/jobs/{first + 4}/cancel").json()["state"] == "cancelled"
    r = live.client.post(f"/v1/arrays/{first}/cancel")
    assert r.status_code == 200 and r.json() == {"array_id": first, "cancelled": 2}
    assert states(live, ids) == ["finished", "finished", "cancelled", "cancelled", "cancelled"]
    assert live.client.post(f"/v1/arrays/{first}/cancel").status_code == 404


def test_array_refusals(live: Live) -> None:  # noqa: F811
    r = live.submit(array="5-1")
    assert r.status_code == 422 and "goes up" in r.text
    r = live.client.post("/v1/jobs", json={"tenant": "a", "array": "0-1"}, headers={"Idempotency-Key": "k"})
    assert r.status_code == 422 and "no idempotency key" in r.text
    r = live.client.post("/v1/jobs/batch", json={"jobs": [{"tenant": "a", "array": "0-1"}]})
    assert r.status_code == 422 and "submitted alone" in r.text
    theirs = live.client.post("/v1/jobs", json={"tenant": "b", "array": "0-1"}).json()["id"]
    tok = live.client.post("/v1/tenants/a/tokens", json={"name": "ta"}).json()["token"]
    mine = httpx.Client(
        transport=live.client._transport, base_url="http://testserver", headers={"Authorization": f"Bearer {tok}"}
    )
    assert mine.post(f"/v1/arrays/{theirs}/cancel").status_code == 404


def test_queue_folds_an_array_and_the_cli_submits_and_cancels(
    live: Live,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kant = live.cli(monkeypatch)

    r = kant("submit", "--tenant", "a", "--array", "0-9%3", "--duration", "60", "--", "true")
    assert r.exit_code == 0, r.output
    first = int(r.stdout)
    live.advance(live.now())
    out = kant("queue")
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(f"{first}_")]
    assert len(lines) == 1, out.stdout
    assert lines[0].split()[0] == f"{first}_[0-9%3]" and "7 pending, 3 running" in " ".join(lines[0].split()), out
    assert "JobArrayTaskLimit" in lines[0]
    shown = kant("show", str(first + 4))
    assert f"task 4 of array {first} (at most 3 at once)" in shown.stdout, shown.output
    r = kant("cancel", f"{first}_4")  # (Slurm's ARRAY_TASK)
    assert r.stdout == f"job {first + 4}: cancelled\n", r.output
    r = kant("cancel", f"{first}_12")
    assert r.exit_code == 2 and f"array {first} has no task 12" in r.stderr, r.output
    r = kant("cancel", "--array", str(first))
    assert r.stdout == f"array {first}: 9 task(s) cancelled\n", r.output
    bad = kant("submit", "--tenant", "a", "--array", "x", "--", "true")
    assert bad.exit_code == 2 and "(--array)" in bad.stderr, bad.output


def test_fold_arrays_keeps_plain_jobs_and_the_order() -> None:
    jobs = [
        {"id": 1, "state": "running"},
        {
            "id": 2,
            "state": "running",
            "array_job_id": 2,
            "array_task_id": 0,
            "array_throttle": None,
            "reason": None,
            "start_time": 5.0,
        },
        {
            "id": 3,
            "state": "pending",
            "array_job_id": 2,
            "array_task_id": 4,
            "array_throttle": None,
            "reason": "r",
            "start_time": None,
        },
        {"id": 4, "state": "pending"},
    ]
    out = fold_arrays(jobs)
    assert [j["id"] for j in out] == [1, "2_[0,4]", 4]
    assert out[1]["counts"] == "1 pending, 1 running" and out[1]["reason"] == "r"
