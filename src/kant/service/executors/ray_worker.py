"""What runs on a Ray node for one worker of a kant job: a *detached named Ray actor*
(:class:`WorkerHost`) that holds the worker's GPUs, starts the job's command in a shell when the
executor says go, keeps its output and exit code until the executor has collected them, and stops
every process of the worker when asked.

The actor outlives the ``kant serve`` that created it (``lifetime="detached"``, named
``kant-JOB-RUN-WORKER`` in the ``kant`` namespace): a restarted or newly elected service finds it by
name and follows it again (:meth:`RayExecutor.restore <kant.service.executors.ray_exec.RayExecutor.restore>`).

Whole-worker cleanup: the command runs in a cgroup v2 of its own when the actor can create one (a
writable cgroup2 hierarchy; then ``memory.events`` tells an out-of-memory kill), else the actor is the
*child subreaper* of everything the command starts (``PR_SET_CHILD_SUBREAPER``): a process that
leaves the process group or the session (``setsid``, a double fork) is re-parented to the actor, and
a stop signals every descendant of the actor. The command also dies with the actor's process
(``PR_SET_PDEATHSIG``).

This module imports only the standard library and Ray: the executor ships it to the nodes by value,
so a node needs Ray and Python, not kant.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["WorkerHost", "KV_NAMESPACE", "actor_name", "parse_actor_name", "cleanup_mode", "exit_reason"]

#: the Ray namespace of kant's actors
KV_NAMESPACE = "kant"
_CHUNK = 1 << 16
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_CGROUP_ROOT = Path("/sys/fs/cgroup")


def actor_name(job_id: int, run: int, worker: int) -> str:
    """The name of the actor of one worker of one run (unique in kant's namespace)."""
    return f"kant-{job_id}-{run}-{worker}"


def parse_actor_name(name: str) -> tuple[int, int, int] | None:
    """(job, run, worker) of an :func:`actor_name`, or None for another name."""
    parts = name.split("-")
    if len(parts) != 4 or parts[0] != "kant" or not all(p.isdigit() for p in parts[1:]):
        return None
    return int(parts[1]), int(parts[2]), int(parts[3])


def exit_reason(code: int, oom: bool) -> str:
    """How a command ended, in words: its code, the signal that killed it, out of memory."""
    if oom:
        return "was killed: out of memory" + (f" ({_signal_name(-code)})" if code < 0 else "")
    if code < 0:
        return f"was killed by signal {_signal_name(-code)}"
    if code > 128 and code - 128 < 65:
        return f"exited with code {code} ({_signal_name(code - 128)} in a shell)"
    return f"exited with code {code}"


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _libc_prctl() -> Callable[..., int] | None:
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):  # not Linux
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _own_cgroup2() -> Path | None:
    """This process's cgroup v2 folder when the unified hierarchy is mounted and writable, else None."""
    try:
        mounts = Path("/proc/self/mounts").read_text()
        if not any(line.split()[1:3] == [str(_CGROUP_ROOT), "cgroup2"] for line in mounts.splitlines()
                   if len(line.split()) > 2):
            return None
        line = next(ln for ln in Path("/proc/self/cgroup").read_text().splitlines() if ln.startswith("0::"))
    except (OSError, StopIteration):
        return None
    folder = _CGROUP_ROOT / line[3:].lstrip("/")
    return folder if os.access(folder, os.W_OK) else None


def cleanup_mode() -> str:
    """``cgroup`` when a worker's processes can get a cgroup v2 of their own here, else ``subreaper``."""
    return "cgroup" if _own_cgroup2() is not None else "subreaper"


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, of every process now (from /proc)."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        out.setdefault(int(fields[1]), []).append(int(entry))
    return out


def _descendants(root: int) -> list[int]:
    kids = _children()
    out: list[int] = []
    todo = list(kids.get(root, ()))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, ()))
    return out


