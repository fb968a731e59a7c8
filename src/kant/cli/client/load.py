"""``kant load SERVICE --trace TRACE``: replay an inference trace's requests against a service's
request route (``/v1/services/{service}/serve/...``) and report what came back.

Each request of the trace is sent at its arrival time divided by ``--speed`` (from the trace's
first request, or ``--start`` seconds into it), with its token counts in the JSON body
(``prompt_tokens``, ``max_tokens``), over one pooled ``httpx.AsyncClient``. The replay is bounded:
it stops sending at ``--duration`` wall seconds or after ``--max-requests`` requests, keeps at most
``--concurrency`` requests open (a request due while the cap is reached goes when one ends: its
lateness is recorded), waits at most ``--timeout`` for each answer, and sends only to a loopback
address unless ``--allow-remote``. It prints the latency percentiles, throughput, status codes and
SLO attainment, and writes one Parquet row per request with ``--out`` (docs/cli.md).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import click
import numpy as np

from kant.cli._common import Duration, FiniteFloat, fail
from kant.cli.client.common import client_command, emit, print_json, table
from kant.cli.client.http import ApiError, Client

__all__ = ["LOAD_COLUMNS", "Replay", "load", "replay", "trace_requests"]

#: names ``--trace`` takes besides ``kant trace list``'s: the shared folder's name of the Azure trace
TRACE_ALIASES = {"azure-llm-inference-2023": "azure"}

#: the per-request Parquet's columns, in order
LOAD_COLUMNS = (
    "request",  # its row in the replay (0, 1, ...)
    "stream",  # the trace's stream (Azure: code or conv)
    "trace_time",  # its arrival in the trace, s from the trace's first request (or --start)
    "scheduled",  # when it was due, wall s from the replay's start (trace_time / speed)
    "sent",  # when it was sent, wall s from the replay's start (later than scheduled: the concurrency cap)
    "latency",  # sent -> answer read, s (null: no answer)
    "code",  # the HTTP status (null: no answer: error says why)
    "prompt_tokens",  # asked in the body (null: the trace has none)
    "max_tokens",
    "completion_tokens",  # counted by the answer's usage (null: none)
    "slo_met",  # a 2xx within the SLO (null: no SLO)
    "error",  # why there was no answer (null: there was one)
)


@dataclass
class Replay:
    """The requests to send (trace order) and, once sent, what came back."""

    stream: list[str]
    trace_time: np.ndarray  # s
    prompt: np.ndarray  # tokens, -1: unknown
    output: np.ndarray
    speed: float
    scheduled: np.ndarray = field(init=False)
    sent: np.ndarray = field(init=False)
    latency: np.ndarray = field(init=False)
    code: np.ndarray = field(init=False)
    completion: np.ndarray = field(init=False)
    error: list[str | None] = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.trace_time)
        self.scheduled = self.trace_time / self.speed
        self.sent = np.full(n, np.nan)
        self.latency = np.full(n, np.nan)
        self.code = np.zeros(n, dtype=np.int64)  # 0: not answered
        self.completion = np.full(n, -1, dtype=np.int64)
        self.error = [None] * n

    def __len__(self) -> int:
        return len(self.trace_time)


def trace_requests(trace: str, *, start: float, duration: float, speed: float, max_requests: int) -> Replay:
    """The requests of ``trace`` from ``start`` s that fall within ``duration`` wall s at ``speed``,
    at most ``max_requests`` (:class:`KantError` for a trace that is not a request log)."""
    from kant.errors import InputError
    from kant.traces.registry import load_load

    series = load_load(TRACE_ALIASES.get(trace, trace))
    if series.kind != "requests":
        raise InputError(trace, "a request-rate series, not a request log: kant load replays request logs "
                                "(azure, genai:requests, or a file of them)")
    t = np.asarray(series.time, dtype=np.float64) - start
    keep = np.flatnonzero((t >= 0) & (t / speed < duration))[:max_requests]
    if not keep.size:
        raise InputError(trace, f"no request in [{start:g} s, {start + duration * speed:g} s) of the trace "
                                f"(it spans {float(series.time[-1]) if len(series) else 0:.0f} s)")
    names = np.asarray(series.stream_names, dtype=object)[series.stream[keep]]
    return Replay([str(s) for s in names], t[keep], np.asarray(series.input_tokens[keep], dtype=np.int64),
                  np.asarray(series.output_tokens[keep], dtype=np.int64), speed)


def _body(r: Replay, i: int) -> bytes:
    body: dict[str, Any] = {"workload": r.stream[i]}
    if r.prompt[i] >= 0:
        body["prompt_tokens"] = int(r.prompt[i])
    if r.output[i] >= 0:
        body["max_tokens"] = int(r.output[i])
    return json.dumps(body).encode()


def _usage(data: bytes) -> int:
    try:
        d = json.loads(data)
    except ValueError:
        return -1
    usage = d.get("usage") if isinstance(d, dict) else None
    n = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else -1


async def _replay(r: Replay, url: str, headers: dict[str, str], concurrency: int, timeout: float) -> float:
    """Send every request of ``r`` to ``url`` on time (within the cap); the replay's wall seconds."""
    import httpx

    cap = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(headers={**headers, "Content-Type": "application/json"}, limits=limits,
                                 timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)), trust_env=False) as http:
        t0 = time.monotonic()

        async def one(i: int) -> None:
            try:
                t_send = time.monotonic()
                r.sent[i] = t_send - t0
                resp = await http.post(url, content=_body(r, i))
                r.latency[i] = time.monotonic() - t_send
                r.code[i] = resp.status_code
                r.completion[i] = _usage(resp.content)
            except httpx.TimeoutException:
                r.error[i] = f"no answer within {timeout:g} s"
            except httpx.HTTPError as exc:
                r.error[i] = (" ".join(str(exc).split()) or type(exc).__name__)[:200]
            finally:
                cap.release()

        tasks = []
        for i in range(len(r)):
            wait = t0 + float(r.scheduled[i]) - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            await cap.acquire()
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
        return time.monotonic() - t0


