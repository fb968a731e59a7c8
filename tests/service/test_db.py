"""The service database on SQLite and PostgreSQL: every method, migrations, leader election, durability."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

import kant.service.db.tokens as tokens_module
from kant.errors import KantError
from kant.service.db.database import Database
from kant.service.db.events import NewEvent
from kant.service.db.jobs import SUBMITTED_FIELDS, JobRow, JobUpdate, NewJob
from kant.service.db.leader import LeaderLock
from kant.service.db.nodes import NodeRow, NodeUpdate
from kant.service.db.schema import UNSET, metadata
from kant.service.db.schema import jobs as jobs_table
from kant.service.errors import Conflict, DatabaseError, Fenced, NotFound
from kant.service.schemas import JobOut, JobSubmit
from service.conftest import NewPgDatabase

# --- helpers --------------------------------------------------------------------------------------


def _job(name: str = "j", tenant: str = "acme", key: str | None = None, **kw: object) -> NewJob:
    return NewJob(tenant=tenant, user="alice", name=name, idempotency_key=key, **kw)  # type: ignore[arg-type]


def _python(script: str, *args: str) -> subprocess.Popen[str]:
    """Start ``python -c script args...`` with its stdout piped (line-buffered text)."""
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
    )


def _readline(proc: subprocess.Popen[str], timeout: float = 20.0) -> str:
    """One line of the child's stdout; fails with its stderr if it exits first."""
    assert proc.stdout is not None
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(proc.stdout.readline()))  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    if not result or not result[0]:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"child gave no line: {err}")
    return result[0].strip()


def _node(name: str, position: int = 0, state: str = "up", gpus: int = 8) -> NodeRow:
    return NodeRow(name, position, "H100", gpus, 64_000, 512_000, "leaf0", "spine0", state, None, 1.0)


# --- engine, URLs, errors -------------------------------------------------------------------------


