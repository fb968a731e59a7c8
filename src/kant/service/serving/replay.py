"""Replaying an inference trace's requests against a service's request route
(``/v1/services/{service}/serve/...``): what ``kant load`` sends (:mod:`kant.cli.client.load`) and
the traffic of ``kant serve --demo unified`` (:mod:`kant.service.demo`), one implementation.

Each request of the trace is sent at its arrival time divided by the speed, with its token counts in
the JSON body (``prompt_tokens``, ``max_tokens``), over kept-alive connections
(:class:`~kant.service.serving.upstream.Upstreams`, the route's own, about half the CPU per request
of httpx's pooled client), at most ``concurrency`` open at once (a request due while the cap is
reached goes when one ends: its lateness is recorded), each step of each waited for at most
``timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["LOAD_COLUMNS", "TRACE_ALIASES", "Day", "Replay", "day_requests", "replay", "summary", "trace_requests",
           "write_parquet"]

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


def _request_log(trace: str) -> Any:
    """The trace's requests (:class:`InputError` for a trace that is not a request log)."""
    from kant.errors import InputError
    from kant.traces.registry import load_load

    series = load_load(TRACE_ALIASES.get(trace, trace))
    if series.kind != "requests":
        raise InputError(trace, "a request-rate series, not a request log: kant load replays request logs "
                                "(azure, genai:requests, or a file of them)")
    return series


def trace_requests(trace: str, *, start: float, duration: float, speed: float, max_requests: int) -> Replay:
    """The requests of ``trace`` from ``start`` s that fall within ``duration`` wall s at ``speed``,
    at most ``max_requests`` (:class:`KantError` for a trace that is not a request log)."""
    from kant.errors import InputError

    series = _request_log(trace)
    t = np.asarray(series.time, dtype=np.float64) - start
    keep = np.flatnonzero((t >= 0) & (t / speed < duration))[:max_requests]
    if not keep.size:
        raise InputError(trace, f"no request in [{start:g} s, {start + duration * speed:g} s) of the trace "
                                f"(it spans {float(series.time[-1]) if len(series) else 0:.0f} s)")
    names = np.asarray(series.stream_names, dtype=object)[series.stream[keep]]
    return Replay([str(s) for s in names], t[keep], np.asarray(series.input_tokens[keep], dtype=np.int64),
                  np.asarray(series.output_tokens[keep], dtype=np.int64), speed)


@dataclass(frozen=True)
class Day:
    """A day of traffic made from a shorter request log, played in ``wall_s`` wall seconds.

    The log's span (Azure's 2023 logs: an hour) is laid end to end over 24 hours, each copy rotated
    by a random offset within the span (the simulator's ``repeat: shuffle``, :mod:`kant.inference.traffic`,
    so the day does not repeat one hour 24 times in step); each request is kept with a probability
    proportional to the simulator's diurnal factor ``1 + A cos(2 pi (h - peak_hour) / 24)`` at its hour
    ``h`` (the day starts at midnight), scaled so that ``mean_rps`` requests per wall second are sent
    on average. Requests keep the log's token counts and its burstiness within each copy."""

    wall_s: float
    mean_rps: float
    amplitude: float = 0.5
    peak_hour: float = 14.0
    seed: int = 0

    @property
    def speed(self) -> float:
        return DAY_S / self.wall_s


DAY_S = 86_400.0


def day_requests(trace: str, day: Day, *, max_requests: int) -> Replay:
    """The requests of :class:`Day` ``day`` made from ``trace`` (at most ``max_requests``, the first)."""
    from kant.errors import InputError

    if not (day.wall_s > 0 and day.mean_rps > 0 and 0 <= day.amplitude <= 1):
        raise InputError(trace, "a day needs a positive duration and rate, and a diurnal amplitude in [0, 1]")
    series = _request_log(trace)
    if len(series) < 2:
        raise InputError(trace, "a day is made from a log of at least 2 requests")
    t = np.asarray(series.time, dtype=np.float64)
    t = t - t.min()
    span = float(t.max()) + 1e-9
    rng = np.random.default_rng(day.seed)
    copies = int(np.ceil(DAY_S / span))
    when = np.concatenate([np.mod(t + rng.uniform(0.0, span), span) + k * span for k in range(copies)])
    row = np.tile(np.arange(len(t)), copies)
    inside = when < DAY_S
    when, row = when[inside], row[inside]
    weight = 1.0 + day.amplitude * np.cos(2 * np.pi * (when / 3600.0 - day.peak_hour) / 24.0)
    keep_p = weight * (day.mean_rps * day.wall_s / float(weight.sum()))
    if float(keep_p.max()) > 1.0:
        most = day.mean_rps / float(keep_p.max())
        raise InputError(trace, f"a day of {len(t)} requests an hour cannot average {day.mean_rps:g} requests/s in "
                                f"{day.wall_s:g} s at diurnal amplitude {day.amplitude:g} (at most {most:.1f}/s)")
    kept = rng.random(len(when)) < keep_p
    order = np.argsort(when[kept], kind="stable")[:max_requests]
    when, row = when[kept][order], row[kept][order]
    names = np.asarray(series.stream_names, dtype=object)[series.stream[row]]
    return Replay([str(x) for x in names], when, np.asarray(series.input_tokens[row], dtype=np.int64),
                  np.asarray(series.output_tokens[row], dtype=np.int64), day.speed)


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


async def _replay(r: Replay, url: str, headers: dict[str, str], concurrency: int, timeout: float,
                  stop: threading.Event | None) -> float:
    """Send every request of ``r`` to ``url`` on time (within the cap), or until ``stop`` is set
    (what was sent is waited for); the replay's wall seconds."""
    import httpcore

    from kant.service.serving.upstream import Upstreams

    cap = asyncio.Semaphore(concurrency)
    target = httpcore.URL(url)
    sent_headers = [(b"content-type", b"application/json"),
                    *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()
                      if k.lower() not in ("content-type", "content-length", "host"))]
    upstreams = Upstreams()
    try:
        t0 = time.monotonic()

        async def one(i: int) -> None:
            try:
                t_send = time.monotonic()
                r.sent[i] = t_send - t0
                code, data = await upstreams.call(b"POST", target, sent_headers, _body(r, i), timeout)
                r.latency[i] = time.monotonic() - t_send
                r.code[i] = code
                r.completion[i] = _usage(data)
            except httpcore.TimeoutException:
                r.error[i] = f"no answer within {timeout:g} s"
            except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
                r.error[i] = (" ".join(str(exc).split()) or type(exc).__name__)[:200]
            finally:
                cap.release()

        tasks = []
        for i in range(len(r)):
            wait = t0 + float(r.scheduled[i]) - time.monotonic()
            while wait > 0 and not (stop is not None and stop.is_set()):
                await asyncio.sleep(wait if stop is None else min(wait, 0.25))
                wait = t0 + float(r.scheduled[i]) - time.monotonic()
            if stop is not None and stop.is_set():
                break
            await cap.acquire()
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
        return time.monotonic() - t0
    finally:
        await upstreams.aclose()


def replay(r: Replay, url: str, headers: dict[str, str], *, concurrency: int, timeout: float,
           stop: threading.Event | None = None) -> float:
    """Run :func:`_replay` on a fresh event loop (uvloop where installed); ``stop``: stop sending
    when it is set (from another thread)."""
    try:
        import uvloop

        return uvloop.run(_replay(r, url, headers, concurrency, timeout, stop))
    except ImportError:  # pragma: no cover - uvicorn[standard] brings uvloop
        return asyncio.run(_replay(r, url, headers, concurrency, timeout, stop))


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