def replay(r: Replay, url: str, headers: dict[str, str], *, concurrency: int, timeout: float) -> float:
    """Run :func:`_replay` on a fresh event loop (uvloop where installed)."""
    try:
        import uvloop

        return uvloop.run(_replay(r, url, headers, concurrency, timeout))
    except ImportError:  # pragma: no cover - uvicorn[standard] brings uvloop
        return asyncio.run(_replay(r, url, headers, concurrency, timeout))


def summary(r: Replay, wall: float, slo_ms: float | None) -> dict[str, Any]:
    """What the replay measured (the printed table's and ``--json``'s numbers)."""
    answered = r.code > 0
    ok = (r.code >= 200) & (r.code < 300)
    lat = r.latency[answered] * 1000.0
    ok_lat = r.latency[ok] * 1000.0

    def pct(x: np.ndarray) -> dict[str, float | None]:
        if not x.size:
            return {"p50": None, "p90": None, "p99": None}
        return dict(zip(("p50", "p90", "p99"), (float(v) for v in np.percentile(x, [50, 90, 99])), strict=True))

    codes: dict[str, int] = {}
    for c in r.code[answered]:
        codes[str(int(c))] = codes.get(str(int(c)), 0) + 1
    errors = sum(e is not None for e in r.error)
    late = np.nan_to_num(r.sent - r.scheduled, nan=0.0)
    return {
        "requests": len(r), "answered": int(answered.sum()), "ok": int(ok.sum()), "errors": errors,
        "wall_s": wall, "throughput_rps": float(ok.sum()) / wall if wall > 0 else None,
        "offered_rps": len(r) / wall if wall > 0 else None,
        "latency_ms": pct(lat), "ok_latency_ms": pct(ok_lat), "codes": codes,
        "late_p99_ms": float(np.percentile(late, 99)) * 1000.0 if len(r) else None,
        "slo_ms": slo_ms,
        "slo_attainment": (float(((r.latency * 1000.0 <= slo_ms) & ok).sum()) / len(r)
                           if slo_ms is not None and len(r) else None),
        "prompt_tokens": int(r.prompt[r.prompt > 0].sum()), "completion_tokens": int(r.completion[r.completion > 0]
                                                                                       .sum()),
    }


def write_parquet(path: Path, r: Replay, slo_ms: float | None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    answered = r.code > 0
    ok = (r.code >= 200) & (r.code < 300)
    met = None if slo_ms is None else pa.array((ok & (r.latency * 1000.0 <= slo_ms)).tolist(), mask=~answered)
    cols = {
        "request": pa.array(np.arange(len(r), dtype=np.int64)),
        "stream": pa.array(r.stream, type=pa.string()),
        "trace_time": pa.array(r.trace_time),
        "scheduled": pa.array(r.scheduled),
        "sent": pa.array(r.sent, mask=np.isnan(r.sent)),
        "latency": pa.array(r.latency, mask=~answered),
        "code": pa.array(r.code, mask=~answered),
        "prompt_tokens": pa.array(r.prompt, mask=r.prompt < 0),
        "max_tokens": pa.array(r.output, mask=r.output < 0),
        "completion_tokens": pa.array(r.completion, mask=r.completion < 0),
        "slo_met": met if met is not None else pa.nulls(len(r), pa.bool_()),
        "error": pa.array(r.error, type=pa.string()),
    }
    assert tuple(cols) == LOAD_COLUMNS
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), path, compression="zstd")


def _service(api: Client, service: str) -> dict[str, Any]:
    """The service (by id, or by name among those the token sees)."""
    if service.isdigit():
        row: dict[str, Any] = api.get(f"/v1/services/{service}")
        return row
    found = [s for s in api.get("/v1/services") if s.get("name") == service]
    if not found:
        raise ApiError(f"no service named {service!r} (see GET /v1/services)")
    if len(found) > 1:
        raise ApiError(f"several services are named {service!r} (an admin token sees every tenant's): give its id")
    first: dict[str, Any] = found[0]
    return first


