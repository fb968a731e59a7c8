"""Stopping the digital twin's worker pools leaves nothing behind (issue 28): a process that closes its
:class:`Twin` and is then ended by SIGTERM (what uvicorn does after its shutdown: it re-raises the
signal) gets no "leaked semaphore" warning from multiprocessing's resource tracker, and the worker
ignores a terminal's Ctrl-C (SIGINT to the process group), which its service handles."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from kant.service.twin import Twin

    twin = Twin(lambda: None, predict_on=False)
    pid = twin._submit("predict", os.getpid, timeout=60)       # a worker is up
    print("sigint", twin._submit("predict", signal.getsignal, signal.SIGINT, timeout=60), flush=True)
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
