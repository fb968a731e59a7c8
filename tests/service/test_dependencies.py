"""Job dependencies in the live service (``kant submit --dependency``), in process on SQLite and
PostgreSQL (manual clock): a held job joins the queue when its clauses are met, says why it waits, a
dependency that can never be met leaves it waiting or cancels it (``kill_on_invalid_dep``), unknown or
invisible ids are refused, a restart keeps the holds, and the CLI submits and shows them."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click.testing
import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kant.cli.main import cli
from kant.service.config import ServeConfig
from kant.service.serve import build_app
from kant.service.server import Service
from service.conftest import new_pg_database


class Live:
    """An in-process service on a manual clock, with an admin client."""

    def __init__(self, url: str, work: Path) -> None:
        self.url, self.work = url, work
        self.svc: Service | None = None
        self.start()

    def start(self) -> None:
        svc = Service(
            ServeConfig(db_url=self.url, token_out=self.work / "t", cluster="tiny", clock="manual", predict=False)
        )
        svc.prepare()
        svc.start()
        svc.ready()
        deadline = time.monotonic() + 30
        while (svc.loop is None or svc.loop.view is None) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.svc = svc
        self.client = TestClient(build_app(svc))
        self.token = (self.work / "t").read_text().strip()
        self.client.headers["Authorization"] = f"Bearer {self.token}"

    def close(self) -> None:
        if self.svc is not None:
            self.client.close()
            self.svc.close()
            self.svc = None

    def submit(self, **body: Any) -> httpx.Response:
        return self.client.post("/v1/jobs", json={"tenant": "a", "duration_s": 10, **body})

    def job(self, job_id: int) -> dict[str, Any]:
        out: dict[str, Any] = self.client.get(f"/v1/jobs/{job_id}").json()
        return out

    def advance(self, to: float) -> None:
        assert self.client.post("/v1/clock", json={"to": to}).status_code == 200

    def now(self) -> float:
        return float(self.client.get("/v1/clock").json()["now"])

    def cli(self, monkeypatch: pytest.MonkeyPatch) -> Callable[..., click.testing.Result]:
        """``kant ARGS...`` run in this process against this service, with the admin token."""
        transport = self.client._transport
        real = httpx.Client

        def client(*args: Any, **kw: Any) -> httpx.Client:
            return real(*args, transport=transport, **kw)

        monkeypatch.setattr(httpx, "Client", client)
        env = {"KANT_URL": "http://testserver", "KANT_TOKEN": self.token}

        def kant(*args: str) -> click.testing.Result:
            return click.testing.CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)

        return kant


@pytest.fixture(params=["sqlite", "postgresql"])
def live(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Live]:
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path / 'k.db'}"
        else:
            request.getfixturevalue("pg_server")
            url = stack.enter_context(new_pg_database())
        lv = Live(url, tmp_path)
        stack.callback(lv.close)
        for name in ("a", "b"):
            assert lv.client.post("/v1/tenants", json={"name": name}).status_code == 201
        yield lv


def test_afterok_holds_until_the_job_finished_and_after_until_it_started(live: Live) -> None:
    t0 = live.now()
    first = live.submit(name="prep", gpus_per_worker=8, duration_s=100).json()["id"]
    ok = live.submit(name="train", dependency=f"afterok:{first}", kill_on_invalid_dep=True).json()["id"]
    started = live.submit(name="watch", dependency=f"after:{first}").json()["id"]
    got = live.job(ok)
    assert got["dependency"] == f"afterok:{first}" and got["kill_on_invalid_dep"] is True
    live.advance(t0)
    assert live.job(first)["state"] == "running"
    got = live.job(ok)
    assert got["state"] == "pending" and got["reason"] == f"Dependency: waiting for afterok:{first}"
    assert got["why"]["reason"] == f"Dependency: waiting for afterok:{first}" and got["why"]["plugin"] == "dependency"
    assert live.client.get(f"/v1/jobs/{ok}/why").json()["reason"].startswith("Dependency: waiting")
    page = live.client.get("/v1/jobs", params={"state": "pending"}).json()["items"]
    assert {j["id"]: j["reason"] for j in page}[ok] == f"Dependency: waiting for afterok:{first}"
    live.advance(t0 + 1)
    assert live.job(started)["state"] == "running"  # 'after': once prep had started
    live.advance(t0 + 100)
    live.advance(t0 + 101)
    got = live.job(ok)
    assert got["state"] == "running" and got["submit_time"] == t0
    kinds = [e["kind"] for e in got["events"]]
    assert kinds[:3] == ["submitted", "held", "released"] and "started" in kinds


def test_never_satisfied_waits_or_is_cancelled_and_cancel_counts_as_not_ok(live: Live) -> None:
    t0 = live.now()
    a = live.submit(name="a", duration_s=50).json()["id"]
    waits = live.submit(dependency=f"afternotok:{a}").json()["id"]
    killed = live.submit(dependency=f"afternotok:{a}", kill_on_invalid_dep=True).json()["id"]
    cleanup = live.submit(dependency=f"afternotok:{killed}").json()["id"]
    live.advance(t0)
    live.advance(t0 + 50)
    assert live.job(a)["state"] == "finished"
    got = live.job(waits)
    assert got["state"] == "pending"
    assert got["reason"] == f"DependencyNeverSatisfied: afternotok:{a} (job {a} finished)"
    got = live.job(killed)
    assert got["state"] == "cancelled" and got["reason"].startswith("cancelled (kill_on_invalid_dep): Dependency")
    live.advance(t0 + 51)
    assert live.job(cleanup)["state"] == "running"  # the cancel was its 'not ok'
    # a held job can be cancelled by its owner; a job submitted on an ended job is settled at once
    assert live.client.post(f"/v1/jobs/{waits}/cancel").json()["state"] == "cancelled"
    late = live.submit(dependency=f"afterok:{a}").json()["id"]
    live.advance(t0 + 52)
    assert live.job(late)["state"] == "running"


def test_unknown_or_invisible_ids_and_bad_text_are_refused(live: Live) -> None:
    theirs = live.client.post("/v1/jobs", json={"tenant": "b", "duration_s": 10}).json()["id"]
    tok = live.client.post("/v1/tenants/a/tokens", json={"name": "ta"})
    assert tok.status_code == 201, tok.text
    mine = httpx.Client(
        transport=live.client._transport,
        base_url="http://testserver",
        headers={"Authorization": f"Bearer {tok.json()['token']}"},
    )
    for dep, words in [
        ("afterok:999999", "no job 999999"),
        (f"afterok:{theirs}", f"no job {theirs}"),
        ("afterok:x", "'x' is not a job id"),
        ("before:1", "unknown dependency type"),
    ]:
        r = mine.post("/v1/jobs", json={"duration_s": 1, "dependency": dep})
        assert r.status_code == 422 and words in r.text, r.text
    # an admin sees every tenant's jobs, so may depend on them
    assert live.submit(dependency=f"afterany:{theirs}").status_code == 201


def test_a_restart_keeps_the_holds(live: Live) -> None:
    t0 = live.now()
    a = live.submit(duration_s=100).json()["id"]
    b = live.submit(dependency=f"afterok:{a}").json()["id"]
    c = live.submit(dependency=f"afterany:{b}").json()["id"]
    live.advance(t0)
    live.close()
    live.start()
    assert live.job(b)["state"] == "pending"
    assert live.client.get(f"/v1/jobs/{b}/why").json()["reason"] == f"Dependency: waiting for afterok:{a}"
    live.advance(t0 + 100)
    live.advance(t0 + 101)
    assert live.job(b)["state"] == "running"
    live.advance(t0 + 111)
    live.advance(t0 + 112)
    assert live.job(c)["state"] == "running"


def test_cli_submit_with_dependency_and_show(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    kant = live.cli(monkeypatch)

    first = kant("submit", "--tenant", "a", "--duration", "10", "--", "true")
    assert first.exit_code == 0, first.output
    a = int(first.stdout)
    r = kant("submit", "--tenant", "a", "--dependency", f"afterok:{a}", "--kill-on-invalid-dep", "--", "true")
    assert r.exit_code == 0, r.output
    b = int(r.stdout)
    live.advance(live.now())
    shown = kant("show", str(b))
    assert shown.exit_code == 0, shown.output
    assert f"afterok:{a} (kill on invalid dependency)" in shown.stdout
    assert f"Dependency: waiting for afterok:{a}" in " ".join(shown.stdout.split())
    why = kant("why", str(b))
    assert f"Dependency: waiting for afterok:{a}" in " ".join(why.stdout.split())
    bad = kant("submit", "--tenant", "a", "--dependency", "afterok", "--", "true")
    assert bad.exit_code == 2 and "--dependency" in bad.stderr, bad.output


# --- the property, live ---------------------------------------------------------------------------
@st.composite
def live_dags(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Up to 7 jobs; each may depend on earlier ones (by index); some run past their time limit (a
    'timeout', not ok) and some ask for kill_on_invalid_dep."""
    n = draw(st.integers(2, 7))
    jobs = []
    for i in range(n):
        clauses = []
        if i:
            for kind in ("after", "afterok", "afternotok", "afterany"):
                ids = draw(st.lists(st.integers(0, i - 1), max_size=2, unique=True))
                if ids:
                    clauses.append((kind, ids))
        duration = draw(st.integers(1, 20))
        jobs.append(
            {
                "clauses": clauses,
                "gpus": draw(st.sampled_from([1, 4, 8])),
                "duration": duration,
                "timeout": draw(st.booleans()) and duration > 1,
                "kill": draw(st.booleans()),
            }
        )
    return jobs


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dag=live_dags())
def test_live_dependency_graph_runs_in_an_order_that_respects_it(tmp_path: Path, dag: list[dict[str, Any]]) -> None:
    global _LIVE
    if _LIVE is None:
        _LIVE = Live(f"sqlite:///{tmp_path / 'dag.db'}", tmp_path)
        assert _LIVE.client.post("/v1/tenants", json={"name": "a"}).status_code == 201
    lv = _LIVE
    ids: list[int] = []
    for j in dag:
        dep = ",".join(":".join([kind, *(str(ids[d]) for d in ds)]) for kind, ds in j["clauses"])
        body: dict[str, Any] = {
            "gpus_per_worker": j["gpus"],
            "duration_s": j["duration"],
            "kill_on_invalid_dep": j["kill"],
        }
        if dep:
            body["dependency"] = dep
        if j["timeout"]:
            body["time_limit_s"] = j["duration"] - 0.5
        r = lv.submit(**body)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    t = lv.now()
    for _ in range(3 * len(dag) + 2):  # every job ends within 20 s of its start: enough steps to drain
        lv.advance(t)
        t += 21
    rows = {i: lv.job(i) for i in ids}
    for i, j in zip(ids, dag, strict=True):
        me = rows[i]
        started = me["first_start_time"]
        met_all = True
        for kind, ds in j["clauses"]:
            for d in ds:
                dep = rows[ids[d]]
                ended = dep["state"] not in ("pending", "running")
                ok = dep["state"] == "finished"
                met = {
                    "after": dep["first_start_time"] is not None or ended,
                    "afterok": ok,
                    "afternotok": ended and not ok,
                    "afterany": ended,
                }[kind]
                met_all = met_all and met
                if started is not None:
                    assert met, (kind, me, dep)
                    if kind == "after" and dep["first_start_time"] is not None:
                        assert dep["first_start_time"] <= started
                    elif kind != "after":
                        assert dep["end_time"] <= started
        if met_all:
            assert started is not None, me
        else:
            assert started is None and me["state"] in ("pending", "cancelled"), me
            assert "Dependency" in (me["reason"] or ""), me
            if me["state"] == "pending":  # cancelled for the next example (or already, with kill_on_invalid_dep,
                # by the cancel of a job it depends on just above)
                r = lv.client.post(f"/v1/jobs/{i}/cancel")
                assert r.status_code == 200 or (r.status_code == 409 and lv.job(i)["state"] == "cancelled"), r.text


_LIVE: Live | None = None


@pytest.fixture(scope="module", autouse=True)
def _close_live_dag() -> Iterator[None]:
    yield
    global _LIVE
    if _LIVE is not None:
        _LIVE.close()
        _LIVE = None
