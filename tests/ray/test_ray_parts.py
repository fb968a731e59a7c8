"""The Ray executor's pure parts, without a Ray cluster: the log store, and how Ray's node listing
becomes kant's nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kant.errors import KantError
from kant.model.cluster import NodeSpec
from kant.service.executors.logstore import LogStore
from kant.service.executors.ray_exec import RayExecutor, node_specs
from service.serve_proc import free_port


@given(text=st.text(max_size=200), cuts=st.lists(st.integers(1, 64), min_size=1, max_size=40),
       limits=st.lists(st.integers(1, 16), min_size=1, max_size=40))
def test_log_reads_from_next_offset_give_the_text_back_exactly(tmp_path_factory, text: str, cuts: list[int],
                                                               limits: list[int]) -> None:
    """Whatever chunks the output arrived in and whatever byte limits a follower reads with, the
    reads joined are the text (a read never splits a UTF-8 character)."""
    store = LogStore(Path(tmp_path_factory.mktemp("logs")))
    data = text.encode()
    pos, k = 0, 0
    while pos < len(data):
        store.append(7, 1, 0, data[pos:pos + cuts[k % len(cuts)]])
        pos += cuts[k % len(cuts)]
        k += 1
    got, offset, i = [], 0, 0
    while True:
        chunk = store.read(7, 0, offset=offset, limit=limits[i % len(limits)])
        i += 1
        got.append(chunk.text)
        assert chunk.next_offset > offset or chunk.next_offset == chunk.size
        if chunk.next_offset == chunk.size:
            break
        offset = chunk.next_offset
    assert "".join(got) == text


def test_log_store_runs_workers_and_tail(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    store.append(3, 1, 0, b"a\nb\n")
    store.append(3, 2, 1, b"x\ny\nz")
    assert store.runs(3) == [1, 2]
    assert store.workers(3, 2) == 2  # worker 1 wrote: workers 0 and 1
    assert store.read(3, 1).run == 2  # the latest run by default
    assert store.read(3, 1).text == "x\ny\nz"
    assert store.read(3, 0, run=1).text == "a\nb\n"
    assert store.tail(3, 2, 1, lines=2) == "y\nz"  # the unfinished last line counts
    assert store.read(4, 0).run == 0 and store.read(4, 0).text == ""  # a job that never ran


def _node(node_id: str, alive: bool = True, name: str = "10.0.0.1", labels: dict[str, str] | None = None,
          **res: float) -> dict[str, object]:
    return {"NodeID": node_id, "Alive": alive, "NodeName": name, "Labels": labels or {},
            "Resources": {"CPU": 8.0, "memory": 64 * 2**30, **res}}


def test_node_specs_from_labels_resources_and_defaults() -> None:
    names: dict[str, str] = {}
    refused: dict[str, str] = {}
    specs = node_specs([
        _node("aa11", labels={"kant.node": "g0", "kant.leaf": "r1", "kant.spine": "p0"}, GPU=8.0,
              **{"accelerator_type:H100": 1.0}),
        _node("bb22", GPU=4.0, labels={"kant.gpu-type": "A100"}),
        _node("dd44", alive=False, GPU=8.0),  # dead nodes are not kant's
    ], names, refused)
    assert specs == {
        "aa11": NodeSpec("g0", "H100", 8, 8000, 65536, "r1", "p0"),
        "bb22": NodeSpec("10.0.0.1", "A100", 4, 8000, 65536, "ray", "ray"),
    }
    assert refused == {}


def test_a_node_is_its_name_a_second_alive_one_is_refused_and_a_new_raylet_repairs_it() -> None:
    names: dict[str, str] = {}
    refused: dict[str, str] = {}
    first = node_specs([_node("bb22", GPU=4.0, labels={"kant.node": "n1"})], names, refused)
    assert [s.name for s in first.values()] == ["n1"]
    # the same name alive twice: the second is refused, with a reason naming both
    both = node_specs([_node("bb22", GPU=4.0, labels={"kant.node": "n1"}),
                       _node("cc33", GPU=4.0, labels={"kant.node": "n1"})], names, refused)
    assert list(both) == ["bb22"]
    assert "its name 'n1' is held by the alive Ray node bb22" in refused["cc33"]
    # bb22 dies: its id is dropped; cc33 (the raylet back under the same name) is n1 now
    back = node_specs([_node("bb22", alive=False, labels={"kant.node": "n1"}),
                       _node("cc33", GPU=4.0, labels={"kant.node": "n1"})], names, refused)
    assert {k: s.name for k, s in back.items()} == {"cc33": "n1"}
    assert names == {"cc33": "n1"} and refused == {}


@pytest.mark.parametrize(("address", "message"), [
    ("ray://10.0.0.5:10001", "Ray Client (ray://) is not supported"),
    ("nope", "not auto, HOST:PORT or ray://HOST:PORT"),
    ("127.0.0.1:{free_port}", "cannot connect to Ray (Connection refused)"),  # (a port taken when the test runs)
])
def test_a_ray_address_kant_cannot_use_is_a_one_line_error(tmp_path: Path, address: str, message: str) -> None:
    address = address.replace("{free_port}", str(free_port()))
    with pytest.raises(KantError) as err:
        RayExecutor(address, log_dir=tmp_path, checkpoint_dir=tmp_path)
    assert str(err.value).startswith(f"--ray-address {address}: ")
    assert message in str(err.value) and "\n" not in str(err.value)


WORKER_SCRIPT = """
import json, os, signal, subprocess, sys, time
from kant.service.executors.ray_worker import WorkerHost
spec = json.loads(sys.argv[1])
h = WorkerHost(spec)
print(json.dumps({"go": h.go("127.0.0.1", 1)}), flush=True)
deadline = time.monotonic() + 10
while b"ready" not in h.poll(0, 0.2)[0] and h.state()["code"] is None and time.monotonic() < deadline:
    pass
