"""Runs on this machine as real processes: what the simulated executor does with an inference
service's replicas (a :class:`~kant.service.executors.base.Launch` with ``service`` and ``command``),
so that a service serves for real while training jobs stay simulated (docs/service.md).

Each run is one process per worker (``sh -c COMMAND``) in a process group of its own
(``start_new_session``), with the job's environment (``KANT_JOB_ID``, ``KANT_RUN``, ``WORLD_SIZE``,
``RANK``, ``KANT_CHECKPOINT_DIR``, ``CUDA_VISIBLE_DEVICES`` unset: nothing here holds a real GPU) and
``Launch.env`` over it. Output (stdout and stderr together) goes to a :class:`LogStore`, so ``kant logs``
shows it. When a worker exits, the run ends: ``finished`` (every worker exited 0) or ``failed`` with
``exited with code N: <last output line>``. A run with a fixed ``PORT`` in its ``Launch.env`` that is
taken on this machine fails at once (``port N is in use on 127.0.0.1``) instead of starting a process
that cannot listen, or one whose probe would reach another process.

:meth:`LocalRuns.stop` signals the process group: ``preempt`` SIGUSR1 first (the checkpoint signal)
and SIGTERM after ``checkpoint_grace_s``; ``cancel`` and ``timeout`` SIGTERM; then SIGKILL after
``stop_grace_s``. Stops and exits are handled on threads of this class: the caller (the loop) never
waits. Events are queued and handed out by :meth:`LocalRuns.poll` after the waker asked the loop to
poll.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kant.service.executors.base import LOCAL_HOST, ExecEvent, Launch, LogChunk, StopWhy
from kant.service.executors.logstore import LogStore

__all__ = ["LocalRuns", "port_taken"]

_TAIL_LINES = 1


def port_taken(port: int, host: str = LOCAL_HOST) -> bool:
    """Whether something on this machine listens on ``host:port`` (a bind test)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


@dataclass
class _Run:
    launch: Launch
    procs: list[subprocess.Popen[bytes]]
    stopped: bool = False  # stop() was called: its end reports nothing