def test_sqlite_pragmas_on_every_connection(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    assert db.dialect == "sqlite"
    seen: list[tuple[object, ...]] = []

    def probe() -> None:
        with db.engine.connect() as conn:
            seen.append(tuple(conn.exec_driver_sql(f"PRAGMA {p}").scalar() for p in
                              ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")))

    threads = [threading.Thread(target=probe) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [("wal", 2, 10000, 1)] * 4  # synchronous 2 = FULL
    db.close()


def test_unsupported_and_bad_urls(tmp_path: Path) -> None:
    for url in ("mysql://u:pw@h/db", "sqlite://", "sqlite:///:memory:", "postgresql+asyncpg://h/db", "::nonsense"):
        with pytest.raises(KantError) as e:
            Database(url)
        assert "pw" not in str(e.value)
    with pytest.raises(KantError, match=r"folder .*missing.* does not exist"):
        Database(f"sqlite:///{tmp_path / 'missing' / 'kant.db'}")
    (tmp_path / "adir.db").mkdir()
    with pytest.raises(KantError, match=r"adir\.db: it is a folder"):
        Database(f"sqlite:///{tmp_path / 'adir.db'}")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(DatabaseError, match=r"junk\.db"):
        Database(f"sqlite:///{junk}").migrate()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_sqlite_folder(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(KantError, match="not writable"):
        Database(f"sqlite:///{ro / 'kant.db'}")


def test_unreachable_postgresql_names_url_without_password() -> None:
    db = Database("postgresql+psycopg://kant:s3cret@127.0.0.1:1/nowhere?connect_timeout=2")
    assert db.dialect == "postgresql"
    with pytest.raises(DatabaseError) as e:
        db.migrate()
    msg = str(e.value)
    assert "s3cret" not in msg and "127.0.0.1:1/nowhere" in msg and "\n" not in msg
    assert "refused" in msg.lower() or "failed" in msg.lower()
    with pytest.raises(DatabaseError):
        LeaderLock(db).try_acquire()
    db.close()


def test_plain_postgresql_url_uses_psycopg(pg_url: str) -> None:
    db = Database(pg_url.replace("postgresql+psycopg://", "postgresql://"))
    assert db.engine.dialect.driver == "psycopg"
    db.ping()
    db.close()


# --- migrations -----------------------------------------------------------------------------------


def test_migrate_twice_and_models_agree(backend: str, fresh_url: str) -> None:
    db = Database(fresh_url)
    db.migrate()
    db.migrate()
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalars().all() == ["0006"]
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        assert compare_metadata(ctx, metadata) == []
    db.close()


def test_concurrent_migrations_on_postgresql(new_pg_db: NewPgDatabase) -> None:
    with new_pg_db() as url:
        dbs = [Database(url) for _ in range(3)]
        errors: list[BaseException] = []

        def go(d: Database) -> None:
            try:
                d.migrate()
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=go, args=(d,)) for d in dbs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert dbs[0].tenants.list() == []
        for d in dbs:
            d.close()


# --- tenants and tokens ---------------------------------------------------------------------------


def test_tenants(db: Database) -> None:
    t = db.tenants.create("acme", 8, 16, now_wall=5.0)
    assert (t.name, t.guaranteed_gpus, t.max_gpus, t.created_wall) == ("acme", 8, 16, 5.0)
    with pytest.raises(Conflict):
        db.tenants.create("acme")
    db.tenants.create("beta")
    assert db.tenants.get("acme") == t
    assert db.tenants.get("nope") is None
    assert [x.name for x in db.tenants.list()] == ["acme", "beta"]
    assert db.tenants.update("acme", max_gpus=None).max_gpus is None
    u = db.tenants.update("acme", guaranteed_gpus=2)
    assert (u.guaranteed_gpus, u.max_gpus) == (2, None)
    assert db.tenants.update("acme") == u
    with pytest.raises(NotFound):
        db.tenants.update("nope", max_gpus=1)


def test_tokens(db: Database) -> None:
    db.tenants.create("acme")
    plain, row = db.tokens.create(role="tenant", tenant="acme", name="ci", now_wall=100.0)
    assert plain.startswith("kant_") and len(plain) > 40
    assert (row.role, row.tenant, row.name, row.created_wall, row.revoked_wall) == ("tenant", "acme", "ci", 100.0, None)
    with db.engine.connect() as conn:
        stored = conn.exec_driver_sql("SELECT token_hash FROM tokens").scalars().all()
    assert stored == [hashlib.sha256(plain.encode()).hexdigest()]  # only the hash is stored
    assert db.tokens.verify(plain, 200.0) == row
    assert db.tokens.verify(plain + "x", 200.0) is None
    assert db.tokens.verify("", 200.0) is None

    admin = db.tokens.add_hash("operator-secret", role="admin", name="env")
    assert db.tokens.add_hash("operator-secret", role="admin", name="other") == admin  # idempotent
    assert db.tokens.verify("operator-secret", 1e12) == admin
    assert db.tokens.count() == 2
    assert [t.id for t in db.tokens.list()] == [row.id, admin.id]
    assert db.tokens.list("acme") == [row]

    with pytest.raises(ValueError):
        db.tokens.create(role="admin", tenant="acme")
    with pytest.raises(ValueError):
        db.tokens.create(role="tenant")
    with pytest.raises(ValueError):
        db.tokens.create(role="root")
    with pytest.raises(NotFound):
        db.tokens.create(role="tenant", tenant="nope")

    short, srow = db.tokens.create(role="admin", expires_wall=150.0)
    assert db.tokens.verify(short, 149.0) == srow
    assert db.tokens.verify(short, 150.0) is None  # expired (even while cached)

    assert db.tokens.revoke(row.id, 300.0) is True
    assert db.tokens.verify(plain, 301.0) is None  # the cache entry went with the revocation
    assert db.tokens.revoke(row.id, 302.0) is False
    assert db.tokens.revoke(9999, 302.0) is False
    revoked = db.tokens.list("acme")[0]
    assert revoked.revoked_wall == 300.0 and not revoked.valid_at(0.0)


def test_token_cache_costs_no_query_and_expires(db: Database, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    plain, row = db.tokens.create(role="admin")
    statements: list[str] = []
    sa.event.listen(db.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    assert db.tokens.verify(plain, 0.0) == row
    n = len(statements)
    for _ in range(100):
        assert db.tokens.verify(plain, 0.0) == row
    assert len(statements) == n  # answered from the cache

    # A revocation by another process is seen once the entry is older than the TTL.
    monkeypatch.setattr(tokens_module, "TOKEN_CACHE_TTL_S", 0.2)
    other = Database(db_url)
    assert other.tokens.revoke(row.id, 1.0)
    other.close()
    assert db.tokens.verify(plain, 2.0) == row  # still cached
    time.sleep(0.25)
    assert db.tokens.verify(plain, 2.0) is None


# --- jobs -----------------------------------------------------------------------------------------


def test_job_model_fields_agree() -> None:
    """The job's submitted fields are written once (NewJob); the table, the row and the API's two models
    must name the same fields, so a field added to one and forgotten in another fails here."""
    submitted = [f.name for f in dataclasses.fields(NewJob)]
    assert list(SUBMITTED_FIELDS) == submitted
    kept = [f.name for f in dataclasses.fields(JobRow)][len(submitted):]  # what the service adds
    assert kept[0] == "id"
    # SELECT jobs.* is decoded by position: id, the submitted fields, then the rest in JobRow's order
    assert [c.name for c in jobs_table.columns] == ["id", *submitted, *kept[1:]]
    # (kind, service_id and a task's place in its job array are set by the service; `array` is expanded)
    by_service = {"kind", "service_id", "array_task_id", "array_position", "array_throttle"}
    assert set(JobSubmit.model_fields) == (set(submitted) - by_service) | {"array"}
    assert set(JobOut.model_fields) == {*submitted, *kept, "array_job_id"} - {"idempotency_key", "created_wall"}
    body = JobSubmit(name="a", user="u", workers=2, gpus_per_worker=1, gpu_milli=500, gpu_type="H100",
                     cpu_milli=1, memory_mib=2, priority=3, estimate_s=4.0, duration_s=5.0, command="c",
                     labels={"k": "v"}, idempotency_key="body")
    assert body.to_new_job("acme") == NewJob(
        tenant="acme", user="u", name="a", workers=2, gpus_per_worker=1, gpu_milli=500, gpu_type="H100",
        cpu_milli=1, memory_mib=2, priority=3, estimate_s=4.0, duration_s=5.0, command="c", labels={"k": "v"},
        idempotency_key="body")
    assert JobSubmit().to_new_job("acme", "header") == NewJob(tenant="acme", user="acme", name="",
                                                              idempotency_key="header")


def test_insert_jobs_round_trip_and_events(db: Database) -> None:
    db.tenants.create("acme")
    assert db.jobs.max_id() == 0
    assert db.jobs.insert([], now_time=0.0, now_wall=0.0) == []
    full = NewJob(
        tenant="acme", user="bob", name="train", kind=1, workers=4, gpus_per_worker=8, gpu_milli=500,
        gpu_type="H100", cpu_milli=8000, memory_mib=65536, priority=7, estimate_s=3600.0, duration_s=1800.5,
        command="python train.py", labels={"team": "nlp", "n": 3}, idempotency_key="k-1",
    )
    [(jid, created)] = db.jobs.insert([full], now_time=12.5, now_wall=1000.25)
    assert created and jid == 1
    j = db.jobs.get(jid)
    assert j is not None
    assert (j.tenant, j.user, j.name, j.kind, j.service_id, j.workers, j.gpus_per_worker, j.gpu_milli, j.gpu_type,
            j.cpu_milli, j.memory_mib, j.priority, j.estimate_s, j.duration_s, j.command, j.labels,
            j.idempotency_key) == ("acme", "bob", "train", 1, None, 4, 8, 500, "H100", 8000, 65536, 7, 3600.0,
                                   1800.5, "python train.py", {"team": "nlp", "n": 3}, "k-1")
    assert (j.state, j.reason, j.submit_time, j.first_start_time, j.start_time, j.end_time, j.placement, j.runs,
            j.exit_code, j.created_wall) == ("pending", None, 12.5, None, None, None, None, 0, None, 1000.25)
    assert db.jobs.get(999) is None
    [ev] = db.events.of_job(jid)
    assert (ev.kind, ev.job_id, ev.tenant, ev.time, ev.wall) == ("submitted", jid, "acme", 12.5, 1000.25)
    assert "bob" in ev.message


def test_insert_jobs_idempotent_and_ordered(db: Database, backend: str) -> None:
    db.tenants.create("acme")
    db.tenants.create("beta")
    out = db.jobs.insert(
        [_job("a", key="x"), _job("b"), _job("a", key="x"), _job("d", key="y"), _job("e", tenant="beta", key="x")],
        now_time=1.0, now_wall=1.0,
    )
    assert out == [(1, True), (2, True), (1, False), (3, True), (4, True)]  # keys are per tenant
    out2 = db.jobs.insert([_job("d", key="y"), _job("g", key="z"), _job("a", key="x"), _job("g", key="z")],
                          now_time=2.0, now_wall=2.0)
    assert out2 == [(3, False), (5, True), (1, False), (5, False)]
    # a key used for another job: refused, in the batch or against the stored one, and nothing written
    with pytest.raises(Conflict, match="idempotency key 'q' is given to two different jobs of this batch"):
        db.jobs.insert([_job("p", key="q"), _job("p2", key="q")], now_time=2.0, now_wall=2.0)
    with pytest.raises(Conflict, match=r"idempotency key 'x' was used for job 1 with another body \(name differ\)"):
        db.jobs.insert([_job("p"), _job("other", key="x")], now_time=2.0, now_wall=2.0)
    assert db.jobs.count() == 5 and db.jobs.max_id() == 5
    assert [j.name for j in db.jobs.list()] == ["a", "b", "d", "e", "g"]
    assert len(db.events.after(0)) == 5  # one 'submitted' event per created job
    with pytest.raises(NotFound, match="nope"):
        db.jobs.insert([_job("z"), _job("z", tenant="nope")], now_time=3.0, now_wall=3.0)
    with pytest.raises(NotFound, match="service 42"):
        db.jobs.insert([_job("z", service_id=42)], now_time=3.0, now_wall=3.0)
    if backend == "postgresql":  # SQLite does not enforce lengths
        with pytest.raises(DatabaseError, match="too long"):
            db.jobs.insert([_job("z"), _job("z" * 257)], now_time=3.0, now_wall=3.0)
    assert db.jobs.count() == 5  # nothing of a failed batch is written
    ids = [i for i, _ in db.jobs.insert([_job(f"n{k}") for k in range(60)], now_time=4.0, now_wall=4.0)]
    assert ids == sorted(ids) and len(set(ids)) == 60 and ids[0] > 5


def test_concurrent_inserts_from_threads(db: Database) -> None:
    db.tenants.create("acme")
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            mine: list[int] = []
            for b in range(10):
                batch = [_job(f"w{w}-{b}-{k}", key=f"w{w}-{b}-{k}") for k in range(10)]
                mine += [i for i, _ in db.jobs.insert(batch, now_time=0.0, now_wall=0.0)]
            results[w] = mine
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    every = [i for ids in results.values() for i in ids]
    assert len(set(every)) == 400 == db.jobs.count()
    for ids in results.values():
        assert ids == sorted(ids)
    events = db.events.after(0, limit=1000)
    assert [e.job_id for e in events] == sorted(every)  # ids were handed out in commit order


def test_apply_updates_events_and_nulls(db: Database) -> None:
    db.tenants.create("acme")
    db.nodes.upsert([_node("n1"), _node("n2")])
    (a, _), (b, _), (c, _) = db.jobs.insert([_job("a"), _job("b"), _job("c")], now_time=0.0, now_wall=0.0)
    db.apply(
        [JobUpdate(a, state="running", reason="placed", first_start_time=5.0, start_time=5.0,
                   placement=["n1", "n2"], runs=1),
         JobUpdate(b, state="unschedulable", reason="too big"),
         JobUpdate(a, reason=None)],  # a later update of the same job wins
        [NewEvent(5.0, 50.0, "started", job_id=a, node="n1", tenant="acme", message="go")],
        [NodeUpdate("n2", "cordoned", "maintenance", wall=7.0)],
    )
    ja, jb, jc = db.jobs.get(a), db.jobs.get(b), db.jobs.get(c)
    assert ja is not None and jb is not None and jc is not None
    assert (ja.state, ja.reason, ja.first_start_time, ja.start_time, ja.placement, ja.runs) == (
        "running", None, 5.0, 5.0, ["n1", "n2"], 1)
    assert (jb.state, jb.reason, jb.start_time) == ("unschedulable", "too big", None)
    assert jc.state == "pending"
    n2 = db.nodes.get("n2")
    assert n2 is not None and (n2.state, n2.reason, n2.updated_wall, n2.position) == ("cordoned", "maintenance", 7.0, 1)
    db.apply([JobUpdate(a, state="finished", end_time=9.0, exit_code=0, placement=None),
              JobUpdate(b, reason=None, state=UNSET)], [])
    ja, jb = db.jobs.get(a), db.jobs.get(b)
    assert ja is not None and jb is not None
    assert (ja.state, ja.end_time, ja.exit_code, ja.placement, ja.start_time) == ("finished", 9.0, 0, None, 5.0)
    assert (jb.state, jb.reason) == ("unschedulable", None)
    assert [e.kind for e in db.events.of_job(a)] == ["submitted", "started"]
    with pytest.raises(ValueError):
        JobUpdate(a, state=None)  # type: ignore[arg-type]


def test_apply_fencing(db: Database) -> None:
    db.tenants.create("acme")
    [(a, _)] = db.jobs.insert([_job("a")], now_time=0.0, now_wall=0.0)
    ev = NewEvent(1.0, 1.0, "note", job_id=a, tenant="acme", message="x")
    with pytest.raises(Fenced):  # no epoch stored yet
        db.apply([JobUpdate(a, state="running")], [ev], epoch=1)
    db.meta.set("leader_epoch", "3")
    with pytest.raises(Fenced, match="2"):
        db.apply([JobUpdate(a, state="running")], events=[ev], nodes=(), epoch=2)
    job = db.jobs.get(a)
    assert job is not None and job.state == "pending" and len(db.events.of_job(a)) == 1  # nothing written
    db.apply([JobUpdate(a, state="running")], [ev], epoch=3)
    job = db.jobs.get(a)
    assert job is not None and job.state == "running" and len(db.events.of_job(a)) == 2
    with pytest.raises(Fenced):
        db.jobs.insert([_job("b")], now_time=0.0, now_wall=0.0, epoch=2)
    assert db.jobs.count() == 1
    assert db.jobs.insert([_job("b")], now_time=0.0, now_wall=0.0, epoch=3) == [(a + 1, True)]


def test_load_active_list_count_and_pages(db: Database) -> None:
    db.tenants.create("acme")
    db.tenants.create("beta")
    ids = [i for i, _ in db.jobs.insert([_job(f"j{k}", tenant="acme" if k % 2 else "beta") for k in range(12)],
                                         now_time=0.0, now_wall=0.0)]
    db.apply([JobUpdate(ids[0], state="running"), JobUpdate(ids[1], state="finished"),
              JobUpdate(ids[2], state="cancelled"), JobUpdate(ids[5], state="running")], [])
    active = db.jobs.load_active()
    assert [j.id for j in active] == [i for k, i in enumerate(ids) if k not in (1, 2)]
    assert {j.state for j in active} == {"pending", "running"}

    assert db.jobs.count() == 12
    assert db.jobs.count(tenant="acme") == 6
    assert db.jobs.count(states=["running"]) == 2
    assert db.jobs.count(tenant="beta", states=("running", "cancelled")) == 2

    pages: list[list[int]] = []
    after = None
    while page := db.jobs.list(limit=5, after_id=after):
        pages.append([j.id for j in page])
        after = page[-1].id
    assert pages == [ids[:5], ids[5:10], ids[10:]]
    desc = db.jobs.list(limit=4, descending=True)
    assert [j.id for j in desc] == ids[::-1][:4]
    assert [j.id for j in db.jobs.list(limit=4, descending=True, after_id=desc[-1].id)] == ids[::-1][4:8]
    acme_pending = db.jobs.list(tenant="acme", states=["pending"], limit=100)
    assert [j.id for j in acme_pending] == [i for k, i in enumerate(ids) if k % 2 and k not in (1, 5)]


def test_events(db: Database) -> None:
    db.tenants.create("acme")
    assert db.events.max_id() == 0
    [(a, _)] = db.jobs.insert([_job("a")], now_time=0.0, now_wall=0.0)
    evs = [NewEvent(float(k), 100.0 + k, "tick", job_id=a, tenant="acme", message=str(k)) for k in range(5)]
    evs.append(NewEvent(9.0, 109.0, "node_down", node="n1", message="lost"))
    db.apply([], evs)
    assert [e.message for e in db.events.of_job(a, limit=3)] == ["2", "3", "4"]  # the latest, oldest first
    every = db.events.after(0)
    assert [e.kind for e in every] == ["submitted", *["tick"] * 5, "node_down"]
    assert every[-1].node == "n1" and every[-1].tenant is None and every[-1].job_id is None
    assert [e.id for e in db.events.after(every[2].id, limit=2)] == [every[3].id, every[4].id]
    assert all(e.tenant == "acme" for e in db.events.after(0, tenant="acme"))
    assert len(db.events.after(0, tenant="acme")) == 6
    assert db.events.after(every[-1].id) == []
    assert db.events.max_id() == every[-1].id


# --- nodes, services, meta ------------------------------------------------------------------------


def test_nodes(db: Database) -> None:
    db.nodes.upsert([_node("n1", 5), _node("n2", 5)])
    assert [(n.name, n.position) for n in db.nodes.list()] == [("n1", 0), ("n2", 1)]
    db.nodes.upsert([_node("n3", 0), _node("n1", 0, state="down", gpus=4), _node("n3", 0, gpus=2)])
    nodes = db.nodes.list()
    assert [(n.name, n.position, n.state, n.gpus) for n in nodes] == [
        ("n1", 0, "down", 4), ("n2", 1, "up", 8), ("n3", 2, "up", 2)]
    assert db.nodes.get("n3") == nodes[2]
    assert db.nodes.get("nope") is None
    n = nodes[0]
    assert (n.gpu_type, n.cpu_milli, n.memory_mib, n.leaf, n.spine, n.updated_wall) == (
        "H100", 64_000, 512_000, "leaf0", "spine0", 1.0)
    db.nodes.upsert([])


def test_services(db: Database) -> None:
    db.tenants.create("acme")
    s = db.services.create(tenant="acme", name="llm", gpus_per_replica=2, replicas=3, min_replicas=1,
                          max_replicas=8, gpu_type="H100", priority=5, now_wall=7.0)
    assert (s.tenant, s.name, s.gpus_per_replica, s.gpu_type, s.priority, s.replicas, s.min_replicas,
            s.max_replicas, s.state, s.created_wall) == ("acme", "llm", 2, "H100", 5, 3, 1, 8, "active", 7.0)
    assert db.services.get(s.id) == s
    assert db.services.get(999) is None
    with pytest.raises(Conflict):
        db.services.create(tenant="acme", name="llm", gpus_per_replica=1, replicas=1, min_replicas=1, max_replicas=1)
    with pytest.raises(NotFound):
        db.services.create(tenant="nope", name="x", gpus_per_replica=1, replicas=1, min_replicas=1, max_replicas=1)
    assert db.services.update(s.id, replicas=5).replicas == 5
    with pytest.raises(NotFound):
        db.services.update(999, replicas=1)
    [(jid, _)] = db.jobs.insert([_job("replica", kind=1, service_id=s.id)], now_time=0.0, now_wall=0.0)
    job = db.jobs.get(jid)
    assert job is not None and job.service_id == s.id and job.kind == 1

    assert db.services.update(s.id, state="deleted").state == "deleted"
    assert db.services.list() == []
    again = db.services.create(tenant="acme", name="llm", gpus_per_replica=1, replicas=1, min_replicas=1,
                              max_replicas=2)  # a deleted service's name can be used again
    assert again.id != s.id
    assert [x.id for x in db.services.list("acme", include_deleted=True)] == [s.id, again.id]
    assert db.services.list("other") == []
    with pytest.raises(Conflict):
        db.services.update(s.id, state="active")  # two active services of one name


def test_meta(db: Database) -> None:
    assert db.meta.get("k") is None
    db.meta.set("k", "v1")
    db.meta.set("k", "v2")
    assert db.meta.get("k") == "v2"


# --- leader election ------------------------------------------------------------------------------

_HOLD_LOCK = """
import sys, time
from kant.service.db.database import Database
from kant.service.db.leader import LeaderLock
lock = LeaderLock(Database(sys.argv[1]))
print(lock.try_acquire(), flush=True)
time.sleep(120)
"""


def test_leader_failover_across_processes(db_url: str) -> None:
    db = Database(db_url)
    child = _python(_HOLD_LOCK, db_url)
    try:
        first = int(_readline(child))
        assert db.meta.get("leader_epoch") == str(first)
        lock = LeaderLock(db)
        assert lock.try_acquire() is None  # the child holds it
        assert not lock.still_held()
        child.send_signal(signal.SIGKILL)
        child.wait()
        t0 = time.monotonic()
        epoch = lock.try_acquire()
        while epoch is None and time.monotonic() - t0 < 5.0:
            time.sleep(0.05)
            epoch = lock.try_acquire()
        assert epoch == first + 1, "the lock was not freed when its holder died"
        assert time.monotonic() - t0 < 2.0
        assert lock.still_held() and lock.try_acquire() == epoch

        db.tenants.create("acme")
        with pytest.raises(Fenced):  # the dead leader's epoch is fenced off
            db.apply([], [NewEvent(0.0, 0.0, "x")], epoch=first)
        db.apply([], [NewEvent(0.0, 0.0, "x")], epoch=epoch)

        lock.release()
        assert not lock.still_held()
        again = LeaderLock(db)
        assert again.try_acquire() == epoch + 1
        again.release()
    finally:
        child.kill()
        child.communicate()
        db.close()


def test_leader_lock_is_exclusive_in_one_process(db: Database) -> None:
    a, b = LeaderLock(db), LeaderLock(db)
    ea = a.try_acquire()
    assert ea is not None and b.try_acquire() is None
    a.release()
    assert b.try_acquire() == ea + 1
    b.release()


def test_leader_lock_lost_with_its_postgresql_connection(pg_url: str) -> None:
    db = Database(pg_url)
    lock = LeaderLock(db)
    assert lock.try_acquire() is not None
    pid = lock._pg.info.backend_pid
    with db.engine.connect() as conn:
        conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    time.sleep(0.1)
    assert lock.still_held() is False
    assert lock.epoch is None
    other = LeaderLock(db)
    assert other.try_acquire() is not None
    other.release()
    db.close()


# --- durability -----------------------------------------------------------------------------------

_INSERT_FOREVER = """
import sys
from kant.service.db.database import Database
from kant.service.db.jobs import NewJob
db = Database(sys.argv[1])
b = 0
while True:
    out = db.jobs.insert([NewJob("acme", "u", f"b{b}-{k}") for k in range(20)], now_time=0.0, now_wall=0.0)
    print(" ".join(str(i) for i, _ in out), flush=True)
    b += 1
"""


def test_committed_jobs_survive_sigkill(db: Database, db_url: str) -> None:
    db.tenants.create("acme")
    child = _python(_INSERT_FOREVER, db_url)
    printed: list[int] = []
    try:
        for _ in range(25):
            printed += [int(x) for x in _readline(child).split()]
    finally:
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate()
    printed += [int(x) for line in out.splitlines() if line.strip() for x in line.split()]
    db.close()
    reopened = Database(db_url)
    stored = {j.id for j in reopened.jobs.list(limit=100_000)}
    assert set(printed) <= stored
    assert len(stored) % 20 == 0  # a batch is all or nothing
    reopened.close()
