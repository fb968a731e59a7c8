"""Running work outlives the control plane, and jobs run like Slurm's, on a real local Ray cluster of
four raylets (conftest.py): a ``kant serve`` killed with SIGKILL and started again reattaches to its
running jobs (one uninterrupted run, as the job's own output shows; a run that ended meanwhile reports
its exit code); a raylet that comes back under its name repairs its node (no phantom node); the same
name twice at once is refused; cancel and a time limit leave no process of a job behind, not even one
that escaped with ``setsid`` and a double fork; a job runs in the folder and with the environment it
was submitted with (``--chdir``, ``--export``).

Each test starts its own ``kant serve`` on the module's Ray cluster (SQLite in the test's folder).
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kant_ray_cluster import RayNodes

from service.serve_proc import Server, free_port, wait_for_job

POLICY = Path(__file__).parent / "quota-policy.yaml"
ENDED = ("finished", "failed", "cancelled", "timeout", "unschedulable")


def start_serve(ray_nodes: RayNodes, work: Path, token: str, port: int | None = None, db: str | None = None,
                wait: bool = True) -> Server:
    port = port or free_port()
    args = [sys.executable, "-m", "kant.cli.main", "serve", "--db", db or f"sqlite:///{work / 'kant.db'}", "--port",
            str(port), "--executor", "ray", "--ray-address", ray_nodes.address, "--policy", str(POLICY),
            "--clock", "wall", "--no-predict", "--ray-start-timeout", "10", "--log-dir", str(work / "logs"),
            "--checkpoint-dir", str(work / "ckpt"), "--stop-grace", "2", "--checkpoint-grace", "2",
            "--log-level", "info"]
    log = work / f"serve-{port}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(args, cwd=work, env={**os.environ, "KANT_ADMIN_TOKEN": token, "PYTHONUNBUFFERED": "1"},
                                stdout=out, stderr=subprocess.STDOUT)
    server = Server(proc, port, token, log, args)
    if wait:
        server.wait_ready(120.0)
    else:
        server.wait_listening(120.0)
    return server


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture()
def kant(ray_nodes: RayNodes, work: Path) -> Iterator[Server]:
    server = start_serve(ray_nodes, work, f"kant_test_{secrets.token_hex(16)}")
    try:
        server.tenant("t")
        yield server
    finally:
        _cancel_all(server)
        server.stop()


def _cancel_all(server: Server) -> None:
    """Leave the Ray cluster idle for the next test (a job left running holds its GPUs)."""
    if server.proc.poll() is not None:
        return
    for state in ("pending", "running"):
        for item in server.admin.get("/v1/jobs", params={"state": state, "limit": 1000}).json()["items"]:
            server.admin.post(f"/v1/jobs/{item['id']}/cancel")


def wait_for(kant: Server, job_id: int, states: tuple[str, ...], timeout: float = 90.0) -> dict[str, Any]:
    return wait_for_job(kant, job_id, states, timeout)


def submit(kant: Server, **body: Any) -> int:
    r = kant.admin.post("/v1/jobs", json={"tenant": "t", **body})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])




def output(kant: Server, job_id: int, worker: int = 0, run: int | None = None) -> str:
    params: dict[str, Any] = {"worker": worker, **({"run": run} if run is not None else {})}
    r = kant.admin.get(f"/v1/jobs/{job_id}/logs", params=params)
    assert r.status_code == 200, r.text
    return str(r.json()["text"])


def wait_output(kant: Server, job_id: int, text: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while text not in (out := output(kant, job_id)):
        assert time.monotonic() < deadline, f"job {job_id} never wrote {text!r}; wrote {out!r}"
        time.sleep(0.1)
    return out


def processes(marker: str) -> list[str]:
    """Processes whose command line holds ``marker`` (the test's own ``ps`` and grep aside)."""
    out = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if marker in line and " Z" not in line and "ps -eo" not in line]