@client_command("load")
@click.argument("service")
@click.option("--trace", required=True, metavar="TRACE",
              help="A request trace: azure-llm-inference-2023 (or azure, azure:code, azure:conv), genai:requests, "
                   "or a file of one.")
@click.option("--speed", type=FiniteFloat(min=0, min_open=True, max=1e6), default=1.0, show_default=True,
              help="Trace seconds per wall second (60: an hour of the trace in a minute).")
@click.option("--duration", type=Duration(positive=True), default="60s", show_default=True,
              help="Stop sending after this much wall time (30s, 10m).")
@click.option("--start", type=Duration(), default="0", show_default=True,
              help="Begin this far into the trace (trace time).")
@click.option("--max-requests", type=click.IntRange(1, 10_000_000), default=100_000, show_default=True,
              help="Send at most this many requests.")
@click.option("--concurrency", type=click.IntRange(1, 10_000), default=256, show_default=True,
              help="Requests open at once at most (a request due beyond it waits: see the 'late' figure).")
@click.option("--timeout", type=FiniteFloat(min=0, min_open=True, max=3600), default=60.0, show_default=True,
              help="Seconds to wait for each answer.")
@click.option("--path", "route_path", default="v1/completions", show_default=True,
              help="The path sent to the replicas (after /serve/).")
@click.option("--slo", "slo_ms", type=FiniteFloat(min=0, min_open=True), default=None,
              help="SLO in ms for the attainment (default: the service's slo_ms, if it has one).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write one Parquet row per request here.")
@click.option("--allow-remote", is_flag=True, help="Send to a service that is not on a loopback address.")
def load(api: Client, service: str, trace: str, speed: float, duration: float, start: float, max_requests: int,
         concurrency: int, timeout: float, route_path: str, slo_ms: float | None, out: Path | None,
         allow_remote: bool, as_json: bool) -> None:
    """Replay an inference trace against a service's request route: its arrivals at --speed, its token
    counts in each body; prints latency percentiles, throughput, status codes and SLO attainment."""
    from kant.errors import KantError
    from kant.service.server import is_loopback

    host = urlsplit(api.target.url).hostname or ""
    if not allow_remote and not is_loopback(host):
        fail(f"{api.target.url_source} {api.target.url} is not a loopback address: kant load sends real traffic; "
             "give --allow-remote to send it there")
    if out is not None and out.suffix.lower() not in (".parquet", ".pq"):
        fail(f"--out {out}: the file name must end in .parquet")
    try:
        r = trace_requests(trace, start=start, duration=duration, speed=speed, max_requests=max_requests)
    except KantError as exc:
        fail(str(exc))
    row = _service(api, service)
    if slo_ms is None and isinstance(row.get("slo_ms"), int | float):
        slo_ms = float(row["slo_ms"])
    url = f"{api.target.url}/v1/services/{row['id']}/serve/{quote(route_path.lstrip('/'), safe='/')}"
    headers = {"Authorization": f"Bearer {api.target.token}"} if api.target.token else {}
    wall = replay(r, url, headers, concurrency=concurrency, timeout=timeout)
    if out is not None:
        write_parquet(out, r, slo_ms)
    s = summary(r, wall, slo_ms)
    if as_json:
        print_json(s)
        return
    _print(s, row, out)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} ms"


def _print(s: dict[str, Any], row: dict[str, Any], out: Path | None) -> None:
    t = table("", "", title=f"kant load: service {row['id']} ({row['name']})")
    lat = s["ok_latency_ms"]
    rows = [
        ("requests", f"{s['requests']} sent in {s['wall_s']:.1f} s ({s['offered_rps']:.1f}/s offered)"),
        ("answered", f"{s['answered']} ({s['ok']} 2xx); {s['errors']} without an answer"),
        ("throughput", f"{s['throughput_rps']:.1f} 2xx answers/s"),
        ("latency P50 / P90 / P99", " / ".join(_ms(lat[k]) for k in ("p50", "p90", "p99")) + " (2xx)"),
        ("codes", ", ".join(f"{k}: {v}" for k, v in sorted(s["codes"].items())) or "-"),
        ("SLO attainment", "-" if s["slo_attainment"] is None else
         f"{100 * s['slo_attainment']:.1f}% of requests 2xx within {s['slo_ms']:g} ms"),
        ("tokens", f"{s['prompt_tokens']} prompt, {s['completion_tokens']} completion"),
        ("late P99", _ms(s["late_p99_ms"]) + " (sent after due: the concurrency cap)"),
    ]
    if out is not None:
        rows.append(("per request", str(out)))
    for k, v in rows:
        t.add_row(k, v)
    emit(t)
