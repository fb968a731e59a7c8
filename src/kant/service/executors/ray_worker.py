"""What runs on a Ray node for one worker of a kant job: a Ray task (a streaming generator) that
holds the worker's GPUs, waits until every worker of its gang holds its own (the gang's go signal,
in Ray's key-value store), then runs the job's command in a shell and streams its output back.

This module imports only the standard library and Ray: the executor ships it to the nodes by value,
so a node needs Ray and Python, not kant. What the task yields, in order:

* ``("ready", info)``: it holds its GPUs (``info``: node IP, a free port on rank 0, GPU ids, pid);
* ``("out", bytes)``: output of the command (stdout and stderr together), at most every 0.2 s;
* ``("exit", code, note)``: the command ended with ``code`` (125 and a note: the gang never started).

A cancel (``ray.cancel``) interrupts the task: the command's process group gets SIGTERM, then
SIGKILL after the grace period. The command also dies with the task's process (PR_SET_PDEATHSIG),
so a node's raylet going away leaves nothing running.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["run_worker", "KV_NAMESPACE", "GANG_NOT_STARTED"]

KV_NAMESPACE = "kant"
#: exit code of a worker whose gang was never told to go (another worker could not start in time)
GANG_NOT_STARTED = 125
_FLUSH_S = 0.2
_CHUNK = 1 << 16


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> Callable[[], None]:
    """A preexec function that makes the child get SIGKILL when the task's process dies (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):  # not Linux: the process group is still killed on cancel
        return lambda: None

    def preexec() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

    return preexec


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5.0)


def _wait_go(key: str, timeout_s: float) -> dict[str, Any] | None:
    from ray.experimental import internal_kv

    deadline = time.monotonic() + timeout_s
    while True:
        raw = internal_kv._internal_kv_get(key, namespace=KV_NAMESPACE)
        if raw:
            go: dict[str, Any] = json.loads(raw)
            return go
        if time.monotonic() > deadline:
            return None
        time.sleep(0.02)


def run_worker(spec: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    """The body of the Ray task of one worker (``spec``: command, env, rank, go key, timeouts)."""
    import ray

    gpu_ids = [str(g) for g in ray.get_gpu_ids()]
    ip = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    yield ("ready", {"ip": ip, "port": _free_port() if spec["rank"] == 0 else 0,
                     "gpus": gpu_ids, "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()})
    go = _wait_go(spec["go_key"], float(spec["start_timeout"]))
    if go is None:
        yield ("exit", GANG_NOT_STARTED, "kant: the gang did not start: another worker could not start in time\n")
        return
    env = {**os.environ, **spec["env"], "MASTER_ADDR": str(go["addr"]), "MASTER_PORT": str(go["port"]),
           "CUDA_VISIBLE_DEVICES": ",".join(gpu_ids), "KANT_RAY_NODE_ID": ray.get_runtime_context().get_node_id()}
    note = b""
    ckpt = env.get("KANT_CHECKPOINT_DIR")
    if ckpt:
        try:
            os.makedirs(ckpt, exist_ok=True)
        except OSError as exc:
            note = f"kant: cannot create KANT_CHECKPOINT_DIR {ckpt}: {exc.strerror or exc}\n".encode()
    if note:
        yield ("out", note)
    proc = subprocess.Popen(["/bin/sh", "-c", spec["command"]], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, cwd=spec.get("cwd") or None, start_new_session=True,
                            preexec_fn=_die_with_parent())
    try:
        yield from _stream(proc)
        code = proc.wait()
        _kill_group(proc, 0.0)  # what the command left running in the background ends with it
        yield ("exit", code, "")
    except BaseException:  # a cancel (KeyboardInterrupt), or the task's end: stop the command
        _kill_group(proc, float(spec.get("stop_grace_s", 5.0)))
        raise


def _stream(proc: subprocess.Popen[bytes]) -> Iterator[tuple[Any, ...]]:
    """Chunks of the command's output until it closes its output or exits and goes quiet."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    buf = bytearray()
    last = time.monotonic()
    while True:
        ready, _, _ = select.select([fd], [], [], _FLUSH_S)
        eof = False
        if ready:
            try:
                chunk = os.read(fd, _CHUNK)
                eof = not chunk
                buf += chunk
            except BlockingIOError:
                ready = []
        quiet_and_done = not ready and proc.poll() is not None
        if quiet_and_done:  # it may have written its last output after the select: take what is left
            eof = _drain(fd, buf)
        now = time.monotonic()
        if buf and (eof or quiet_and_done or len(buf) >= _CHUNK or now - last >= _FLUSH_S):
            yield ("out", bytes(buf))
            buf.clear()
            last = now
        if eof or quiet_and_done:
            return


def _drain(fd: int, buf: bytearray) -> bool:
    """Append what the pipe holds now to ``buf``; True at its end (no writer left)."""
    while True:
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            return False
        if not chunk:
            return True
        buf += chunk