if sys.argv[2] != "wait":
    h.stop(sys.argv[2], 1.0, 1.0)
data, code, oom = h.poll(0, 10.0)
while code is None:
    data, code, oom = h.poll(0, 10.0)
print(json.dumps({"out": data.decode(), "code": code}), flush=True)
"""


def _host(command: str, how: str, cwd: str | None = None, job_env: dict[str, str] | None = None) -> dict[str, object]:
    """Run a :class:`WorkerHost` (no Ray) in a process of its own, as the actor's process would."""
    import json
    import subprocess
    import sys

    spec = {"command": command, "rank": 0, "cwd": cwd, "job_env": job_env,
            "env": {"KANT_NODE": "n0", "KANT_JOB_ID": "1", "KANT_RUN": "1"}}
    out = subprocess.run([sys.executable, "-c", WORKER_SCRIPT, json.dumps(spec), how], capture_output=True,
                         text=True, timeout=60, check=True).stdout.splitlines()
    result: dict[str, object] = {**json.loads(out[0]), **json.loads(out[1])}
    return result


def _processes(marker: str) -> list[str]:
    import subprocess

    ps = subprocess.run(["ps", "-eo", "stat,args"], capture_output=True, text=True, check=True).stdout
    return [ln for ln in ps.splitlines() if marker in ln and not ln.startswith("Z")]


def test_a_stop_ends_processes_that_escaped_with_setsid_and_a_double_fork() -> None:
    cmd = ("setsid sleep 5731 < /dev/null > /dev/null 2>&1 & (sh -c 'sleep 5732 > /dev/null 2>&1 &' &); "
           "echo ready; exec sleep 5733")
    got = _host(cmd, "cancel")
    assert got["go"] == "" and "ready" in str(got["out"])
    assert got["code"] == -15  # the shell (exec'd sleep) ended by SIGTERM
    assert _processes("sleep 573") == []


def test_leftovers_of_a_command_that_ended_are_stopped_and_its_last_output_kept() -> None:
    got = _host("setsid sleep 5741 < /dev/null > /dev/null 2>&1 & echo ready; echo last-line", "wait")
    assert (got["code"], got["out"]) == (0, "ready\nlast-line\n")
    assert _processes("sleep 5741") == []


def test_preempt_sends_the_checkpoint_signal_first() -> None:
    cmd = "trap 'echo checkpoint; exit 0' USR1; echo ready; while true; do sleep 0.05; done"
    got = _host(cmd, "preempt")
    # (every process of the worker gets it, as with Slurm's --signal: the loop's sleep ends by it)
    assert got["code"] == 0 and "checkpoint" in str(got["out"]), got


def test_a_missing_folder_fails_the_start_with_that_reason(tmp_path: Path) -> None:
    got = _host("pwd", "wait", cwd=str(tmp_path / "nope"))
    assert got["go"] == f"--chdir {tmp_path / 'nope'}: no such folder on node n0"
    assert got["code"] == 127


def test_the_job_environment_replaces_the_node_one_and_kant_sets_its_own_over_it() -> None:
    got = _host("echo A=${A:-unset} HOME=${HOME:-unset} KANT_JOB_ID=$KANT_JOB_ID", "wait",
                job_env={"A": "1", "KANT_JOB_ID": "forged"})
    assert got["out"] == "A=1 HOME=unset KANT_JOB_ID=1\n"


def test_exit_reasons_name_signals_and_out_of_memory() -> None:
    from kant.service.executors.ray_worker import exit_reason

    assert exit_reason(3, False) == "exited with code 3"
    assert exit_reason(-9, False) == "was killed by signal SIGKILL"
    assert exit_reason(137, False) == "exited with code 137 (SIGKILL in a shell)"
    assert exit_reason(-9, True) == "was killed: out of memory (SIGKILL)"
