"""A PostgreSQL outage under a supervisor: the service is run as systemd's ``Restart=always`` with
``RestartSec=1`` runs it (docs/service.md, "Running under a supervisor"), on a private PostgreSQL
server that is stopped (immediate mode: as a crash) for a few seconds under a submit load.

What is promised: the leader exits 3 with one line when its lock connection goes; the supervisor
starts it again at once; the new process waits for the database (``--db-wait``) instead of
failing (so the supervisor restarts it once, not in a loop that systemd's start limit or
Kubernetes' CrashLoopBackOff would slow down), and is ready within seconds of the database's return;
no acknowledged job is lost, jobs running before run where they ran. And with no database for
longer than ``--db-wait``, the process gives up with one error line (exit 2).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from pathlib import Path

from reliability.apifuzz import log_problems
from reliability.private_pg import private_postgres_or_skip
from service.serve_proc import Server, free_port, start_server
from service.test_durability import Load, all_jobs, check_no_double_booking, check_nothing_lost

OUTAGE_S = 4.0
EXTRA = ["--no-predict", "--db-wait", "60"]


class Supervisor:
    """Starts ``kant serve`` again whenever it exits, after ``restart_s`` (systemd ``Restart=always``,
    ``RestartSec``); ``exits`` lists the exit codes seen."""

    def __init__(self, work: Path, url: str, restart_s: float = 1.0) -> None:
        self.work, self.url, self.restart_s = work, url, restart_s
        self.server = start_server(work, url, cluster="8x8:V100", clock="wall", extra=EXTRA)
        self.exits: list[int] = []
        self.starts: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            code = self.server.proc.poll()
            if code is None:
                time.sleep(0.05)
                continue
            self.exits.append(code)
            if self._stop.wait(self.restart_s):
                return
            old = self.server
            self.starts.append(time.monotonic())
            self.server = start_server(self.work, self.url, cluster="8x8:V100", clock="wall", extra=EXTRA,
                                       admin_token=old.admin_token, port=old.port, wait=False)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.server.stop()

    def logs(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.work.glob("serve-*.log")))




def test_postgresql_outage_under_a_supervisor(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(private_postgres_or_skip())
        sup = Supervisor(tmp_path, pg.url)
        stack.callback(sup.close)
        token = sup.server.tenant("load")
        load = Load(sup.server.url, token, clients=4)
        stack.callback(load.stop.set)
        time.sleep(2.0)
        first: Server = sup.server
        running_before = {j["id"]: j["placement"] for j in all_jobs(first, token) if j["state"] == "running"}
        pg.stop("immediate")
        first.proc.wait(30)  # the leader's lock connection is gone: the process stops
        down = time.monotonic()
        deadline = down + 60
        while "trying again in" not in sup.logs() and time.monotonic() < deadline:
            time.sleep(0.1)  # (the new process is up and waiting for the database)
        time.sleep(max(OUTAGE_S - (time.monotonic() - down), 0.0))
        assert sup.exits == [3], sup.exits  # restarted once: the new process waits for the database
        outage = time.monotonic() - down
        pg.start()
        back = time.monotonic()
        sup.server.wait_ready(60)
        ready_after = time.monotonic() - back
        time.sleep(1.0)  # the clients go on against the new process
        acked = load.finish()
        assert sup.exits == [3] and len(sup.starts) == 1, sup.exits
        assert ready_after < 15.0, ready_after
        again = sup.server
        jobs = check_nothing_lost(again, token, acked, running_before)
        check_no_double_booking(again, jobs)
        logs = sup.logs()
        assert "the leader lock was lost; exiting" in logs
        assert "trying again in" in logs and "--db-wait" in logs
        assert log_problems(logs) == []
        print(f"postgresql outage of {outage:.1f} s under a supervisor: 1 restart, ready {ready_after:.1f} s after "
              f"the database came back, {len(acked)} submits acknowledged, none lost, "
              f"{len(running_before)} running jobs kept their nodes")


def test_no_database_for_longer_than_db_wait_is_one_error_line(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres"
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "kant.cli.main", "serve", "--db", url, "--port", str(free_port()),
                          "--no-predict", "--db-wait", "2", "--log-level", "warning"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    took = time.monotonic() - t0
    assert out.returncode == 2, out.stderr
    lines = out.stderr.splitlines()
    assert lines[-1].startswith("error: cannot connect to database") and "Connection refused" in lines[-1]
    assert sum("trying again in" in line for line in lines) >= 2, out.stderr
    assert "Traceback" not in out.stderr
    assert took >= 2.0
