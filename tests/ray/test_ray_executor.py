"""``kant serve --executor ray`` on a real local Ray cluster of four raylets (see conftest.py): jobs
start on the nodes kant chose with the GPUs kant chose, report back, stop, fail, survive a node's
loss, and never share a GPU, as the workers themselves report.

The tests of this module run in order on one cluster and one service; each waits until its jobs
ended, so the next one starts on an idle cluster. The node-loss test removes a node: it comes last
but one (the last checks the GPU reports of everything before it).
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from kant_ray_cluster import RayNodes

from service.serve_proc import Server
from service.serve_proc import job_of as job
from service.serve_proc import wait_for_job as wait_for

ENDED = ("finished", "failed", "cancelled", "unschedulable")
QUOTAS = {"a": 2, "b": 2, "c": 1, "d": 1}  # max_gpus of the tenants of the short-jobs test
#: jobs of the short-jobs test (10 per tenant: each tenant waits on its quota several times over)
SHORT_JOBS = 40
#: every worker's report (ray node id, GPU ids, start, end), from all the tests, checked at the end
INTERVALS: list[tuple[str, tuple[str, ...], float, float, int]] = []
#: a worker reports where it runs: Ray's node id, its GPUs, and wall times at start and end
REPORT = ('echo "START $(date +%s.%N) $KANT_RAY_NODE_ID $CUDA_VISIBLE_DEVICES"; sleep {sleep}; '
          'echo "END $(date +%s.%N)"')
ENV_DUMP = ("python -c \"import json, os; print(json.dumps({k: os.environ.get(k) for k in ('RANK', 'WORLD_SIZE', "
            "'LOCAL_RANK', 'NODE_RANK', 'CUDA_VISIBLE_DEVICES', 'MASTER_ADDR', 'MASTER_PORT', 'KANT_JOB_ID', "
            "'KANT_NODE', 'KANT_RAY_NODE_ID', 'KANT_CHECKPOINT_DIR')}))\"")


@pytest.fixture(scope="module")
def tenants(kant: Server) -> dict[str, str]:
    """Tokens of tenant t (no quota) and of a..d (max_gpus of QUOTAS)."""
    out = {"t": kant.tenant("t")}
    for name, gpus in QUOTAS.items():
        out[name] = kant.tenant(name, max_gpus=gpus)
    return out


def submit(kant: Server, token: str, **body: Any) -> int:
    with kant.client(token) as c:
        r = c.post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])




def logs(kant: Server, job_id: int, worker: int = 0, token: str | None = None, **params: Any) -> dict[str, Any]:
    with kant.client(token or kant.admin_token) as c:
        r = c.get(f"/v1/jobs/{job_id}/logs", params={"worker": worker, **params})
    assert r.status_code == 200, r.text
    return dict(r.json())


def wait_output(kant: Server, job_id: int, text: str, worker: int = 0, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        out = str(logs(kant, job_id, worker)["text"])
        if text in out:
            return out
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} worker {worker} never wrote {text!r}; wrote {out!r}")
        time.sleep(0.1)


def report_of(text: str, job_id: int) -> tuple[str, tuple[str, ...], float, float, int]:
    """(ray node id, GPU ids, start, end, job) of a worker that ran REPORT."""
    start = next(line for line in text.splitlines() if line.startswith("START")).split()
    end = next(line for line in text.splitlines() if line.startswith("END")).split()
    gpus = tuple(start[3].split(",")) if len(start) > 3 else ()
    return start[2], gpus, float(start[1]), float(end[1]), job_id


def gone(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_nodes_come_from_ray(kant: Server) -> None:
    nodes = {n["name"]: n for n in kant.admin.get("/v1/nodes").json()}
    gpu = {name: n for name, n in nodes.items() if n["gpus"]}
    assert sorted(gpu) == ["n0", "n1", "n2"]
    assert [(gpu[n]["gpus"], gpu[n]["gpu_type"], gpu[n]["leaf"], gpu[n]["spine"]) for n in sorted(gpu)] == [
        (2, "V100", "l0", "s0"), (2, "V100", "l0", "s0"), (2, "V100", "l1", "s0")]
    (head,) = [n for n in nodes.values() if not n["gpus"]]  # the head: a CPU-only node, default topology
    assert (head["leaf"], head["spine"], head["cpu_milli"]) == ("ray", "ray", 1000)


def test_gang_runs_where_kant_placed_it(kant: Server, ray_nodes: RayNodes, tenants: dict[str, str]) -> None:
    job_id = submit(kant, tenants["t"], workers=2, gpus_per_worker=2, command=ENV_DUMP)
    data = wait_for(kant, job_id, ENDED)
    assert data["state"] == "finished", data
    placement = data["placement"]
    assert len(set(placement)) == 2  # 2 workers of 2 GPUs: one per node (nodes have 2 GPUs)
    reports = [json.loads(logs(kant, job_id, k)["text"]) for k in range(2)]
    for k, rep in enumerate(reports):
        assert rep["RANK"] == str(k) and rep["WORLD_SIZE"] == "2" and rep["NODE_RANK"] == str(k)
        assert rep["LOCAL_RANK"] == "0" and rep["KANT_JOB_ID"] == str(job_id)
        assert rep["KANT_NODE"] == placement[k]
        assert rep["KANT_RAY_NODE_ID"] == ray_nodes.nodes[placement[k]].node_id  # where Ray says it ran
        assert len(set(rep["CUDA_VISIBLE_DEVICES"].split(","))) == 2
        assert rep["KANT_CHECKPOINT_DIR"].endswith(f"job-{job_id}")
    assert reports[0]["MASTER_ADDR"] == reports[1]["MASTER_ADDR"]
    assert reports[0]["MASTER_PORT"] == reports[1]["MASTER_PORT"] and int(reports[0]["MASTER_PORT"]) > 0


def test_cancel_stops_every_worker(kant: Server, tenants: dict[str, str]) -> None:
    job_id = submit(kant, tenants["t"], workers=3, gpus_per_worker=1, command='echo "pid $$"; exec sleep 300')
    wait_for(kant, job_id, ("running",))
    pids = [int(wait_output(kant, job_id, "pid", k).split()[1]) for k in range(3)]
    with kant.client(tenants["t"]) as c:
        assert c.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    assert job(kant, job_id)["state"] == "cancelled"
    assert all(gone(pid) for pid in pids), pids


def test_nonzero_exit_fails_with_code_and_output(kant: Server, tenants: dict[str, str]) -> None:
    job_id = submit(kant, tenants["t"], workers=2, gpus_per_worker=1,
                    command='if [ "$RANK" = 1 ]; then echo "rank 1 broke" >&2; exit 3; fi; exec sleep 300')
    data = wait_for(kant, job_id, ENDED)
    assert (data["state"], data["exit_code"]) == ("failed", 3)
    assert "worker 1" in data["reason"] and "code 3" in data["reason"] and "rank 1 broke" in data["reason"]
    assert "rank 1 broke" in logs(kant, job_id, 1)["text"]  # stderr is kept with stdout


def test_logs_are_tenant_scoped_and_the_cli_follows(kant: Server, tenants: dict[str, str]) -> None:
    job_id = submit(kant, tenants["t"], command="for i in 1 2 3 4 5; do echo line $i; sleep 0.2; done")
    with kant.client(tenants["a"]) as c:
        assert c.get(f"/v1/jobs/{job_id}/logs").status_code == 404  # another tenant's job
    env = {**os.environ, "KANT_URL": kant.url, "KANT_TOKEN": tenants["t"]}
    follow = subprocess.run([sys.executable, "-m", "kant.cli.main", "logs", str(job_id), "--follow", "--interval",
                             "0.1"], capture_output=True, text=True, env=env, timeout=60)
    assert follow.returncode == 0, follow.stderr
    assert follow.stdout == "".join(f"line {i}\n" for i in range(1, 6))
    assert wait_for(kant, job_id, ENDED)["state"] == "finished"
    page = logs(kant, job_id, token=tenants["t"], offset=7, limit=7)  # a byte range
    assert (page["text"], page["next_offset"], page["complete"]) == ("line 2\n", 14, False)


def test_gang_that_cannot_start_goes_back_to_the_queue(kant: Server, ray_nodes: RayNodes,
                                                       tenants: dict[str, str]) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.shutdown()  # (a connection another test module left open would be to another cluster)
    ray.init(address=ray_nodes.address, logging_level="ERROR", log_to_driver=False)
    try:
        @ray.remote(num_cpus=0, num_gpus=2, max_calls=0)
        def hog() -> Any:  # holds n0's GPUs behind kant's back
            yield "holding"
            while True:  # (short sleeps: a cancel interrupts a task between two Python statements)
                time.sleep(0.05)

        held = hog.options(scheduling_strategy=NodeAffinitySchedulingStrategy(ray_nodes.nodes["n0"].node_id,
                                                                               soft=False)).remote()
        assert ray.get(next(held)) == "holding"
        job_id = submit(kant, tenants["t"], workers=3, gpus_per_worker=2, command=REPORT.format(sleep=0.1))
        deadline = time.monotonic() + 60
        while not [e for e in job(kant, job_id)["events"] if e["kind"] == "bind_failed"]:
            assert time.monotonic() < deadline, job(kant, job_id)
            time.sleep(0.2)
        failed = next(e for e in job(kant, job_id)["events"] if e["kind"] == "bind_failed")
        assert "on node n0 did not start within 5 s" in failed["message"], failed
        ray.cancel(held)
        data = wait_for(kant, job_id, ENDED, timeout=90)
        assert data["state"] == "finished" and data["runs"] >= 2, data
        INTERVALS.extend(report_of(logs(kant, job_id, k)["text"], job_id) for k in range(3))
    finally:
        ray.shutdown()


def test_service_replicas_scale(kant: Server, tenants: dict[str, str]) -> None:
    with kant.client(tenants["t"]) as c:
        r = c.post("/v1/services", json={"name": "llm", "gpus_per_replica": 1, "replicas": 2})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        deadline = time.monotonic() + 30
        while len(running := c.get("/v1/jobs", params={"state": "running"}).json()["items"]) < 2:
            assert time.monotonic() < deadline, running
            time.sleep(0.1)
        pids = {j["id"]: int(wait_output(kant, j["id"], "holding its GPUs").split("pid ")[1].split()[0])
                for j in running}
        assert c.post(f"/v1/services/{sid}/scale", json={"replicas": 1}).status_code == 200
        newest = max(pids)  # scaling down stops the newest running replica
        assert job(kant, newest)["state"] == "cancelled" and gone(pids[newest])
        assert job(kant, min(pids))["state"] == "running"
        os.kill(pids[min(pids)], 0)  # still there
        assert c.delete(f"/v1/services/{sid}").status_code == 200
        assert gone(pids[min(pids)])


def test_short_jobs_of_4_tenants_respect_quotas(kant: Server, tenants: dict[str, str]) -> None:
    names = sorted(QUOTAS)
    batch = [{"tenant": names[i % 4], "name": f"short-{i}", "command": REPORT.format(sleep=0.2)}
             for i in range(SHORT_JOBS)]
    r = kant.admin.post("/v1/jobs/batch", json={"jobs": batch})
    assert r.status_code == 201, r.text
    ids = [j["id"] for j in r.json()["jobs"]]
    # (each run is a new Ray actor, a new worker process: on a loaded 2-core machine ~1 s a start)
    deadline = time.monotonic() + 300
    while True:
        rows = []
        after = None
        while True:
            page = kant.admin.get("/v1/jobs", params={"limit": 1000, **({"after": after} if after else {})}).json()
            rows += [j for j in page["items"] if j["id"] in set(ids)]
            if page["next"] is None:
                break
            after = page["next"]
        if all(j["state"] in ENDED for j in rows):
            break
        assert time.monotonic() < deadline, sorted({j["state"] for j in rows})
        time.sleep(0.5)
    assert [j["state"] for j in rows] == ["finished"] * SHORT_JOBS
    tenant = {j["id"]: j["tenant"] for j in rows}
    reports = [report_of(logs(kant, i)["text"], i) for i in ids]
    INTERVALS.extend(reports)
    # quotas, from the workers' own times: a tenant never had more workers (1 GPU each) running at once
    # than its max_gpus
    for name, most in QUOTAS.items():
        edges = sorted([(s, 1) for _, _, s, _, j in reports if tenant[j] == name]
                       + [(e, -1) for _, _, _, e, j in reports if tenant[j] == name])
        level = peak = 0
        for _, step in edges:
            level += step
            peak = max(peak, level)
        assert peak <= most, (name, peak, most)


def test_reconcile_stops_strays_and_reports_lost_runs(ray_nodes: RayNodes, tmp_path: Path) -> None:
    """An executor told that kant runs job 90002 (run 3) and not 90001 stops 90001's worker and
    reports 90002's run lost (it has no worker of it)."""
    import ray

    from kant.service.executors import ray_worker
    from kant.service.executors.base import Launch
    from kant.service.executors.ray_exec import RayExecutor

    ray.shutdown()  # (the executor connects itself; an open connection would be reused)
    ex = RayExecutor(ray_nodes.address, log_dir=tmp_path / "logs", checkpoint_dir=tmp_path / "ckpt")
    try:
        ex.start(Launch(90_001, 1, ("n1",), 1, 0.0, 'echo "pid $$"; exec sleep 300'))
        deadline = time.monotonic() + 30
        while "pid" not in (out := ex.logs.read(90_001).text):
            assert time.monotonic() < deadline, out
            time.sleep(0.1)
        assert ex.running_jobs() == {90_001: 1}
        ex.reconcile({90_002: 3})
        assert gone(int(out.split()[1]))
        events = []
        while not events:
            assert time.monotonic() < deadline + 30
            events = ex.poll(0.0)
            time.sleep(0.05)
        assert [(e.kind, e.job_id, e.run) for e in events] == [("lost", 90_002, 3)]
        assert ex.running_jobs() == {}
        # and its actor is killed (a detached actor left behind would hold n1's GPU for the next tests; a
        # close() before the kill would leave it, hence the wait here)
        stray = ray_worker.actor_name(90_001, 1, 0)
        while any(a.get("name") == stray for a in ray.util.list_named_actors(all_namespaces=True)):
            assert time.monotonic() < deadline + 60, f"the actor {stray} of the stray run is still alive"
            time.sleep(0.1)
    finally:
        ex.close()