class WorkerHost:
    """The Ray actor of one worker (see the module docstring). Its methods run on Ray's threads
    (``max_concurrency`` > 1: a long poll does not block a stop)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None
        self.code: int | None = None
        self.oom = False
        self.note = ""
        self._buf = bytearray()
        self._base = 0  # the offset of _buf[0] in the worker's whole output
        self._cond = threading.Condition()
        self._started = False
        self._cgroup: Path | None = None
        self._stopping = False
        prctl = _libc_prctl()
        if prctl is not None:
            prctl(_PR_SET_CHILD_SUBREAPER, 1)

    # --- asked by the executor -------------------------------------------------------------------
    def ready(self) -> dict[str, Any]:
        """It holds its GPUs: where it runs (node IP, a free port on rank 0, GPU ids, pid)."""
        import ray

        return {"ip": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
                "port": _free_port() if self.spec["rank"] == 0 else 0,
                "gpus": [str(g) for g in ray.get_gpu_ids()], "node_id": ray.get_runtime_context().get_node_id(),
                "pid": os.getpid(), "cleanup": cleanup_mode()}

    def go(self, addr: str, port: int) -> str:
        """Start the command (once; rank 0's ``addr`` and ``port`` are the gang's MASTER_ADDR/PORT).
        Returns why it could not start ('' when it started)."""
        import ray

        with self._cond:
            if self._started:
                return ""
            self._started = True
        spec = self.spec
        cwd = spec.get("cwd") or None
        node = spec["env"].get("KANT_NODE", "?")
        if cwd is not None and not os.path.isdir(cwd):
            self._finish(127, f"kant: --chdir {cwd}: no such folder on node {node}\n")
            return f"--chdir {cwd}: no such folder on node {node}"
        base = dict(os.environ) if spec.get("job_env") is None else dict(spec["job_env"])
        gpu_ids, node_id = ([str(g) for g in ray.get_gpu_ids()], ray.get_runtime_context().get_node_id()) \
            if ray.is_initialized() else ([], "")  # (outside Ray: the tests of this module's process handling)
        env = {**base, **spec["env"], "MASTER_ADDR": addr, "MASTER_PORT": str(port),
               "CUDA_VISIBLE_DEVICES": ",".join(gpu_ids), "KANT_RAY_NODE_ID": node_id}
        ckpt = env.get("KANT_CHECKPOINT_DIR")
        if ckpt:
            try:
                os.makedirs(ckpt, exist_ok=True)
            except OSError as exc:
                self._append(f"kant: cannot create KANT_CHECKPOINT_DIR {ckpt}: {exc.strerror or exc}\n".encode())
        self._cgroup = self._make_cgroup()
        try:
            self.proc = subprocess.Popen(["/bin/sh", "-c", spec["command"]], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                         start_new_session=True, preexec_fn=self._preexec())
        except OSError as exc:
            self._finish(127, f"kant: cannot start the command: {exc}\n")
            return f"cannot start the command: {exc}"
        threading.Thread(target=self._read, name="kant-worker-output", daemon=True).start()
        return ""

    def state(self) -> dict[str, Any]:
        """Whether the command started, and its exit code once it ended (None before)."""
        with self._cond:
            return {"started": self._started, "code": self.code, "oom": self.oom}

    def poll(self, offset: int, wait_s: float) -> tuple[bytes, int | None, bool]:
        """Output from byte ``offset`` on (what is before it was collected: it is dropped), waiting up
        to ``wait_s`` for some; and the exit code once the command ended and all its output is here."""
        deadline = time.monotonic() + wait_s
        with self._cond:
            if offset > self._base:
                del self._buf[:offset - self._base]
                self._base = offset
            while len(self._buf) == 0 and self.code is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            data = bytes(self._buf[max(offset - self._base, 0):])
            return data, self.code, self.oom

    def stop(self, why: str, grace_s: float, checkpoint_grace_s: float) -> None:
        """Stop every process of the worker: ``preempt``: SIGUSR1 first and up to
        ``checkpoint_grace_s`` to end; then SIGTERM, up to ``grace_s``, SIGKILL."""
        with self._cond:
            self._stopping = True
            if not self._started:
                self._started = True  # a go that comes later does nothing
                if self.code is None:
                    self.code = 143
                    self._cond.notify_all()
                return
        if why == "preempt" and self._signal_all(signal.SIGUSR1):
            self._wait_gone(checkpoint_grace_s)
        if self._signal_all(signal.SIGTERM):
            self._wait_gone(grace_s)
        self._signal_all(signal.SIGKILL)
        self._wait_gone(5.0)

    # --- the command's processes ----------------------------------------------------------------
    def _preexec(self) -> Callable[[], None]:
        prctl = _libc_prctl()
        cgroup = self._cgroup

        def preexec() -> None:
            if prctl is not None:
                prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if cgroup is not None:
                with contextlib.suppress(OSError):
                    (cgroup / "cgroup.procs").write_text("0")

        return preexec

    def _make_cgroup(self) -> Path | None:
        own = _own_cgroup2()
        if own is None:
            return None
        folder = own / f"kant-{self.spec['env'].get('KANT_JOB_ID', 'x')}-{self.spec['env'].get('KANT_RUN', 'x')}-" \
                       f"{self.spec['rank']}"
        try:
            folder.mkdir(exist_ok=True)
        except OSError:
            return None
        return folder

    def _pids(self) -> list[int]:
        """Every live process of the worker (the cgroup's, or every descendant of this actor)."""
        if self._cgroup is not None:
            with contextlib.suppress(OSError):
                pids = [int(p) for p in (self._cgroup / "cgroup.procs").read_text().split()]
                return pids + [p for p in _descendants(os.getpid()) if p not in pids]
        return _descendants(os.getpid())

    def _signal_all(self, sig: int) -> bool:
        """Send ``sig`` to every process of the worker; False when there is none left."""
        self._reap()
        pids = [p for p in self._pids() if not _zombie(p)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        return bool(pids)

    def _wait_gone(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._reap()
            if not [p for p in self._pids() if not _zombie(p)]:
                return
            time.sleep(0.05)

    def _reap(self) -> None:
        """Collect the exit of processes re-parented to this actor (the subreaper's duty); the
        command's own process is the reader's to wait for."""
        own = self.proc.pid if self.proc is not None else -1
        for pid in _children().get(os.getpid(), []):
            if pid != own and _zombie(pid):
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)

    def _read(self) -> None:
        """Keep the command's output until it exits (and goes quiet), then what it left running ends."""
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        while True:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                chunk = os.read(fd, _CHUNK)
                if not chunk:
                    break  # no writer left
                self._append(chunk)
            self._reap()
            if proc.poll() is not None:
                break
        code = proc.wait()
        if not self._stopping:  # what the command left running ends with it (as Slurm's job step)
            if self._signal_all(signal.SIGTERM):
                self._wait_gone(2.0)
            self._signal_all(signal.SIGKILL)
        with contextlib.suppress(OSError):
            while True:  # what the last processes wrote (the pipe has no writer left, or they were killed)
                ready, _, _ = select.select([fd], [], [], 0.05)
                chunk = os.read(fd, _CHUNK) if ready else b""
                if not chunk:
                    break
                self._append(chunk)
        self._reap()
        self._finish(code, "", oom=self._oom_killed())

    def _oom_killed(self) -> bool:
        if self._cgroup is None:
            return False
        try:
            for line in (self._cgroup / "memory.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and int(value) > 0:
                    return True
        except (OSError, ValueError):
            pass
        return False

    def _append(self, data: bytes) -> None:
        with self._cond:
            self._buf += data
            self._cond.notify_all()

    def _finish(self, code: int, note: str, *, oom: bool = False) -> None:
        with self._cond:
            self._buf += note.encode()
            self.code = code
            self.oom = oom
            self._cond.notify_all()
        if self._cgroup is not None:
            with contextlib.suppress(OSError):
                self._cgroup.rmdir()


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # gone
    return stat[stat.rfind(")") + 2:].split()[0] in ("Z", "X")
