"""The database fails under a real ``kant serve``: a SQLite file on a full disk or a read-only
filesystem (a small tmpfs, mounted for the test: needs root), and a PostgreSQL server restarted
mid-load (a private server, never the shared one).

What is promised: a write the database refuses is answered 503 with the reason (``database or disk
is full``, ``readonly database``), never a 500; a refused batch leaves nothing behind (no partial
writes); whatever was acknowledged is there afterwards, exactly once. When a write of the
scheduling loop itself fails, or the PostgreSQL connection that holds the leadership is lost, the
process stops with a one-line error (exit 3, no traceback) rather than schedule from a state the
database does not hold: a supervisor (systemd ``Restart=always``, a Kubernetes pod) starts it
again, and it rebuilds from the database. The tests play the supervisor.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reliability.apifuzz import log_problems
from reliability.private_pg import private_postgres_or_skip
from service.serve_proc import Server, start_server
from service.test_durability import Load, all_jobs, check_no_double_booking, check_nothing_lost, load_body


@contextlib.contextmanager
def small_disk(folder: Path, size_kib: int) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs (a disk that fills up, then turns read-only) needs root")
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(folder)], check=True,
                   capture_output=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False, capture_output=True)


def fill(folder: Path) -> Path:
    """Fill the filesystem of ``folder`` to the last byte; returns the filler file."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    return filler


def submit_batches(srv: Server, token: str, tag: str, n: int) -> tuple[dict[str, list[int]], list[str], list[int]]:
    """``n`` batches of 20 jobs (names ``tag-b-k``); returns the acknowledged batches' ids, the refused
    batches' names and every refusal's status."""
    acked: dict[str, list[int]] = {}
    refused: list[str] = []
    statuses = []
    with srv.client(token) as c:
        for b in range(n):
            name = f"{tag}-{b}"
            r = c.post("/v1/jobs/batch", json={"jobs": [{"name": f"{name}-{k}", "gpus_per_worker": 1,
                                                         "command": "x" * 2000} for k in range(20)]})
            if r.status_code == 201:
                acked[name] = [j["id"] for j in r.json()["jobs"]]
            else:
                statuses.append(r.status_code)
                refused.append(name)
                assert r.status_code == 503 and r.json()["message"].startswith("database unavailable:"), r.text
    return acked, refused, statuses


def check_batches(jobs: list[dict[str, Any]], acked: dict[str, list[int]], refused: list[str]) -> None:
    names = [j["name"] for j in jobs]
    assert len(names) == len(set(names))  # each job once
    ids = {j["id"] for j in jobs}
    for batch in acked.values():
        assert set(batch) <= ids
    for name in refused:  # a refused batch left no job behind
        assert not any(n.startswith(f"{name}-") for n in names), name


def test_disk_full_then_read_only_sqlite(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", 8192) as disk:
        url = f"sqlite:///{disk / 'kant.db'}"
        srv = start_server(tmp_path, url, cluster="4x8:V100", extra=["--no-predict"])
        try:
            token = srv.tenant("t")
            acked, refused, _ = submit_batches(srv, token, "before", 5)
            assert not refused
            filler = fill(disk)
            full_acked, full_refused, statuses = submit_batches(srv, token, "full", 40)
            assert full_refused and set(statuses) == {503}
            r = srv.client(token).post("/v1/jobs", json={"gpus_per_worker": 1, "command": "y" * 60000})
            assert r.status_code == 503 and "full" in r.json()["message"], r.text
            # a write of the scheduling loop (this instant's starts) cannot be written either: the
            # process stops with one line rather than schedule from a state the database lacks
            with contextlib.suppress(httpx.HTTPError):  # (answered 503, or the process is gone first)
                srv.admin.post("/v1/clock", json={"to": 10.0})
            srv.proc.wait(30)
            assert srv.proc.returncode == 3
            assert "the database failed" in srv.log_text(), srv.log_text()[-2000:]
            filler.unlink()
            again = start_server(tmp_path, url, cluster="4x8:V100", extra=["--no-predict"],
                                 admin_token=srv.admin_token)
            try:
                jobs = all_jobs(again, token)
                acked |= full_acked
                check_batches(jobs, acked, full_refused)
                assert all(j["state"] == "pending" for j in jobs)  # the unwritten turn started nothing
                _, after_refused, _ = submit_batches(again, token, "after", 3)
                assert not after_refused  # there is room again
                again.advance(10.0)
                check_no_double_booking(again, all_jobs(again, token))
            finally:
                again.stop()
            # a read-only database: the service refuses to start, with the reason on one line
            subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True, capture_output=True)
            run = subprocess.run(again.args, capture_output=True, text=True, timeout=60,
                                 env={**os.environ, "KANT_ADMIN_TOKEN": srv.admin_token})
            assert run.returncode == 2 and "not writable" in run.stderr and "Traceback" not in run.stderr, run.stderr
        finally:
            srv.stop()
        assert log_problems(srv.log_text()) == [] and log_problems(again.log_text()) == []


def test_postgresql_restarted_under_load(tmp_path: Path) -> None:
    """A private PostgreSQL server is restarted (immediate mode: as a crash) under a submit load of
    4 clients: the service stops with one line, is started again (the supervisor) and loses no
    acknowledged job; jobs running before run where they ran; retried keys find their jobs."""
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(private_postgres_or_skip())
        srv = start_server(tmp_path, pg.url, cluster="8x8:V100", clock="wall", extra=["--no-predict"])
        stack.callback(srv.stop)
        token = srv.tenant("load")
        load = Load(srv.url, token, clients=4)
        stack.callback(load.stop.set)
        time.sleep(2.0)
        running_before = {j["id"]: j["placement"] for j in all_jobs(srv, token) if j["state"] == "running"}
        pg.restart("immediate")
        srv.proc.wait(30)  # the leader's lock connection is gone: the process stops
        assert srv.proc.returncode == 3 and "the leader lock was lost" in srv.log_text()
        again = start_server(tmp_path, pg.url, cluster="8x8:V100", clock="wall", extra=["--no-predict"],
                             admin_token=srv.admin_token, port=srv.port)
        time.sleep(1.0)  # the clients go on against the new process
        acked = load.finish()
        try:
            jobs = check_nothing_lost(again, token, acked, running_before)
            with again.client(token) as c:
                for key in sorted(acked)[:30]:
                    r = c.post("/v1/jobs", json=load_body(int(key.split("-")[1])), headers={"Idempotency-Key": key})
                    assert (r.status_code, r.json()["id"]) == (200, acked[key])
            check_no_double_booking(again, jobs)
            print(f"postgresql restart: {len(acked)} submits acknowledged, none lost, "
                  f"{len(running_before)} running jobs kept their nodes")
        finally:
            again.stop()
        assert log_problems(srv.log_text()) == [] and log_problems(again.log_text()) == []
