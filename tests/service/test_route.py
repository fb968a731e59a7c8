"""The request route of inference services (``/v1/services/{service}/serve/{path}``) on real parts:
``kant serve``'s app on a real uvicorn at 127.0.0.1 and the example model server as subprocesses,
registered into the service's :class:`Endpoints` directly (the replicas' lifecycle is not the
route's). No ready replica, a full queue, balancing, tenants, draining, a dead replica, and what
the route measures."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.service.serving.measure import Answered, Traffic
from service.route_helpers import ROOT, Replica, free_port, model_server, running_kant


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Replica]]:
    """Two example model servers (1 ms of CPU per generated token), for the module."""
    work = tmp_path_factory.mktemp("replicas")
    started = [model_server(work, ms_per_token=1.0, name=f"r{i}") for i in (1, 2)]
    try:
        yield started
    finally:
        for r in started:
            r.stop()


def wait_for(what: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "the condition did not come true in 30 s"
        time.sleep(0.01)


@contextlib.contextmanager
def in_thread(call: Callable[[], httpx.Response]) -> Iterator[list[httpx.Response]]:
    """Run ``call`` in a thread; its response is in the yielded list once the block ends."""
    got: list[httpx.Response] = []
    t = threading.Thread(target=lambda: got.append(call()), daemon=True)
    t.start()
    try:
        yield got
    finally:
        t.join(60)
    assert got, "the request in the thread got no answer"


def ask(c: httpx.Client, service: int | str, tokens: int, **more: Any) -> Callable[[], httpx.Response]:
    return lambda: c.post(f"/v1/services/{service}/serve/v1/completions", json={"max_tokens": tokens, **more})


def test_no_ready_replica_is_503_with_retry_after_and_a_replica_that_becomes_ready_takes_the_queue(
        tmp_path: Path, replicas: list[Replica]) -> None:
    with running_kant(tmp_path, route_queue_timeout=1.0) as k:
        tok = k.tenant("a")
        sid = k.service(tok, "chat")
        c = k.client(tok, timeout=30)
        r = c.post(f"/v1/services/{sid}/serve/v1/completions", json={"max_tokens": 1})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["message"] == f"service {sid}: no replica is ready after 1 s in its queue"
        k.register(sid, 7, replicas[0], ready=False)  # started, not ready yet: still none to take it
        r = c.get("/v1/services/chat/serve/anything")
        assert r.status_code == 503 and "retry-after" in r.headers
    with running_kant(tmp_path / "2", route_queue_timeout=60.0) as k:
        tok = k.tenant("a")
        sid = k.service(tok, "chat")
        k.register(sid, 7, replicas[0], ready=False)
        with in_thread(ask(k.client(tok), sid, 1)) as got:
            wait_for(lambda: k.svc.traffic.stats(sid).queued == 1)
            k.svc.endpoints.set_ready(sid, 7, True)  # (from this thread: the route hears it on its loop)
        assert got[0].status_code == 200 and got[0].json()["replica"] == "r1"
        assert k.svc.traffic.stats(sid).queue_p99_ms is not None


def test_a_full_queue_is_503_at_once(tmp_path: Path, replicas: list[Replica]) -> None:
    with running_kant(tmp_path, route_concurrency=1, route_queue=1, route_queue_timeout=60.0) as k:
        tok = k.tenant("a")
        sid = k.service(tok, "chat")
        k.register(sid, 1, replicas[0])
        c = k.client(tok)
        with in_thread(ask(c, sid, 1500)) as first:
            wait_for(lambda: k.svc.traffic.outstanding(sid) == {1: 1})
            with in_thread(ask(c, sid, 1)) as second:
                wait_for(lambda: k.svc.traffic.stats(sid).queued == 1)
                r = ask(c, sid, 1)()
                assert r.status_code == 503 and r.headers["retry-after"] == "1"
                assert r.json()["message"] == f"service {sid}: its queue is full (1 requests wait for a replica)"
        assert first[0].status_code == 200 and second[0].status_code == 200
        assert k.svc.traffic.stats(sid).codes == {200: 2, 503: 1}


def test_least_outstanding_balancing_over_two_replicas(tmp_path: Path, replicas: list[Replica]) -> None:
    with running_kant(tmp_path) as k:
        tok = k.tenant("a")
        sid = k.service(tok, "chat")
        k.register(sid, 5, replicas[1])  # r2 has the higher job id...
        k.register(sid, 3, replicas[0])  # ... r1 the lower: ties go to it
        c = k.client(tok)
        # one at a time, every replica has 0 outstanding: the lowest job id
        assert [ask(c, sid, 1)().json()["replica"] for _ in range(3)] == ["r1", "r1", "r1"]
        with in_thread(ask(c, sid, 1500)) as slow_1:
            wait_for(lambda: k.svc.traffic.outstanding(sid) == {3: 1})
            with in_thread(ask(c, "chat", 1500)) as slow_2:  # (by name)
                wait_for(lambda: k.svc.traffic.outstanding(sid) == {3: 1, 5: 1})
                assert ask(c, sid, 1)().json()["replica"] == "r1"  # 1 and 1: the tie to job 3
        assert slow_1[0].json()["replica"] == "r1" and slow_2[0].json()["replica"] == "r2"
        stats = c.get(f"/v1/services/{sid}/stats").json()
        assert stats["outstanding"] == {} and stats["codes"] == {"200": 6}


def test_another_tenants_token_is_404_as_for_the_service(tmp_path: Path, replicas: list[Replica]) -> None:
    with running_kant(tmp_path) as k:
        a, b = k.tenant("team-a"), k.tenant("team-b")
        sid = k.service(a, "chat")
        k.register(sid, 1, replicas[0])
        cb = k.client(b)
        assert cb.get(f"/v1/services/{sid}").status_code == 404
        for path in (f"/v1/services/{sid}/serve/v1/completions", "/v1/services/chat/serve/v1/completions",
                     f"/v1/services/{sid}/stats"):
            r = cb.post(path, json={"max_tokens": 1}) if "serve" in path else cb.get(path)
            assert r.status_code == 404, (path, r.text)
            assert "r1" not in r.text
        anon = httpx.post(f"{k.url}/v1/services/{sid}/serve/v1/completions", json={"max_tokens": 1})
        assert anon.status_code == 401
        assert k.client(a).post(f"/v1/services/{sid}/serve/v1/completions", json={}).status_code == 200
        assert k.client().get(f"/v1/services/{sid}/serve/x").json()["replica"] == "r1"  # an admin, by id
        assert k.client().get("/v1/services/chat/serve/x").status_code == 404  # an admin names services by id
        assert k.svc.traffic.stats(sid).total_requests == 2  # the refused ones never reached the route


def test_a_drained_replica_finishes_what_it_accepted(tmp_path: Path, replicas: list[Replica]) -> None:
    with running_kant(tmp_path, route_queue_timeout=1.0) as k:
        tok = k.tenant("a")
        sid = k.service(tok, "chat")
        k.register(sid, 1, replicas[0])
        c = k.client(tok)
        with in_thread(ask(c, sid, 1500)) as accepted:
            wait_for(lambda: k.svc.traffic.outstanding(sid) == {1: 1})
            assert k.svc.endpoints.drain(sid, 1)
            assert ask(c, sid, 1)().status_code == 503  # no new request goes to it...
            k.register(sid, 2, replicas[1])
            assert ask(c, sid, 1)().json()["replica"] == "r2"  # ... they go to the other
        assert accepted[0].status_code == 200 and accepted[0].json()["replica"] == "r1"  # it finished there
        assert accepted[0].json()["usage"]["completion_tokens"] == 1500


def test_a_streamed_answer_is_passed_on_as_it_comes_and_counted_when_it_ends(tmp_path: Path,
                                                                              replicas: list[Replica]) -> None:
    with running_kant(tmp_path) as k:
        tok = k.tenant("a")
        sid = k.service(tok, "chat")
        k.register(sid, 1, replicas[0])
        c = k.client(tok)
        events = []
        with c.stream("POST", f"/v1/services/{sid}/serve/v1/completions",
                      json={"max_tokens": 100, "prompt_tokens": 10, "stream": True}) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
        assert events[-1] == "[DONE]" and len(events) == 8  # 7 events of up to 16 tokens, then [DONE]
        wait_for(lambda: k.svc.traffic.inflight(sid) == 0)
        stats = k.svc.traffic.stats(sid)
        assert stats.codes == {200: 1} and stats.outstanding == {}
        assert (stats.prompt_tokens, stats.completion_tokens) == (10, 100)  # (the request's: no usage block)


def test_a_replica_that_cannot_be_reached_is_502_naming_it(tmp_path: Path) -> None:
    with running_kant(tmp_path) as k:
        tok = k.tenant("a")
        sid = k.service(tok, "chat")
        port = free_port()  # nothing listens there
        k.register(sid, 9, Replica(proc=None, port=port, log=tmp_path / "none"))  # type: ignore[arg-type]
        r = ask(k.client(tok), sid, 1)()
        assert r.status_code == 502
        assert r.json()["message"].startswith(f"service {sid}: replica job 9 at 127.0.0.1:{port} failed: ")
        assert k.svc.traffic.outstanding(sid) == {}


def test_a_replica_slower_than_the_route_timeout_is_504_and_a_missing_token_401(tmp_path: Path,
                                                                               replicas: list[Replica]) -> None:
    with running_kant(tmp_path, route_timeout=0.3) as k:
        tok = k.tenant("a")
        sid = k.service(tok, "chat")
        k.register(sid, 1, replicas[0])
        r = ask(k.client(tok), sid, 3000)()  # 3 s of the replica's CPU
        assert r.status_code == 504
        assert r.json()["message"] == f"service {sid}: replica job 1 at 127.0.0.1:{replicas[0].port} did not answer " \
                                      "within 0.3 s"
        assert ask(k.client(tok), sid, 1)().status_code == 200  # (a new connection: the slow one is closed)
        r = k.client().post(f"/v1/services/{sid}/serve/v1/completions", headers={"Authorization": ""})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json()["message"] == "the Authorization header must be 'Bearer <token>'"
        assert k.svc.traffic.outstanding(sid) == {}


def test_measurements_count_what_was_sent_and_metrics_show_them(tmp_path: Path, replicas: list[Replica]) -> None:
    with running_kant(tmp_path) as k:
        tok = k.tenant("a")
        sid = k.service(tok, "chat")
        k.register(sid, 1, replicas[0])
        c = k.client(tok)
        for n in (10, 20, 30):
            assert ask(c, sid, n, prompt_tokens=100)().status_code == 200
        assert c.get(f"/v1/services/{sid}/serve/x").status_code == 200  # no body: no tokens
        with in_thread(ask(c, sid, 1500)):
            wait_for(lambda: k.svc.traffic.inflight(sid) == 1)  # the autoscaler's signal
        stats = c.get(f"/v1/services/{sid}/stats", params={"window": 60}).json()
        assert stats["total_requests"] == 5 and stats["answered"] == 5 and stats["inflight"] == 0
        assert stats["arrival_rate"] == 5 / 60 == k.svc.traffic.arrival_rate(sid, 60)
        assert stats["prompt_tokens"] == 300 and stats["completion_tokens"] == 1560
        assert stats["codes"] == {"200": 5}
        assert stats["slo_ms"] is None and stats["slo_attainment"] is None  # (the service has no SLO)
        assert 0 < stats["response_p50_ms"] <= stats["response_p99_ms"]
        text = k.client().get("/metrics").text
        for line in (f'kant_service_requests_total{{code="200",service="{sid}"}} 5.0',
                     f'kant_service_tokens_total{{direction="prompt",service="{sid}"}} 300.0',
                     f'kant_service_tokens_total{{direction="completion",service="{sid}"}} 1560.0',
                     f'kant_service_inflight{{service="{sid}"}} 0.0',
                     f'kant_service_response_seconds_count{{service="{sid}"}} 5.0',
                     f'kant_service_queue_seconds_count{{service="{sid}"}} 5.0',
                     f'kant_service_service_seconds_count{{service="{sid}"}} 5.0'):
            assert line in text, line


def test_slo_attainment_counts_2xx_answers_within_the_slo() -> None:
    t = Traffic()
    for code, seconds in ((200, 0.05), (200, 0.2), (503, 0.01), (200, 0.1)):
        t.arrived(1)
        t.answered(1, Answered(code=code, queue_s=0.0, service_s=seconds, response_s=seconds, slo_ms=100.0))
    s = t.stats(1)
    assert s.slo_attainment == s.slo_attainment_total == 0.5  # 50 ms and 100 ms met; 200 ms and the 503 missed
    t.arrived(2)
    t.answered(2, Answered(code=200, queue_s=0.0, service_s=0.01, response_s=0.01))
    assert t.stats(2).slo_attainment is None  # no SLO


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=5000, allow_nan=False), max_size=60),
       st.floats(min_value=0.5, max_value=3600))
def test_arrival_rate_counts_the_arrivals_of_the_window(times: list[float], window: float) -> None:
    """Arrivals at (wall) times ``times`` (sorted), read at the last: the count of those in the
    window's whole seconds over the window."""
    now = [0.0]
    t = Traffic(clock=lambda: now[0])
    for x in sorted(times):
        now[0] = x
        t.arrived(1)
    end = int(now[0])
    first = end - int(-(-window // 1)) + 1
    want = sum(1 for x in times if first <= int(x) <= end) / window
    assert t.arrival_rate(1, window) == pytest.approx(want)
    assert t.inflight(1) == len(times)


def _kant(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kant.cli.main", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_kant_load_replays_a_trace_and_writes_one_row_per_request(tmp_path: Path, replicas: list[Replica]) -> None:
    trace = tmp_path / "AzureLLMInferenceTrace_conv.csv"  # the Azure trace's format, 6 requests over 1 s
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:15:0{i // 5}.{(i % 5) * 2}000000,{100 + i},{10 * (i + 1)}\n" for i in range(6)))
    with running_kant(tmp_path / "kant") as k:
        tok = k.tenant("a")
        sid = k.service(tok, "chat")
        k.register(sid, 1, replicas[0])
        env = {**os.environ, "KANT_URL": k.url, "KANT_TOKEN": tok, "PYTHONPATH": str(ROOT / "src")}
        out = tmp_path / "load.parquet"
        p = _kant("load", "chat", "--trace", str(trace), "--speed", "2", "--duration", "30s", "--out", str(out),
                  "--slo", "10000", env=env)
        assert p.returncode == 0, p.stderr
        assert "200: 6" in p.stdout and "100.0% of requests 2xx within 10000 ms" in p.stdout
        rows = pq.read_table(out).to_pylist()
        assert [r["request"] for r in rows] == list(range(6)) and {r["code"] for r in rows} == {200}
        assert [r["max_tokens"] for r in rows] == [r["completion_tokens"] for r in rows] == [10, 20, 30, 40, 50, 60]
        assert [r["prompt_tokens"] for r in rows] == [100, 101, 102, 103, 104, 105]
        assert [r["scheduled"] for r in rows] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5])
        assert all(r["slo_met"] for r in rows) and all(r["latency"] > 0 for r in rows)
        stats = k.svc.traffic.stats(sid)
        assert stats.total_requests == 6 and stats.completion_tokens == 210 and stats.prompt_tokens == 615
        # bounded: --max-requests
        p = _kant("load", str(sid), "--trace", str(trace), "--max-requests", "2", "--out", str(out), env=env)
        assert p.returncode == 0, p.stderr
        assert pq.read_table(out).num_rows == 2
        for args, words in (
            (["chat", "--trace", str(trace), "--speed", "0"], "Invalid value for '--speed'"),
            (["chat", "--trace", str(trace), "--concurrency", "0"], "Invalid value for '--concurrency'"),
            (["chat", "--trace", str(trace), "--duration", "soon"], "Invalid value for '--duration'"),
            (["chat", "--trace", "no-such-trace"], "unknown trace"),
            (["chat", "--trace", str(trace), "--start", "1h"], "no request in"),
            (["chat", "--trace", str(trace), "--out", "x.csv"], "--out x.csv: the file name must end in .parquet"),
            (["nope", "--trace", str(trace)], "no service named 'nope'"),
            (["chat", "--trace", str(trace), "--url", "http://10.9.8.7:8787"], "is not a loopback address"),
            (["chat"], "Missing option '--trace'"),
        ):
            p = _kant("load", *args, env=env)
            lines = p.stderr.strip().splitlines()
            assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], \
                (args, p.stderr)
        assert k.svc.traffic.stats(sid).total_requests == 8  # the refused runs sent nothing
