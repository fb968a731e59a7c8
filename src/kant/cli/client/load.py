"""``kant load SERVICE --trace TRACE``: replay an inference trace's requests against a service's
request route (``/v1/services/{service}/serve/...``) and report what came back.

Each request of the trace is sent at its arrival time divided by ``--speed`` (from the trace's first
request, or ``--start`` seconds into it), with its token counts in the JSON body (``prompt_tokens``,
``max_tokens``), over kept-alive connections (:class:`~kant.service.serving.upstream.Upstreams`). The
replay is bounded: it stops sending at ``--duration`` wall seconds or after ``--max-requests`` requests,
keeps at most ``--concurrency`` requests open (a request due while the cap is reached goes when one
ends: its lateness is recorded), waits at most ``--timeout`` for each answer, and sends only to a
loopback address unless ``--allow-remote``. It prints the latency percentiles, throughput, status codes
and SLO attainment, and writes one Parquet row per request with ``--out`` (docs/cli.md). The replay
itself is :mod:`kant.service.serving.replay` (also the traffic of ``kant serve --demo unified``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import click

from kant.cli._common import Duration, FiniteFloat, fail
from kant.cli.client.common import client_command, emit, print_json, table
from kant.cli.client.http import ApiError, Client
from kant.service.serving.replay import (
    LOAD_COLUMNS,
    TRACE_ALIASES,
    Day,
    Replay,
    day_requests,
    replay,
    summary,
    trace_requests,
    write_parquet,
)

__all__ = ["LOAD_COLUMNS", "TRACE_ALIASES", "Replay", "load", "replay", "summary", "trace_requests", "write_parquet"]

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
@click.option("--day", is_flag=True,
              help="Send a day made from the trace in --duration (24 shuffled copies of its span, thinned by a "
                   "diurnal factor to --rate); --speed and --start do not apply.")
@click.option("--rate", type=FiniteFloat(min=0, min_open=True, max=1e5), default=5.0, show_default=True,
              help="With --day: mean requests per wall second.")
@click.option("--diurnal", type=FiniteFloat(min=0, max=1), default=0.5, show_default=True,
              help="With --day: the diurnal amplitude (peak at 14:00, trough at 02:00).")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True,
              help="With --day: the seed of the copies' offsets and the thinning.")
def load(api: Client, service: str, trace: str, speed: float, duration: float, start: float, max_requests: int,
         concurrency: int, timeout: float, route_path: str, slo_ms: float | None, out: Path | None,
         allow_remote: bool, day: bool, rate: float, diurnal: float, seed: int, as_json: bool) -> None:
    """Replay an inference trace against a service's request route: its arrivals at --speed, its token
    counts in each body; prints latency percentiles, throughput, status codes and SLO attainment.
    With --day, a day of traffic made from the trace, compressed into --duration."""
    from kant.errors import KantError
    from kant.service.server import is_loopback

    host = urlsplit(api.target.url).hostname or ""
    if not allow_remote and not is_loopback(host):
        fail(f"{api.target.url_source} {api.target.url} is not a loopback address: kant load sends real traffic; "
             "give --allow-remote to send it there")
    if out is not None and out.suffix.lower() not in (".parquet", ".pq"):
        fail(f"--out {out}: the file name must end in .parquet")
    try:
        r = (day_requests(trace, Day(duration, rate, diurnal, seed=seed), max_requests=max_requests) if day else
             trace_requests(trace, start=start, duration=duration, speed=speed, max_requests=max_requests))
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