class LocalRuns:
    """Real local processes for the runs given to it (see the module docstring). Thread-safe."""

    def __init__(self, log_dir: Path, checkpoint_dir: Path, *, stop_grace_s: float = 5.0,
                 checkpoint_grace_s: float = 2.0) -> None:
        self.logs = LogStore(log_dir)
        self.checkpoint_dir = Path(checkpoint_dir).absolute()
        self.stop_grace_s = stop_grace_s
        self.checkpoint_grace_s = checkpoint_grace_s
        self._lock = threading.Lock()
        self._runs: dict[int, _Run] = {}
        self._events: list[ExecEvent] = []
        self._wake: Callable[[], None] = lambda: None
        self._threads: list[threading.Thread] = []

    def set_waker(self, wake: Callable[[], None]) -> None:
        self._wake = wake

    def owns(self, job_id: int) -> bool:
        with self._lock:
            return job_id in self._runs

    def start(self, launch: Launch, now: float) -> None:
        """Start one process per worker; a taken fixed port or a command that cannot start fails the run."""
        assert launch.command is not None
        port = launch.env.get("PORT")
        if port is not None and port.isdigit() and port_taken(int(port)):
            self._event(ExecEvent("failed", launch.job_id, launch.run, now, None,
                                  f"port {port} is in use on {LOCAL_HOST}"))
            return
        procs: list[subprocess.Popen[bytes]] = []
        workers = len(launch.nodes)
        for k in range(workers):
            env = {**os.environ, "KANT_JOB_ID": str(launch.job_id), "KANT_RUN": str(launch.run),
                   "WORLD_SIZE": str(workers), "RANK": str(k),
                   "KANT_CHECKPOINT_DIR": str(self.checkpoint_dir / f"job-{launch.job_id}"), **launch.env}
            env.pop("CUDA_VISIBLE_DEVICES", None)
            try:
                proc = subprocess.Popen(["/bin/sh", "-c", launch.command], env=env, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as exc:
                for p in procs:
                    _signal(p, signal.SIGKILL)
                self._event(ExecEvent("failed", launch.job_id, launch.run, now, None, f"could not start: {exc}"))
                return
            procs.append(proc)
        run = _Run(launch, procs)
        with self._lock:
            self._runs[launch.job_id] = run
        for k, proc in enumerate(procs):
            self._thread(self._pump, run, k, proc)

    def stop(self, job_id: int, why: StopWhy = "cancel") -> None:
        """Signal the run's process groups (on a thread of its own: the caller does not wait)."""
        with self._lock:
            run = self._runs.pop(job_id, None)
            if run is None:
                return
            run.stopped = True
        self._thread(self._terminate, run, why)

    def _terminate(self, run: _Run, why: StopWhy) -> None:
        if why == "preempt":
            for p in run.procs:
                _signal(p, signal.SIGUSR1)
            _wait_all(run.procs, self.checkpoint_grace_s)
        for p in run.procs:
            _signal(p, signal.SIGTERM)
        if not _wait_all(run.procs, self.stop_grace_s):
            for p in run.procs:
                _signal(p, signal.SIGKILL)
            _wait_all(run.procs, 10.0)

    def _pump(self, run: _Run, worker: int, proc: subprocess.Popen[bytes]) -> None:
        """Copy a worker's output to the log store until it exits; then end the run if it was the last
        one (or the first to fail)."""
        launch = run.launch
        out = proc.stdout
        assert out is not None
        while True:
            data = os.read(out.fileno(), 65536)
            if not data:
                break
            self.logs.append(launch.job_id, launch.run, worker, data)
        code = proc.wait()
        with self._lock:
            if run.stopped or self._runs.get(launch.job_id) is not run:
                return
            if code == 0 and any(p.poll() is None for p in run.procs):
                return  # the others go on
            del self._runs[launch.job_id]
        for p in run.procs:  # the run ends with its first failing worker
            if p.poll() is None:
                _signal(p, signal.SIGKILL)
        now = math.inf  # (the instant the loop polls it: see poll)
        if code == 0:
            self._event(ExecEvent("finished", launch.job_id, launch.run, now, 0))
        else:
            last = self.logs.tail(launch.job_id, launch.run, worker, _TAIL_LINES).strip()
            what = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
            self._event(ExecEvent("failed", launch.job_id, launch.run, now, code,
                                  f"{what}: {last}" if last else what))
        self.logs.forget(launch.job_id, launch.run)

    def _event(self, ev: ExecEvent) -> None:
        with self._lock:
            self._events.append(ev)
        self._wake()

    def _thread(self, fn: Callable[..., None], *args: object) -> None:
        t = threading.Thread(target=fn, args=args, name="kant-local", daemon=True)
        t.start()
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)

    def poll(self, now: float) -> list[ExecEvent]:
        """Every event queued so far, at ``now`` at the latest (the loop's clock decides the instant)."""
        with self._lock:
            events, self._events = self._events, []
        return [ev if ev.time <= now else ExecEvent(ev.kind, ev.job_id, ev.run, now, ev.exit_code, ev.reason)
                for ev in events]

    def pending(self) -> bool:
        with self._lock:
            return bool(self._events)

    def read_logs(self, job_id: int, worker: int = 0, *, run: int | None = None, offset: int = 0,
                  limit: int = 1 << 20) -> LogChunk | None:
        if not self.logs.runs(job_id):
            return None
        return self.logs.read(job_id, worker, run=run, offset=offset, limit=limit)

    def close(self, timeout: float = 10.0) -> None:
        """Stop every run (SIGTERM, then SIGKILL) and wait for the threads."""
        with self._lock:
            runs = list(self._runs.values())
            self._runs.clear()
            for r in runs:
                r.stopped = True
        for r in runs:
            for p in r.procs:
                _signal(p, signal.SIGTERM)
        for r in runs:
            if not _wait_all(r.procs, min(self.stop_grace_s, timeout)):
                for p in r.procs:
                    _signal(p, signal.SIGKILL)
                _wait_all(r.procs, timeout)
        with self._lock:
            threads = list(self._threads)
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(deadline - time.monotonic(), 0.0))


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signal the worker's whole process group (the shell and what it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _wait_all(procs: list[subprocess.Popen[bytes]], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            return False
    return True
