"""The dashboard's queue (``GET /v1/dashboard/queue``) after a submit: a job acknowledged but not yet
taken by the scheduling loop is not hidden by the copy :class:`QueueCache
<kant.service.dashboard.queue.QueueCache>` keeps. The loop is held busy across the submit, so the
answer cannot depend on which thread runs first (the race CI once lost in the browser test)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import pytest

from service.inproc import App, app_on


def _read(app: App) -> tuple[dict[str, Any], str]:
    r = app.call("GET", "/v1/dashboard/queue", params={"limit": 500})
    assert r.status_code == 200, r.text
    return r.json(), r.headers["server-timing"]


def test_a_submit_acknowledged_before_the_loop_takes_it_is_in_the_next_read(tmp_path: Path) -> None:
    with app_on(f"sqlite:///{tmp_path / 'kant.db'}", tmp_path) as app:
        app.tenant("a")
        loop = app.svc.leading()
        full = app.call("POST", "/v1/jobs", json={"tenant": "a", "workers": 4, "gpus_per_worker": 8,
                                                  "duration_s": 3600.0, "name": "all-of-the-cluster"})
        assert full.status_code == 201, full.text
        app.advance(app.call("GET", "/v1/clock").json()["now"])  # its cycle (the clock then stands still)
        assert app.call("GET", f"/v1/jobs/{full.json()['id']}").json()["state"] == "running"
        before, _ = _read(app)
        again, timing = _read(app)
        assert timing.startswith("cache") and again == before

        entered, release = threading.Event(), threading.Event()

        def hold(_: object) -> None:  # on the loop's thread: nothing else runs there until released
            entered.set()
            release.wait(30)

        with ThreadPoolExecutor(2) as pool:
            held = pool.submit(loop.call, hold, 60.0)
            try:
                assert entered.wait(30), "the loop never ran the holding call"
                job = app.call("POST", "/v1/jobs", json={"tenant": "a", "workers": 1, "gpus_per_worker": 8,
                                                         "duration_s": 60.0, "name": "waits"})
                assert job.status_code == 201, job.text
                job_id = job.json()["id"]
                # acknowledged, and the loop has not taken it yet: the cached copy is stale, so the read
                # waits for the loop's thread (it must not answer while the loop is held)
                read = pool.submit(_read, app)
                with pytest.raises(FutureTimeout):
                    read.result(0.5)
                # a copy read now on the loop's thread would lack the job: its stamp says so
                assert loop.queue_stamp(read=True) != loop.queue_stamp()
            finally:
                release.set()
            held.result(30)
            got, timing = read.result(30)
        assert timing.startswith("loop"), timing
        assert loop.queue_stamp(read=True) == loop.queue_stamp()  # every posted arrival taken
        assert got["queue_len"] == before["queue_len"] + 1
        assert job_id in [r["id"] for r in got["rows"]]
