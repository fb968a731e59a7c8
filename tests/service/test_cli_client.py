"""The command-line client (``kant submit``, ``queue``, ``jobs``, ``show``, ``cancel``, ``why``, ``nodes``,
``drain``/``cordon``/``uncordon``, ``top``) against a real ``kant serve`` process (SQLite, manual clock,
4 nodes of 8 V100 on two leaves): what each prints, ``--json``, and every kind of failure as one line
``error: ...`` with exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click.testing
import pytest

from kant.cli.main import cli
from service.serve_proc import Server, free_port, running_server


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("serve-cli")
    with running_server(work, f"sqlite:///{work / 'kant.db'}", cluster="4x8:V100,leaf=2") as server:
        yield server


@pytest.fixture(scope="module")
def tokens(srv: Server) -> dict[str, str]:
    return {"a": srv.tenant("team-a", guaranteed_gpus=8, max_gpus=32), "b": srv.tenant("team-b")}


@pytest.fixture(autouse=True)
def _no_token_file_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in an empty folder, so that no ./kant-admin.token is picked up by accident."""
    monkeypatch.chdir(tmp_path)


def kant(srv: Server, *args: str, token: str | None = None, url: str | None = None) -> click.testing.Result:
    """``kant ARGS`` through click's runner, with KANT_URL and KANT_TOKEN (the admin's unless given)."""
    env = {"KANT_URL": url or srv.url, "KANT_TOKEN": srv.admin_token if token is None else token}
    return click.testing.CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def ok(result: click.testing.Result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


def err(result: click.testing.Result) -> str:
    """The one error line of a failed command (exit 2, nothing on stdout, no traceback)."""
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.output, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def row(table: str, first: str) -> list[str]:
    """The cells of the table line whose first cell is ``first``."""
    for line in table.splitlines():
        cells = line.split()
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n{table}")


def now(srv: Server) -> float:
    return float(srv.admin.get("/v1/clock").json()["now"])


def submit(srv: Server, token: str, *args: str) -> int:
    return int(ok(kant(srv, "submit", *args, token=token)).strip())


# --- jobs ------------------------------------------------------------------------------------------
def test_submit_queue_why_show_jobs(srv: Server, tokens: dict[str, str]) -> None:
    a = tokens["a"]
    t0 = now(srv)
    big = submit(srv, a, "--name", "big", "--workers", "4", "--gpus", "8", "--duration", "100", "--estimate", "2m")
    small = submit(srv, a, "--workers", "2", "--gpus", "8", "--duration", "1m", "--label", "team=nlp",
                   "--label", "run=7", "--", "python", "train.py", "--lr", "0.1")
    queue = ok(kant(srv, "queue", token=a))
    assert queue.splitlines()[0].split() == ["JOBID", "NAME", "TENANT", "STATE", "GANG", "SUBMITTED", "STARTED",
                                             "NODES/REASON"]
    assert row(queue, str(big))[:5] == [str(big), "big", "team-a", "pending", "4x8"]

    srv.advance(t0)  # one cycle: the big gang takes the whole cluster, the small one waits
    queue = ok(kant(srv, "queue", token=a))
    assert row(queue, str(big))[3] == "running"
    assert row(queue, str(big))[-1] == "v100-0,v100-1,v100-2,v100-3"
    assert row(queue, str(small))[:5] == [str(small), "python", "team-a", "pending", "2x8"]
    assert "[allocate] no free GPU in the cluster" in " ".join(row(queue, str(small)))
    assert [line.split()[0] for line in queue.splitlines()[1:]] == sorted([str(big), str(small)], key=int)
    why = ok(kant(srv, "why", str(small), token=a)).strip()
    assert why.startswith(
        f"job {small} is pending: [allocate] no free GPU in the cluster; no job ahead of it in a queue of 1")
    # (then the predicted start, or why there is none yet: the twin's first run may still be going)
    assert why.count(";") == 1 or "predicted" in why.split(";", 2)[2], why
    assert ok(kant(srv, "why", str(big), token=a)).strip() == f"job {big} is running"

    srv.advance(t0 + 100)  # big is done; the cycle of the target instant runs with the next advance (arrivals
    srv.advance(t0 + 100)  # at it may still come), and small starts then, at t0 + 100, on two nodes
    queue = ok(kant(srv, "queue", token=a))
    cells = row(queue, str(small))
    assert cells[3] == "running" and cells[-1].count("v100-") == 2
    assert str(big) not in [line.split()[0] for line in queue.splitlines()]
    assert ok(kant(srv, "why", str(big), token=a)).strip() == f"job {big} is finished"

    shown = ok(kant(srv, "show", str(small), token=a))
    assert f"job {small}" in shown and "python train.py --lr 0.1" in shown and "run=7, team=nlp" in shown
    assert "2 worker(s) x 8 GPU(s)" in shown and "1m00s" in shown
    events = shown[shown.index("events"):]
    assert row(events, "1m40s")[2] == "submitted" and row(events, "0s")[2] == "started"

    history = ok(kant(srv, "jobs", "--state", "finished", "--state", "running", token=a))
    assert history.splitlines()[0].split()[-3:] == ["END", "EXIT", "NODES/REASON"]
    done = row(history, str(big))
    assert done[3] == "finished" and done[-2] == "0" and done[-3] == "ago"
    assert row(history, str(small))[3] == "running"
    absolute = ok(kant(srv, "jobs", "--state", "finished", "--absolute", token=a))
    assert row(absolute, str(big))[5:8] == [_hms(t0), _hms(t0), _hms(t0 + 100)]
    srv.advance(t0 + 200)


def _hms(t: float) -> str:
    s = round(t)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def test_submit_with_idempotency_key_twice(srv: Server, tokens: dict[str, str]) -> None:
    first = kant(srv, "submit", "--gpus", "1", "--duration", "10", "--idempotency-key", "cli-1", token=tokens["a"])
    again = kant(srv, "submit", "--gpus", "1", "--duration", "10", "--idempotency-key", "cli-1", token=tokens["a"])
    job = int(ok(first).strip())
    assert first.stderr == ""
    assert ok(again).strip() == str(job)
    assert again.stderr.strip() == f"already submitted as job {job} (idempotency key 'cli-1')"
    ok(kant(srv, "cancel", str(job), token=tokens["a"]))


def test_admin_submits_for_a_tenant(srv: Server, tokens: dict[str, str]) -> None:
    job = submit(srv, srv.admin_token, "--tenant", "team-b", "--user", "bob", "--gpu-type", "V100", "--cpu", "500",
                 "--memory", "1024", "--priority", "5", "--duration", "1h")
    got = srv.admin.get(f"/v1/jobs/{job}").json()
    assert (got["tenant"], got["user"], got["gpu_type"], got["cpu_milli"], got["memory_mib"], got["priority"],
            got["duration_s"]) == ("team-b", "bob", "V100", 500, 1024, 5, 3600.0)
    # without --tenant: the tenant 'default', made on first use (the README's first submit)
    default = int(ok(kant(srv, "submit", "--gpus", "1", "--duration", "1h")).strip())
    assert srv.admin.get(f"/v1/jobs/{default}").json()["tenant"] == "default"
    assert ok(kant(srv, "cancel", str(default))).strip() == f"job {default}: cancelled"
    assert err(kant(srv, "submit", "--tenant", "team-b", "--gpus", "9")) == (
        "error: 422: gpus_per_worker: 9 GPUs, but the largest node has 8 (--gpus)")
    assert ok(kant(srv, "cancel", str(job))).strip() == f"job {job}: cancelled"


def test_cancel_tries_every_job(srv: Server, tokens: dict[str, str]) -> None:
    a = tokens["a"]
    jobs = [submit(srv, a, "--workers", "4", "--gpus", "8", "--duration", "10") for _ in range(2)]
    other = submit(srv, tokens["b"], "--gpus", "1")
    result = kant(srv, "cancel", str(jobs[0]), "999999", str(other), str(jobs[1]), token=a)
    assert result.exit_code == 2
    assert result.stdout.splitlines() == [f"job {jobs[0]}: cancelled", f"job {jobs[1]}: cancelled"]
    assert result.stderr.splitlines() == ["error: job 999999: 404: no job 999999",
                                          f"error: job {other}: 404: no job {other}"]  # another tenant's: unseen
    assert ok(kant(srv, "why", str(jobs[0]), token=a)).strip() == (
        f"job {jobs[0]} is cancelled: cancelled by tenant team-a")
    assert ok(kant(srv, "cancel", str(other), token=tokens["b"])).strip() == f"job {other}: cancelled"
    listed = ok(kant(srv, "jobs", "--state", "cancelled", "--desc", "--limit", "2", token=a))
    assert [line.split()[0] for line in listed.splitlines()[1:]] == [str(jobs[1]), str(jobs[0])]
    assert "(the first 2 jobs; more with --limit)" in kant(srv, "jobs", "--limit", "2", token=a).stderr


def test_queue_follows_pages_up_to_the_limit(srv: Server, tokens: dict[str, str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kant.cli.client.jobs.PAGE", 2)  # pages of 2 (the API's largest is 1,000)
    r = srv.admin.post("/v1/jobs/batch", json={"jobs": [{"tenant": "team-b", "gpus_per_worker": 8, "workers": 4,
                                                         "duration_s": 5} for _ in range(5)]})
    assert r.status_code == 201, r.text
    ids = [j["id"] for j in r.json()["jobs"]]
    page = json.loads(ok(kant(srv, "queue", "--tenant", "team-b", "--state", "pending", "--limit", "3", "--json")))
    assert [j["id"] for j in page["items"]] == ids[:3] and page["next"] == ids[2]
    everything = json.loads(ok(kant(srv, "queue", "--tenant", "team-b", "--json")))
    assert [j["id"] for j in everything["items"]] == ids and everything["next"] is None
    table = ok(kant(srv, "queue", "--tenant", "team-b", "--limit", "4"))
    assert [line.split()[0] for line in table.splitlines()[1:]] == [str(i) for i in ids[:4]]
    assert ok(kant(srv, "cancel", *map(str, ids))).splitlines() == [f"job {i}: cancelled" for i in ids]
    assert err(kant(srv, "queue", "--tenant", "team-b", token=tokens["a"])) == (
        "error: 403: a tenant lists its own jobs only")


def test_json_outputs_parse(srv: Server, tokens: dict[str, str]) -> None:
    a = tokens["a"]
    created = json.loads(ok(kant(srv, "submit", "--gpus", "2", "--json", token=a)))
    job = created["id"]
    assert created == {"id": job, "created": True}
    queue = json.loads(ok(kant(srv, "queue", "--json", token=a)))
    assert job in [j["id"] for j in queue["items"]] and queue["next"] is None
    assert {j["tenant"] for j in queue["items"]} == {"team-a"}
    history = json.loads(ok(kant(srv, "jobs", "--json", "--state", "pending", token=a)))
    assert [j["state"] for j in history["items"]] == ["pending"] * len(history["items"])
    shown = json.loads(ok(kant(srv, "show", str(job), "--json", token=a)))
    assert shown["id"] == job and shown["events"][0]["kind"] == "submitted"
    why = json.loads(ok(kant(srv, "why", str(job), "--json", token=a)))
    assert why["id"] == job and why["state"] == "pending"
    nodes = json.loads(ok(kant(srv, "nodes", "--json", token=a)))
    assert [n["name"] for n in nodes] == ["v100-0", "v100-1", "v100-2", "v100-3"]
    cluster = json.loads(ok(kant(srv, "top", "--once", "--json", token=a)))
    assert cluster["total_gpus"] == 32 and set(cluster["tenants"]) == {"team-a"} and cluster["others"] is not None
    ok(kant(srv, "cancel", str(job), token=a))


# --- nodes -----------------------------------------------------------------------------------------
def test_nodes_and_node_operations(srv: Server, tokens: dict[str, str]) -> None:
    table = ok(kant(srv, "nodes"))
    assert table.splitlines()[0].split() == ["NAME", "TYPE", "GPUS", "USED", "STATE", "LEAF", "SPINE"]
    assert row(table, "v100-2") == ["v100-2", "V100", "8", "0", "up", "leaf-1", "spine-0"]

    assert ok(kant(srv, "drain", "v100-1", "--reason", "new PSU")).strip() == (
        "v100-1: drained (new PSU), 0 of 8 GPUs in use")
    assert ok(kant(srv, "cordon", "v100-2")).strip() == "v100-2: cordoned, 0 of 8 GPUs in use"
    table = ok(kant(srv, "nodes", token=tokens["a"]))
    assert table.splitlines()[0].split()[-1] == "REASON"
    assert row(table, "v100-1")[4:] == ["drained", "leaf-0", "spine-0", "new", "PSU"]
    assert row(table, "v100-2")[4] == "cordoned"
    cluster = ok(kant(srv, "top", "--once"))
    assert "0 down, 16 idle on cordoned nodes" in cluster
    assert json.loads(ok(kant(srv, "uncordon", "v100-1", "--json")))["state"] == "up"
    assert ok(kant(srv, "uncordon", "v100-2")).strip() == "v100-2: up, 0 of 8 GPUs in use"

    for op in ("drain", "cordon", "uncordon"):
        assert err(kant(srv, op, "v100-0", token=tokens["a"])) == "error: 403: this needs an admin token"
    assert err(kant(srv, "cordon", "v100-9")) == "error: 404: no node 'v100-9'"
    assert row(ok(kant(srv, "nodes")), "v100-0")[4] == "up"


# --- the cluster now -------------------------------------------------------------------------------
def test_top_once_admin_and_tenant_views(srv: Server, tokens: dict[str, str]) -> None:
    t0 = now(srv)
    running = submit(srv, tokens["a"], "--workers", "2", "--gpus", "8", "--duration", "50")
    srv.advance(t0)
    waiting = submit(srv, tokens["b"], "--workers", "3", "--gpus", "8", "--duration", "50")
    srv.advance(t0 + 1)
    admin = ok(kant(srv, "top", "--once"))
    assert "policy kant" in admin and "(manual clock)" in admin
    assert row(admin, "GAR")[1] == "50.0%" and row(admin, "SOR")[1] == "50.0%"
    assert row(admin, "GPUs")[1:5] == ["32:", "16", "allocated,", "16"]
    assert "1 job pending for 24 GPUs; 1 job running" in admin
    assert row(admin, "team-a") == ["team-a", "16", "8", "32", "0"]
    assert row(admin, "team-b") == ["team-b", "0", "-", "-", "1"]
    assert "others" not in admin
    assert "not applied" not in admin  # (quotas apply under every policy)

    tenant = ok(kant(srv, "top", "--once", token=tokens["b"]))
    assert row(tenant, "team-b") == ["team-b", "0", "-", "-", "1"]
    assert row(tenant, "others") == ["others", "16", "-", "-", "0"]
    assert "team-a" not in tenant
    ok(kant(srv, "cancel", str(running), str(waiting)))


# --- failures --------------------------------------------------------------------------------------
def test_unreachable_server(srv: Server) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert err(kant(srv, "queue", url=url)) == f"error: cannot reach kant serve at {url}: connection refused"
    assert err(kant(srv, "nodes", url="localhost:8787")) == (
        "error: KANT_URL 'localhost:8787' is not an http:// or https:// URL")


def test_bad_or_missing_token(srv: Server, tmp_path: Path) -> None:
    secret = "kant_not-a-real-token-0123456789"
    result = kant(srv, "queue", token=secret)
    assert err(result) == "error: 401: invalid, expired or revoked token (the token of KANT_TOKEN)"
    assert secret not in result.output
    assert err(kant(srv, "nodes", token="")) == (
        "error: 401: a bearer token is required (give one with KANT_TOKEN or --token-file)")
    result = kant(srv, "nodes", token="two words")
    assert "two words" not in result.output and "is not a token" in err(result)
    (tmp_path / "bad.token").write_text(secret + "\n")
    result = kant(srv, "nodes", "--token-file", str(tmp_path / "bad.token"), token="")
    assert err(result) == (
        f"error: 401: invalid, expired or revoked token (the token of --token-file {tmp_path}/bad.token)")
    assert secret not in result.output
    assert err(kant(srv, "nodes", "--token-file", str(tmp_path / "missing"))) == (
        f"error: --token-file {tmp_path}/missing: No such file or directory")


def test_token_file_options_and_the_generated_admin_token(srv: Server, tokens: dict[str, str],
                                                          tmp_path: Path) -> None:
    (tmp_path / "kant-admin.token").write_text(srv.admin_token + "\n")  # what kant serve writes
    assert row(ok(kant(srv, "nodes", token="")), "v100-0")[0] == "v100-0"
    (tmp_path / "b.token").write_text(tokens["b"])
    # --token-file wins over KANT_TOKEN and the file here: a tenant may not drain
    assert err(kant(srv, "drain", "v100-0", "--token-file", str(tmp_path / "b.token"))) == (
        "error: 403: this needs an admin token")
    url = f"http://127.0.0.1:{free_port()}"
    assert "cannot reach" in err(kant(srv, "nodes", "--url", url))  # --url wins over KANT_URL


def test_bad_local_input(srv: Server) -> None:
    assert err(kant(srv, "submit", "--duration", "5x")) == (
        "error: Invalid value for '--duration': '5x' is not a duration (e.g. 90, 90s, 15m, 2h, 1d) "
        "(see 'kant submit --help')")
    assert err(kant(srv, "submit", "--estimate", "0")).startswith("error: Invalid value for '--estimate'")
    assert err(kant(srv, "submit", "--label", "team")) == (
        "error: Invalid value for '--label': 'team' is not key=value (see 'kant submit --help')")
    assert "'--workers'" in err(kant(srv, "submit", "--workers", "0"))
    assert err(kant(srv, "show", "first")) == "error: JOB: 'first' is not a job id (a number)"
    assert err(kant(srv, "show", "999999")) == "error: 404: no job 999999"
    assert "'--state'" in err(kant(srv, "queue", "--state", "finished"))


# --- a real process --------------------------------------------------------------------------------
def test_queue_as_a_real_process(srv: Server, tokens: dict[str, str], tmp_path: Path) -> None:
    job = submit(srv, tokens["a"], "--name", "proc", "--workers", "4", "--gpus", "8", "--duration", "30")
    env = {**os.environ, "KANT_URL": srv.url, "KANT_TOKEN": tokens["a"]}
    proc = subprocess.run([sys.executable, "-m", "kant.cli.main", "queue"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert row(proc.stdout, str(job))[:5] == [str(job), "proc", "team-a", "pending", "4x8"]
    assert all(line == line.rstrip() for line in proc.stdout.splitlines())  # plain lines into a pipe
    env["KANT_TOKEN"] = "kant_wrong"
    proc = subprocess.run([sys.executable, "-m", "kant.cli.main", "queue"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: 401: invalid, expired or revoked token (the token of KANT_TOKEN)"
    ok(kant(srv, "cancel", str(job)))
