"""An elastic gang on a real local Ray cluster (see conftest.py: three nodes of 2 GPUs), driven by
``kant serve --executor ray --policy elastic``: alone it starts on all 6 GPUs (``WORLD_SIZE`` 6); when a
rigid 2-GPU job arrives it shrinks to 4 workers, which is a restart from its checkpoint: its old run's
workers are stopped and a new run's 4 workers start, and each of them sees ``WORLD_SIZE`` 4 and its
own ``RANK`` (docs/elastic.md, "Live")."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kant_ray_cluster import RayNodes, kant_on_ray

from service.serve_proc import Server
from service.serve_proc import job_of as job

COMMAND = ('echo "WS $WORLD_SIZE RANK $RANK RUN $KANT_RUN RESTART $TORCHELASTIC_RESTART_COUNT '
           'MAX $KANT_MAX_WORKERS"; exec sleep 300')


@pytest.fixture(scope="module")
def kant_elastic(ray_nodes: RayNodes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with kant_on_ray(ray_nodes, tmp_path_factory.mktemp("kant-ray-elastic"), "elastic", 20.0) as server:
        yield server


def _submit(kant: Server, token: str, **body: Any) -> int:
    with kant.client(token) as c:
        r = c.post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _line(kant: Server, job_id: int, worker: int, run: int, timeout: float = 60.0) -> str:
    """The ``WS ... RANK ... RUN ...`` line worker ``worker`` of run ``run`` printed."""
    deadline = time.monotonic() + timeout
    while True:
        r = kant.admin.get(f"/v1/jobs/{job_id}/logs", params={"worker": worker, "run": run})
        if r.status_code == 200 and "WS " in r.json()["text"]:
            return next(line for line in r.json()["text"].splitlines() if line.startswith("WS "))
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} worker {worker} run {run} printed nothing: {r.text}\n"
                                 f"{kant.log_text()[-3000:]}")
        time.sleep(0.2)


def _until(kant: Server, job_id: int, ok: Any, what: str, timeout: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        data = job(kant, job_id)
        if ok(data):
            return data
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: {data}\n{kant.log_text()[-3000:]}")
        time.sleep(0.2)


def test_elastic_gang_resizes_and_its_workers_see_the_new_world_size(kant_elastic: Server) -> None:
    kant = kant_elastic
    token = kant.tenant("t")
    e = _submit(kant, token, workers=2, min_workers=1, max_workers=6, gpus_per_worker=1, command=COMMAND)
    data = _until(kant, e, lambda d: d["state"] == "running", "the elastic job starts")
    assert len(data["placement"]) == 6 and data["runs"] == 1, data  # alone: all 6 GPUs from the start
    lines = sorted(_line(kant, e, k, 1) for k in range(6))
    assert lines == sorted(f"WS 6 RANK {k} RUN 1 RESTART 0 MAX 6" for k in range(6))

    rigid = _submit(kant, token, workers=1, gpus_per_worker=2, command='echo "rigid"; exec sleep 300')
    _until(kant, rigid, lambda d: d["state"] == "running", "the rigid job starts by shrinking the elastic one")
    data = _until(kant, e, lambda d: d["state"] == "running" and d["runs"] == 2, "the elastic job's resize")
    assert len(data["placement"]) == 4, data
    assert any(ev["kind"] == "resized" for ev in data["events"]), data["events"]
    lines = sorted(_line(kant, e, k, 2) for k in range(4))
    assert lines == sorted(f"WS 4 RANK {k} RUN 2 RESTART 1 MAX 6" for k in range(4))

    for job_id in (rigid, e):
        assert kant.admin.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    _until(kant, e, lambda d: d["state"] == "cancelled", "the elastic job is cancelled")
