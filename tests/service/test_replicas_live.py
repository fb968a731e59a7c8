"""Inference-service replicas on the live path, with real processes: a ``kant serve`` on a wall clock
(simulated executor: training jobs are simulated, replicas run as local processes) and
``tests/service/replica_server.py`` as the replica. Every wait polls with a deadline (no timed asserts)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.serve_proc import Server, eventually, running_server

SERVER = Path(__file__).with_name("replica_server.py")


def replica(*args: str) -> str:
    return " ".join(["exec", sys.executable, str(SERVER), *args])


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[Server]:
    with running_server(tmp_path / "work", f"sqlite:///{tmp_path / 'kant.db'}", cluster="2x8:V100", clock="wall") as s:
        yield s


@pytest.fixture
def api(srv: Server) -> httpx.Client:
    return srv.client(srv.tenant("team"))


def service(api: httpx.Client, sid: int) -> dict[str, Any]:
    r = api.get(f"/v1/services/{sid}")
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def replicas(api: httpx.Client, sid: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.get("/v1/jobs", params={"limit": 500}).json()["items"]
    return [j for j in items if j["service_id"] == sid]


def create(api: httpx.Client, **body: Any) -> int:
    r = api.post("/v1/services", json={"gpus_per_replica": 1, **body})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def test_replicas_serve_on_the_port_kant_gives(api: httpx.Client) -> None:
    sid = create(api, name="chat", replicas=2, command=replica("--tag", "a"))
    eventually(lambda: service(api, sid)["ready_replicas"] == 2, "two ready replicas")
    seen = set()
    for job in replicas(api, sid):
        assert job["state"] == "running" and job["command"] == replica("--tag", "a")
        text = api.get(f"/v1/jobs/{job['id']}/logs").json()["text"]  # kant logs shows the replica's output
        port = int(text.split("listening on ")[1].split()[0])
        answer = httpx.get(f"http://127.0.0.1:{port}/").json()  # a real server on the port kant handed it
        assert answer["tag"] == "a"
        seen.add(port)
    assert len(seen) == 2  # a port per replica
    out = service(api, sid)
    assert out["state"] == "active" and out["target_replicas"] == 2 and out["serving"]["scale_up_p50_s"] is not None


def test_a_replica_that_exits_at_once_degrades_the_service_with_backoff(api: httpx.Client) -> None:
    sid = create(api, name="crash", replicas=1, command=replica("--exit", "1", "--tag", "x"))
    out = eventually(lambda: (s := service(api, sid))["state"] == "degraded" and s, "degraded")
    assert out["degraded_reason"] == "replica exited with code 1: model failed to load (tag x)"
    failed = [j for j in replicas(api, sid) if j["state"] == "failed"]
    assert failed and all(j["reason"] == "exited with code 1: model failed to load (tag x)" for j in failed)
    # no hot loop: the waits double (1, 2, 4, 8 s ...), so 6 more seconds add at most 3 attempts
    before = len(replicas(api, sid))
    time.sleep(6)
    assert len(replicas(api, sid)) <= before + 3
    # a good command recovers it: ready, and no longer degraded
    r = api.patch(f"/v1/services/{sid}", json={"command": replica("--tag", "fixed")})
    assert r.status_code == 200, r.text
    out = eventually(lambda: (s := service(api, sid))["ready_replicas"] == 1 and s["state"] == "active" and s,
                     "recovered", timeout=120)
    assert out["degraded_reason"] is None


def test_a_readiness_path_that_never_answers(api: httpx.Client) -> None:
    sid = create(api, name="mute", replicas=1, command=replica("--never-ready"), ready_timeout_s=1)
    reason = "readiness path /health did not answer 2xx within 1 s"
    out = eventually(lambda: (s := service(api, sid))["state"] == "degraded" and s, "degraded", timeout=90)
    assert out["degraded_reason"] == reason and out["ready_replicas"] == 0
    failed = [j for j in replicas(api, sid) if j["state"] == "failed"]
    assert len(failed) >= 3 and {j["reason"] for j in failed} == {reason}


def test_a_replica_that_stops_answering_is_replaced(api: httpx.Client) -> None:
    sid = create(api, name="sick", replicas=1, ready_timeout_s=2, command=replica("--sick-after", "5"))
    first = eventually(lambda: [j for j in replicas(api, sid) if j["state"] == "failed"], "the sick replica stopped")
    assert re.fullmatch(r"readiness path /health stopped answering 2xx \(\d+ probes in a row\)", first[0]["reason"])
    assert first[0]["first_start_time"] is not None
    eventually(lambda: len(replicas(api, sid)) >= 2, "a replacement")  # (itself sick 5 s after it starts)


def test_a_slow_replica_is_taken_out_of_the_route_not_killed(api: httpx.Client) -> None:
    # /health answers 2 s late (after the probe's timeout) for 4 s: the replica is not ready meanwhile,
    # but it answered within its ready_timeout_s (10 s), so it is ready again, in its first run
    sid = create(api, name="busy", replicas=1, ready_timeout_s=10,
                 command=replica("--slow-after", "3", "--slow-for", "4"))
    eventually(lambda: service(api, sid)["ready_replicas"] == 1, "ready")
    eventually(lambda: service(api, sid)["ready_replicas"] == 0, "out of the route while slow")
    eventually(lambda: service(api, sid)["ready_replicas"] == 1, "ready again")
    jobs = replicas(api, sid)
    assert len(jobs) == 1 and jobs[0]["state"] == "running" and jobs[0]["runs"] == 1, [j["reason"] for j in jobs]
    assert service(api, sid)["serving"]["failures"] == 0


def test_a_port_in_use(api: httpx.Client) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        sid = create(api, name="clash", replicas=1, port=port, command=replica())
        out = eventually(lambda: (s := service(api, sid))["state"] == "degraded" and s, "degraded")
        assert out["degraded_reason"] == f"replica: port {port} is in use on 127.0.0.1"
    # the port is free again: the next replica (after its backoff) starts and serves on it
    out = eventually(lambda: (s := service(api, sid))["ready_replicas"] == 1 and s, "ready on the freed port",
                     timeout=120)
    assert httpx.get(f"http://127.0.0.1:{port}/").json()["port"] == port


def test_rolling_update_never_below_min_ready(api: httpx.Client) -> None:
    sid = create(api, name="roll", replicas=2, min_replicas=2, command=replica("--tag", "v1"))
    eventually(lambda: service(api, sid)["ready_replicas"] == 2, "two ready replicas")
    assert api.patch(f"/v1/services/{sid}", json={"command": replica("--tag", "v2")}).status_code == 200
    lowest = 2
    deadline = time.monotonic() + 90
    while True:
        lowest = min(lowest, service(api, sid)["ready_replicas"])
        running = [j for j in replicas(api, sid) if j["state"] == "running"]
        if len(running) == 2 and all(j["command"].endswith("v2") for j in running) \
                and service(api, sid)["ready_replicas"] == 2:
            break
        assert time.monotonic() < deadline, "the rolling update did not finish"
        time.sleep(0.05)
    assert lowest >= 2
    jobs = replicas(api, sid)
    assert sorted(j["state"] for j in jobs if j["command"].endswith("v1")) == ["cancelled", "cancelled"]


def test_bad_serving_fields_are_422_with_the_field(api: httpx.Client) -> None:
    cases = [({"ready_path": "health"}, "ready_path"), ({"port": 70000}, "port"),
             ({"autoscaler": {"period_s": 1}}, "autoscaler: needs capacity_rps or concurrency"),
             ({"autoscaler": {"period_z": 1}, "capacity_rps": 1}, "autoscaler.period_z")]
    for extra, words in cases:
        r = api.post("/v1/services", json={"name": "bad", "gpus_per_replica": 1, **extra})
        assert r.status_code == 422 and words in r.json()["message"], (extra, r.text)
    inf = '{"name": "inf", "gpus_per_replica": 1, "capacity_rps": 1, "autoscaler": {"period_s": Infinity}}'
    r = api.post("/v1/services", headers={"Content-Type": "application/json"}, content=inf)
    assert r.status_code == 422 and r.json()["message"].startswith("body.autoscaler.period_s: Input should be a finite")
    sid = create(api, name="ok", replicas=0)
    r = api.patch(f"/v1/services/{sid}", json={"autoscaler": {"period_s": 1}})
    assert r.status_code == 422 and "autoscaler" in r.json()["message"]
    r = api.patch(f"/v1/services/{sid}", json={"min_replicas": 5, "max_replicas": 2})
    assert r.status_code == 422 and "min_replicas" in r.json()["message"]


def model_server(*args: str) -> str:
    return " ".join(["exec", sys.executable, "-m", "kant.model_server", *args])


def test_a_reclaim_and_a_drain_under_traffic_answer_every_request(tmp_path: Path) -> None:
    """Requests flow through the route the whole time. Training borrows the GPUs a service holds as
    headroom; the service scales up and takes them back (the training job gets the checkpoint stop and
    waits again; the reclaim is measured); then it scales down while long requests are at both
    replicas: the drained one is stopped only once it has answered (the requests outlast what a fixed
    drain and a 1 s stop grace would give them). No request is lost."""
    with running_server(tmp_path / "work", f"sqlite:///{tmp_path / 'kant.db'}", cluster="1x8:V100", clock="wall",
                        policy="unified", extra=["--stop-grace", "1"]) as s:
        tok = s.tenant("team")
        api = s.client(tok)
        sid = create(api, name="llm", gpus_per_replica=4, replicas=1, max_replicas=2,
                     command=model_server("--ms-per-token", "1"))
        eventually(lambda: service(api, sid)["ready_replicas"] == 1, "the first replica is ready")
        train = api.post("/v1/jobs", json={"gpus_per_worker": 4, "duration_s": 3600}).json()["id"]
        eventually(lambda: api.get(f"/v1/jobs/{train}").json()["state"] == "running", "training borrows the headroom")
        codes: list[int] = []
        stop = threading.Event()

        def traffic() -> None:  # one short request after another, through the route
            with s.client(tok) as c:
                while not stop.is_set():
                    codes.append(c.post(f"/v1/services/{sid}/serve/v1/completions", json={"max_tokens": 5}).status_code)

        def long_request(out: list[httpx.Response]) -> None:
            with s.client(tok) as c:
                out.append(c.post(f"/v1/services/{sid}/serve/v1/completions", json={"max_tokens": 5000}, timeout=60))

        sender = threading.Thread(target=traffic)
        sender.start()
        try:
            assert api.post(f"/v1/services/{sid}/scale", json={"replicas": 2}).status_code == 200
            out = eventually(lambda: (x := service(api, sid))["ready_replicas"] == 2 and x,
                             "the reclaimed replica is ready")
            job = api.get(f"/v1/jobs/{train}").json()
            assert job["state"] == "pending" and job["reason"].endswith("back in the queue after: preempted")
            assert out["serving"]["reclaims"] == 1 and out["serving"]["reclaim_p50_s"] > 0
            metrics = s.admin.get("/metrics").text
            assert f'kant_service_reclaims_total{{service="{sid}"}} 1.0' in metrics  # (labelled by service id)
            assert f'kant_service_reclaim_seconds_count{{service="{sid}"}} 1.0' in metrics
            # long requests at both replicas (least outstanding spreads them), then a scale down drains one
            answers: list[httpx.Response] = []
            longs = [threading.Thread(target=long_request, args=(answers,)) for _ in range(3)]
            for t in longs:
                t.start()
            eventually(lambda: len(s.admin.get(f"/v1/services/{sid}/stats").json()["outstanding"]) == 2,
                       "requests at both replicas")
            assert api.post(f"/v1/services/{sid}/scale", json={"replicas": 1}).status_code == 200
            for t in longs:
                t.join(60)
            assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
            assert len({a.json()["replica"] for a in answers}) == 2
            eventually(lambda: api.get(f"/v1/jobs/{train}").json()["state"] == "running", "training resumes")
        finally:
            stop.set()
            sender.join(30)
        assert codes and set(codes) == {200}, sorted(set(codes))


def test_serve_services_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("services:\n  - name: chat\n    gpus_per_replica: 1\n    max_replicas: 2\n    capacity_rps: 5\n"
                   "    slo_ms: 500\n    comand: x\n    traffic: {trace: azure}\n")
    r = subprocess.run([sys.executable, "-m", "kant.cli.main", "serve", "--db", f"sqlite:///{tmp_path / 'x.db'}",
                        "--services", str(bad)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == f"error: {bad}: services[0].comand: Extra inputs are not permitted"
    good = tmp_path / "good.yaml"
    good.write_text("autoscaler: {period_s: 5}\nservices:\n  - name: chat\n    gpus_per_replica: 1\n"
                    "    min_replicas: 1\n    max_replicas: 2\n    capacity_rps: 5\n    slo_ms: 500\n"
                    f"    command: {replica('--tag', 'file')}\n    traffic: {{trace: azure}}\n")
    with running_server(tmp_path / "work", f"sqlite:///{tmp_path / 'kant.db'}", cluster="2x8:V100", clock="wall",
                        extra=["--services", str(good)]) as s:
        out = eventually(lambda: [x for x in s.admin.get("/v1/services").json() if x["ready_replicas"] == 1],
                         "the file's service is ready")
        assert out[0]["name"] == "chat" and out[0]["tenant"] == "inference" and out[0]["capacity_rps"] == 5
        assert out[0]["autoscaler"]["period_s"] == 5 and out[0]["command"] == replica("--tag", "file")


def test_replicas_come_back_after_a_restart(tmp_path: Path) -> None:
    """The replicas' processes stop with kant serve; the next start finds their runs lost and starts
    them again (the same jobs, run 2)."""
    db_url = f"sqlite:///{tmp_path / 'kant.db'}"
    with running_server(tmp_path / "work", db_url, cluster="2x8:V100", clock="wall") as s:
        token = s.tenant("team")
        api = s.client(token)
        sid = create(api, name="chat", replicas=1, command=replica())
        eventually(lambda: service(api, sid)["ready_replicas"] == 1, "ready")
        port = int(api.get(f"/v1/jobs/{replicas(api, sid)[0]['id']}/logs").json()["text"].split()[2])
    with pytest.raises(httpx.HTTPError):  # its process stopped with the service
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
    with running_server(tmp_path / "work", db_url, cluster="2x8:V100", clock="wall", admin_token=s.admin_token) as s2:
        api = s2.client(token)
        eventually(lambda: service(api, sid)["ready_replicas"] == 1, "ready again")
        jobs = replicas(api, sid)
        assert len(jobs) == 1 and jobs[0]["runs"] == 2 and jobs[0]["state"] == "running"
