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
    specs = node_specs([
        _node("aa11", labels={"kant.node": "g0", "kant.leaf": "r1", "kant.spine": "p0"}, GPU=8.0,
              **{"accelerator_type:H100": 1.0}),
        _node("bb22", GPU=4.0, labels={"kant.gpu-type": "A100"}),
        _node("cc33", name="10.0.0.1"),  # the same node name as bb22: the node id tells them apart
        _node("dd44", alive=False, GPU=8.0),  # dead nodes are not kant's
    ], names)
    assert specs == {
        "aa11": NodeSpec("g0", "H100", 8, 8000, 65536, "r1", "p0"),
        "bb22": NodeSpec("10.0.0.1", "A100", 4, 8000, 65536, "ray", "ray"),
        "cc33": NodeSpec("10.0.0.1-cc33", "GPU", 0, 8000, 65536, "ray", "ray"),
    }
    # a name stays with its node: bb22 leaves, cc33 keeps its name, and bb22 gets its own back
    again = node_specs([_node("cc33"), _node("bb22", GPU=4.0)], names)
    assert (again["cc33"].name, again["bb22"].name) == ("10.0.0.1-cc33", "10.0.0.1")


@pytest.mark.parametrize(("address", "message"), [
    ("ray://10.0.0.5:10001", "Ray Client (ray://) is not supported"),
    ("nope", "not auto, HOST:PORT or ray://HOST:PORT"),
    (f"127.0.0.1:{free_port()}", "cannot connect to Ray (Connection refused)"),
])
def test_a_ray_address_kant_cannot_use_is_a_one_line_error(tmp_path: Path, address: str, message: str) -> None:
    with pytest.raises(KantError) as err:
        RayExecutor(address, log_dir=tmp_path, checkpoint_dir=tmp_path)
    assert str(err.value).startswith(f"--ray-address {address}: ")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_last_output_written_just_before_exit_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command that writes its last line and exits between the worker's wait for output and its
    look at the process: that line is still streamed (it was lost: a job's log missed its END)."""
    import select
    import subprocess

    from kant.service.executors import ray_worker

    proc = subprocess.Popen(["/bin/sh", "-c", "echo START; echo END"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    proc.wait()  # it has written both lines and exited before the worker looks

    def never_ready(rlist: list[int], wlist: list[int], xlist: list[int], timeout: float) -> tuple[list[int], ...]:
        return [], [], []

    monkeypatch.setattr(select, "select", never_ready)
    out = b"".join(item[1] for item in ray_worker._stream(proc))
    assert out == b"START\nEND\n"