def wait_no_processes(marker: str, timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


COUNTER = ("import os, time\n"
           "for i in range(1, {n} + 1):\n"
           "    print(f'tick {{i}} pid {{os.getpid()}}', flush=True)\n"
           "    time.sleep({every})\n"
           "raise SystemExit({code})\n")


def counter(n: int, every: float, code: int = 0) -> str:
    return f"{sys.executable} -c \"{COUNTER.format(n=n, every=every, code=code)}\""


def test_kill_9_of_the_service_keeps_running_jobs(ray_nodes: RayNodes, work: Path) -> None:
    """kill -9 of ``kant serve`` mid-run, then a new one: the job's own output is one uninterrupted
    run (every tick once, one pid), it finishes as run 1; a job that ended while no service was up
    reports its exit code."""
    token = f"kant_test_{secrets.token_hex(16)}"
    kant = start_serve(ray_nodes, work, token)
    kant.tenant("t")
    long = submit(kant, gpus_per_worker=1, command=counter(30, 0.5))
    short = submit(kant, gpus_per_worker=1, command=counter(4, 0.5, code=3))
    wait_output(kant, long, "tick 3 ")
    wait_output(kant, short, "tick 1 ")
    kant.kill()
    time.sleep(4.0)  # the short job ends meanwhile, with no service up
    kant = start_serve(ray_nodes, work, token, port=kant.port)
    try:
        done = wait_for(kant, long, ENDED)
        assert done["state"] == "finished" and done["runs"] == 1, done
        ticks = [line.split() for line in output(kant, long).splitlines() if line.startswith("tick")]
        assert [int(t[1]) for t in ticks] == list(range(1, 31)), ticks
        assert len({t[3] for t in ticks}) == 1, "the job ran more than once"
        failed = wait_for(kant, short, ENDED)
        assert (failed["state"], failed["exit_code"], failed["runs"]) == ("failed", 3, 1), failed
        assert "exited with code 3" in failed["reason"]
        assert [int(line.split()[1]) for line in output(kant, short).splitlines()] == [1, 2, 3, 4]
        assert "reattached" in kant.log_text()
    finally:
        _cancel_all(kant)
        kant.stop()


def test_failover_to_a_standby_on_postgresql_keeps_running_jobs(ray_nodes: RayNodes, work: Path) -> None:
    """A leader and a standby on one PostgreSQL database; kill -9 of the leader mid-run: the standby
    takes over and reattaches; the job finishes as run 1, one uninterrupted run by its own output."""
    from service.conftest import new_pg_database

    token = f"kant_test_{secrets.token_hex(16)}"
    with new_pg_database() as url:
        leader = start_serve(ray_nodes, work, token, db=url)
        standby = start_serve(ray_nodes, work, token, db=url, wait=False)
        try:
            leader.tenant("t")
            job_id = submit(leader, command=counter(16, 0.5))
            wait_output(leader, job_id, "tick 3 ")
            leader.kill()
            standby.wait_ready(120.0)
            done = wait_for(standby, job_id, ENDED)
            assert done["state"] == "finished" and done["runs"] == 1, done
            ticks = [line.split() for line in output(standby, job_id).splitlines() if line.startswith("tick")]
            assert [int(t[1]) for t in ticks] == list(range(1, 17)), ticks
            assert len({t[3] for t in ticks}) == 1, "the job ran more than once"
        finally:
            _cancel_all(standby)
            standby.stop()
            leader.stop()


ESCAPE = ("setsid sleep {m}1 < /dev/null > /dev/null 2>&1 & "
          "(sh -c 'sleep {m}2 < /dev/null > /dev/null 2>&1 &' &) ; "
          "echo escaped; exec sleep {m}3")


def test_cancel_stops_processes_that_left_the_process_group(kant: Server) -> None:
    job_id = submit(kant, command=ESCAPE.format(m=4711))
    wait_output(kant, job_id, "escaped")
    deadline = time.monotonic() + 10
    while len(processes("sleep 4711")) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(processes("sleep 4711")) == 3, processes("sleep 4711")
    assert kant.admin.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    assert wait_no_processes("sleep 4711") == []


def test_time_limit_ends_the_job_timeout_and_stops_every_process(kant: Server) -> None:
    job_id = submit(kant, command=ESCAPE.format(m=4712), time_limit_s=3.0, estimate_s=3600.0)
    wait_output(kant, job_id, "escaped")
    data = wait_for(kant, job_id, ENDED, timeout=60)
    assert data["state"] == "timeout", data
    assert "time limit of 3 s reached" in data["reason"]
    assert wait_no_processes("sleep 4712") == []


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(kant: Server) -> None:
    """SIGTERM first (the job's trap says so in its output, kept after the cancel), SIGKILL after
    --stop-grace (the loop that ignores it is gone)."""
    job_id = submit(kant, command="trap 'echo got TERM' TERM; echo ready; while true; do sleep 0.4713; done")
    wait_output(kant, job_id, "ready")
    assert kant.admin.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    assert wait_no_processes("sleep 0.4713") == []
    deadline = time.monotonic() + 20
    while "got TERM" not in output(kant, job_id):
        assert time.monotonic() < deadline, output(kant, job_id)
        time.sleep(0.1)


def _cli(kant: Server, work: Path, *args: str, env: dict[str, str] | None = None,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    token_file = work / "admin.token"
    token_file.write_text(kant.admin_token)
    return subprocess.run([sys.executable, "-m", "kant.cli.main", args[0], "--url", kant.url, "--token-file",
                           str(token_file), *args[1:]], capture_output=True, text=True, env=env or dict(os.environ),
                          cwd=cwd or work, timeout=60)


def test_cwd_and_environment_as_submitted(kant: Server, work: Path) -> None:
    here = work / "project"
    here.mkdir()
    env = {**os.environ, "KANT_TEST_A": "from-the-client", "KANT_TEST_B": "b"}
    dump = "pwd; echo A=${KANT_TEST_A:-unset} B=${KANT_TEST_B:-unset} C=${KANT_TEST_C:-unset} " \
           "HOME=${HOME:-unset} RANK=$RANK"
    runs = {
        "default": ["submit", "--tenant", "t", "--", dump],  # the client's folder, all of its environment
        "none": ["submit", "--tenant", "t", "--export", "NONE", "--chdir", "/tmp", "--", dump],
        "list": ["submit", "--tenant", "t", "--export", "KANT_TEST_A,KANT_TEST_C=set", "--", dump],
        "all+": ["submit", "--tenant", "t", "--export", "ALL,KANT_TEST_C=c", "--", dump],
    }
    ids = {}
    for key, args in runs.items():
        r = _cli(kant, work, *args, env=env, cwd=here)
        assert r.returncode == 0, r.stderr
        ids[key] = int(r.stdout.strip())
    home = os.environ.get("HOME", "unset")
    want = {
        "default": f"{here}\nA=from-the-client B=b C=unset HOME={home} RANK=0",
        "none": "/tmp\nA=unset B=unset C=unset HOME=unset RANK=0",
        "list": f"{here}\nA=from-the-client B=unset C=set HOME=unset RANK=0",
        "all+": f"{here}\nA=from-the-client B=b C=c HOME={home} RANK=0",
    }
    for key, job_id in ids.items():
        data = wait_for(kant, job_id, ENDED)
        assert data["state"] == "finished", data
        assert output(kant, job_id).strip() == want[key], key
    missing = _cli(kant, work, "submit", "--tenant", "t", "--chdir", str(work / "nowhere"), "--", "true")
    data = wait_for(kant, int(missing.stdout.strip()), ENDED)
    assert data["state"] == "failed" and f"--chdir {work / 'nowhere'}: no such folder on node" in data["reason"], data


def test_show_prints_a_whole_multi_line_reason_and_logs_refuse_a_missing_worker(kant: Server, work: Path) -> None:
    job_id = submit(kant, command="echo line-one; echo line-two; exit 4")
    data = wait_for(kant, job_id, ENDED)
    assert data["state"] == "failed" and "line-one\nline-two" in data["reason"], data
    shown = _cli(kant, work, "show", str(job_id))
    assert shown.returncode == 0, shown.stderr
    assert "line-one" in shown.stdout and "line-two" in shown.stdout, shown.stdout
    for args, what in ((["--worker", "5"], "has no worker 5"), (["--run", "3"], "has no run 3")):
        r = _cli(kant, work, "logs", str(job_id), *args)
        assert r.returncode == 2 and what in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_ray_logs_go_to_their_own_file(kant: Server, work: Path) -> None:
    assert (work / "logs" / "ray.log").exists()
    assert not [line for line in kant.log_text().splitlines() if "raylet" in line.lower()]


def test_a_raylet_back_under_its_name_repairs_its_node(kant: Server, ray_nodes: RayNodes) -> None:
    """n2's raylet goes and comes back (a new Ray node id, the same kant.node label): node n2 is
    down, then up again (no n2-xxxx node); jobs placed there run. A second raylet named n0 while n0
    is alive is refused (logged, not used)."""
    ray_nodes.remove("n2")
    deadline = time.monotonic() + 60
    while _nodes(kant)["n2"]["state"] != "down":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    ray_nodes.add("n2", "l1")
    while _nodes(kant)["n2"]["state"] != "up":
        assert time.monotonic() < deadline, _nodes(kant)
        time.sleep(0.2)
    names = sorted(n for n in _nodes(kant) if n.startswith("n"))
    assert names == ["n0", "n1", "n2"], names
    ids = [submit(kant, gpus_per_worker=2, command="echo on $KANT_NODE") for _ in range(3)]
    placed = set()
    for job_id in ids:
        data = wait_for(kant, job_id, ENDED)
        assert data["state"] == "finished" and data["runs"] == 1, data
        placed.add(data["placement"][0])
    assert placed == {"n0", "n1", "n2"}
    ray_nodes.cluster.add_node(num_cpus=1, num_gpus=2, resources={"accelerator_type:V100": 1},
                               labels={"kant.node": "n0", "kant.leaf": "l0", "kant.spine": "s0"})
    deadline = time.monotonic() + 30
    while "its name 'n0' is held by the alive Ray node" not in kant.log_text():
        assert time.monotonic() < deadline, kant.log_text()[-2000:]
        time.sleep(0.2)
    assert sorted(n for n in _nodes(kant) if n.startswith("n")) == ["n0", "n1", "n2"]


def _nodes(kant: Server) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in kant.admin.get("/v1/nodes").json()}


def test_reasons_name_the_signal(kant: Server) -> None:
    job_id = submit(kant, command="echo up; kill -KILL $$")
    data = wait_for(kant, job_id, ENDED)
    assert data["state"] == "failed", data
    assert re.search(r"(killed by signal SIGKILL|SIGKILL in a shell)", data["reason"]), data["reason"]


def test_preemption_sends_the_checkpoint_signal_then_stops(ray_nodes: RayNodes, tmp_path: Path) -> None:
    """``Executor.stop(job, "preempt")``: SIGUSR1 first (the job saves its checkpoint in
    KANT_CHECKPOINT_DIR and says so), then SIGTERM/SIGKILL for what is left; no event follows."""
    import ray

    from kant.service.executors.base import Launch
    from kant.service.executors.ray_exec import RayExecutor

    ray.shutdown()  # (the executor connects itself)
    ex = RayExecutor(ray_nodes.address, log_dir=tmp_path / "logs", checkpoint_dir=tmp_path / "ckpt",
                     stop_grace_s=1.0, checkpoint_grace_s=5.0)
    cmd = ("trap 'echo saved > $KANT_CHECKPOINT_DIR/step; echo checkpoint; exit 0' USR1; "
           "sleep 4714 < /dev/null > /dev/null 2>&1 & echo ready; while true; do sleep 0.2; done")
    try:
        ex.start(Launch(90_101, 1, ("n1",), 1, 0.0, cmd))
        deadline = time.monotonic() + 60
        while "ready" not in ex.logs.read(90_101).text:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        ex.stop(90_101, "preempt")
        while "checkpoint" not in ex.logs.read(90_101).text:
            assert time.monotonic() < deadline, ex.logs.read(90_101).text
            time.sleep(0.1)
        assert (tmp_path / "ckpt" / "job-90101" / "step").read_text() == "saved\n"
        assert wait_no_processes("sleep 4714") == []
        assert ex.poll(0.0) == [] and ex.running_jobs() == {}
    finally:
        ex.close()