def test_node_lost_mid_run_requeues_and_resumes_elsewhere(kant: Server, ray_nodes: RayNodes,
                                                         tenants: dict[str, str]) -> None:
    script = ("import os, pathlib, time\n"
              "step = pathlib.Path(os.environ['KANT_CHECKPOINT_DIR']) / 'step'\n"
              "if step.exists():\n"
              "    print('resumed from', step.read_text(), 'on', os.environ['KANT_NODE'], flush=True)\n"
              "    raise SystemExit(0)\n"
              "step.write_text('step-1')\n"
              "print('checkpoint written on', os.environ['KANT_NODE'], flush=True)\n"
              "time.sleep(300)\n")
    job_id = submit(kant, tenants["t"], gpus_per_worker=2, command=f"{sys.executable} -c {shlex.quote(script)}")
    wait_output(kant, job_id, "checkpoint written on n")
    lost = job(kant, job_id)["placement"][0]
    ray_nodes.remove(lost)
    data = wait_for(kant, job_id, ENDED, timeout=60)
    assert data["state"] == "finished" and data["runs"] == 2, (data["reason"], data["events"])
    assert data["placement"][0] != lost
    assert any(e["kind"] == "requeued" and lost in e["message"] for e in data["events"]), data["events"]
    assert logs(kant, job_id)["text"].startswith(f"resumed from step-1 on {data['placement'][0]}")
    assert logs(kant, job_id, run=1)["text"].startswith(f"checkpoint written on {lost}")
    nodes = {n["name"]: n for n in kant.admin.get("/v1/nodes").json()}
    assert nodes[lost]["state"] == "down"
    # a node joining Ray joins kant
    ray_nodes.add("n3", "l1")
    deadline = time.monotonic() + 30
    while "n3" not in (nodes := {n["name"]: n for n in kant.admin.get("/v1/nodes").json()}):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert (nodes["n3"]["gpus"], nodes["n3"]["leaf"], nodes["n3"]["state"]) == (2, "l1", "up")


def test_no_two_running_workers_shared_a_gpu() -> None:
    assert len(INTERVALS) >= SHORT_JOBS
    by_gpu: dict[tuple[str, str], list[tuple[float, float, int]]] = defaultdict(list)
    for node, gpus, start, end, job_id in INTERVALS:
        assert gpus, "a worker of a GPU job saw no GPU"
        for gpu in gpus:
            by_gpu[node, gpu].append((start, end, job_id))
    for key, spans in by_gpu.items():
        spans.sort()
        for (_, end, a), (start, _, b) in itertools.pairwise(spans):
            assert start >= end, f"jobs {a} and {b} shared GPU {key[1]} of node {key[0]}"
    assert len(by_gpu) == 6  # every GPU of n0..n2 was used
