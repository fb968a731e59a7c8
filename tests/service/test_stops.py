"""Stops leave nothing behind (issue 28). The digital twin's worker pools: a process that closes its
:class:`Twin` and is then ended by SIGTERM (what uvicorn does after its shutdown: it re-raises the
signal) gets no "leaked semaphore" warning from multiprocessing's resource tracker, and the worker
ignores a terminal's Ctrl-C (SIGINT to the process group), which its service handles. And a service
stopped while its leader still loads the database logs no error."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from kant.service.twin import Twin

    twin = Twin(lambda: None, predict_on=False, workers=2)
    pids = twin._submit("predict", os.getpid, [(), ()], timeout=60)  # the workers are up
    got = twin._submit("predict", signal.getsignal, [(signal.SIGINT,)], timeout=60)
    print("sigint", got[0], flush=True)
    twin.close()
    print("closed", flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)                      # as uvicorn ends the process
""")


def test_closed_twin_leaks_no_semaphore_at_a_signalled_exit() -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == -signal.SIGTERM, r.stderr
    assert "leaked" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.stdout.splitlines() == [f"sigint {signal.SIG_IGN}", "closed"], r.stdout + r.stderr


def test_a_service_stopped_while_it_loads_logs_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGTERM soon after the start (a large store still loading): the service closes its database
    under the loading leader, whose read then fails. That is a stop, not a failed start: no error,
    no traceback, no exit status of its own, and no loop started."""
    from kant.errors import KantError
    from kant.service.config import ServeConfig
    from kant.service.loop import ServiceLoop
    from kant.service.server import Service

    loading = threading.Event()

    def slow_load(self: ServiceLoop, cluster: object = None) -> None:
        loading.set()
        while not svc._stop.is_set():
            time.sleep(0.01)
        raise KantError("database unavailable: the connection pool was closed")

    def no_exit(code: int) -> None:
        raise AssertionError(f"os._exit({code})")

    monkeypatch.setattr(ServiceLoop, "load", slow_load)
    monkeypatch.setattr(os, "_exit", no_exit)  # (what the leader thread calls on a failed start)
    svc = Service(
        ServeConfig(
            db_url=f"sqlite:///{tmp_path}/k.db", token_out=tmp_path / "t", cluster="tiny", clock="manual", predict=False
        )
    )
    svc.prepare()
    with caplog.at_level(logging.INFO, logger="kant.serve"):
        svc.start()
        assert loading.wait(30)
        svc.close()
        assert svc._lead_thread is not None
        svc._lead_thread.join(30)
    assert not svc._lead_thread.is_alive() and svc.loop is None
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert "stopped while starting as leader" in caplog.text
