"""What the request route measures of each service's traffic (:class:`Traffic`, one for the process).

Per service: arrivals (a ring of per-second counts, for :meth:`Traffic.arrival_rate` over any
window up to :data:`RATE_HORIZON_S`), requests in flight (queued or at a replica), requests at each
replica (what the route balances on), and for every answered request its queue time (arrival ->
a replica picked), service time (sent to the replica -> its answer read), response time (arrival ->
answered), status code, tokens (asked in the request, counted in the answer's ``usage``) and
whether it met the service's SLO (a 2xx answered within ``slo_ms``; a service without an SLO has
no attainment). The last :data:`SAMPLES` answers of each service are kept for percentiles over a
window (:meth:`Traffic.stats`); the totals go to Prometheus (:class:`~kant.service.metrics.ServiceMetrics`).

Written by the route on uvicorn's event loop, read by the live autoscaler (:class:`LoadSignals`, on
the scheduling loop's thread) and the API: each method holds the lock for a few dictionary and
array operations, never across an ``await``; a request costs O(1).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kant.service.metrics import ServiceMetrics
from kant.service.serving.signals import LoadSignals

__all__ = ["RATE_HORIZON_S", "SAMPLES", "Answered", "ServiceStats", "Traffic"]

#: the longest window :meth:`Traffic.arrival_rate` counts over (seconds; one counter per second)
RATE_HORIZON_S = 3600
#: answered requests kept per service for percentiles
SAMPLES = 20_000


@dataclass(frozen=True, slots=True)
class Answered:
    """One answered request, as the route measured it."""

    code: int
    queue_s: float  # arrival -> a replica picked (or the 503)
    service_s: float  # sent to the replica -> its answer read (0 when none was sent)
    response_s: float  # arrival -> answered
    prompt_tokens: int | None = None  # from the answer's usage, else the request's prompt_tokens
    completion_tokens: int | None = None  # from the answer's usage, else the request's max_tokens
    slo_ms: float | None = None  # the service's SLO when it was answered (None: none)

    @property
    def met(self) -> bool | None:
        """Whether it met the SLO (None: no SLO)."""
        if self.slo_ms is None:
            return None
        return 200 <= self.code < 300 and self.response_s * 1000.0 <= self.slo_ms


@dataclass
class _Service:
    """One service's counters (see :class:`Traffic`)."""

    rate: np.ndarray = field(default_factory=lambda: np.zeros(RATE_HORIZON_S, dtype=np.int64))
    rate_second: int = 0  # the second the ring's newest slot counts
    inflight: int = 0
    queued: int = 0
    at: dict[int, int] = field(default_factory=dict)  # replica job id -> requests there now
    arrived: int = 0
    codes: dict[int, int] = field(default_factory=dict)
    tokens_in: int = 0
    tokens_out: int = 0
    slo_met: int = 0
    slo_counted: int = 0
    # the last SAMPLES answers: wall second, queue, response, met (1, 0; -1: no SLO)
    samples: deque[tuple[float, float, float, int]] = field(default_factory=lambda: deque(maxlen=SAMPLES))


class _Series:
    """One service's Prometheus series (``labels()`` looked up once, not per request)."""

    def __init__(self, m: ServiceMetrics, sid: str) -> None:
        self._m, self._sid = m, sid
        self.inflight = m.serve_inflight.labels(sid)
        self.queue = m.serve_queue_seconds.labels(sid)
        self.service = m.serve_service_seconds.labels(sid)
        self.response = m.serve_response_seconds.labels(sid)
        self.prompt = m.serve_tokens.labels(sid, "prompt")
        self.completion = m.serve_tokens.labels(sid, "completion")
        self.slo = m.serve_slo_attainment.labels(sid)
        self._codes: dict[int, Any] = {}

    def code(self, code: int) -> Any:
        child = self._codes.get(code)
        if child is None:
            child = self._codes[code] = self._m.serve_requests.labels(self._sid, str(code))
        return child


@dataclass(frozen=True)
class ServiceStats:
    """A service's traffic now and over a window (``GET /v1/services/{id}/stats``)."""

    window_s: float
    arrival_rate: float  # requests per second over the window
    inflight: int  # queued or at a replica now
    queued: int  # waiting for a replica now
    outstanding: dict[int, int]  # replica job id -> requests at it now
    answered: int  # answered within the window
    queue_p50_ms: float | None
    queue_p99_ms: float | None
    response_p50_ms: float | None
    response_p99_ms: float | None
    slo_attainment: float | None  # within the window (None: no SLO, or nothing answered)
    total_requests: int  # since the start
    codes: dict[int, int]  # answered since the start, by status code
    prompt_tokens: int  # since the start
    completion_tokens: int
    slo_attainment_total: float | None


class Traffic(LoadSignals):
    """The measurements of every service's traffic (see the module docstring)."""

    def __init__(self, metrics: ServiceMetrics | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._services: dict[int, _Service] = {}
        self._metrics = metrics
        self._series: dict[int, _Series] = {}  # the Prometheus children of each service (labels() once)
        self._clock = clock

    def _prometheus(self, service_id: int) -> _Series | None:
        m = self._metrics
        if m is None:
            return None
        series = self._series.get(service_id)
        if series is None:
            series = self._series[service_id] = _Series(m, str(service_id))
        return series

    def _get(self, service_id: int) -> _Service:
        s = self._services.get(service_id)
        if s is None:
            s = self._services[service_id] = _Service(rate_second=int(self._clock()))
        return s

    @staticmethod
    def _roll(s: _Service, second: int) -> None:
        """Move the ring's newest slot to ``second``, zeroing the seconds in between."""
        gap = second - s.rate_second
        if gap <= 0:
            return
        if gap >= RATE_HORIZON_S:
            s.rate[:] = 0
        else:
            idx = np.arange(s.rate_second + 1, second + 1) % RATE_HORIZON_S
            s.rate[idx] = 0
        s.rate_second = second

    # --- written by the route ------------------------------------------------------------------------
    def arrived(self, service_id: int) -> float:
        """A request arrived (it is in flight until :meth:`answered`); returns the arrival time."""
        now = self._clock()
        second = int(now)
        with self._lock:
            s = self._get(service_id)
            if second != s.rate_second:
                self._roll(s, second)
            s.rate[second % RATE_HORIZON_S] += 1
            s.arrived += 1
            s.inflight += 1
            s.queued += 1
        series = self._prometheus(service_id)
        if series is not None:
            series.inflight.inc()
        return now

    def started(self, service_id: int, job_id: int) -> None:
        """A request left the queue for replica ``job_id``."""
        with self._lock:
            s = self._get(service_id)
            s.queued -= 1
            s.at[job_id] = s.at.get(job_id, 0) + 1

    def left_queue(self, service_id: int) -> None:
        """A queued request gave up (timeout, full queue, client gone) without reaching a replica."""
        with self._lock:
            self._get(service_id).queued -= 1

    def done_at(self, service_id: int, job_id: int) -> None:
        """A request that :meth:`started` at replica ``job_id`` is no longer there."""
        with self._lock:
            s = self._get(service_id)
            n = s.at.get(job_id, 0) - 1
            if n > 0:
                s.at[job_id] = n
            else:
                s.at.pop(job_id, None)

    def answered(self, service_id: int, a: Answered) -> None:
        """A request in flight was answered (or given up on)."""
        now = time.time()
        met = a.met
        with self._lock:
            s = self._get(service_id)
            s.inflight -= 1
            s.codes[a.code] = s.codes.get(a.code, 0) + 1
            s.tokens_in += a.prompt_tokens or 0
            s.tokens_out += a.completion_tokens or 0
            if met is not None:
                s.slo_counted += 1
                s.slo_met += met
            s.samples.append((now, a.queue_s, a.response_s, -1 if met is None else int(met)))
            attainment = s.slo_met / s.slo_counted if s.slo_counted else None
        p = self._prometheus(service_id)
        if p is not None:
            p.inflight.dec()
            p.code(a.code).inc()
            p.queue.observe(a.queue_s)
            p.response.observe(a.response_s)
            if a.service_s > 0:
                p.service.observe(a.service_s)
            if a.prompt_tokens:
                p.prompt.inc(a.prompt_tokens)
            if a.completion_tokens:
                p.completion.inc(a.completion_tokens)
            if attainment is not None:
                p.slo.set(attainment)

    # --- read by the route, the autoscaler and the API ---------------------------------------------------
    def outstanding(self, service_id: int) -> dict[int, int]:
        """Requests at each replica now (job id -> count; a replica with none is absent)."""
        with self._lock:
            s = self._services.get(service_id)
            return dict(s.at) if s is not None else {}

    def at(self, service_id: int, job_id: int) -> int:
        s = self._services.get(service_id)
        return 0 if s is None else s.at.get(job_id, 0)

    def arrival_rate(self, service_id: int, window_s: float) -> float:
        """Requests per second that arrived over the last ``window_s`` seconds (whole seconds: the
        current one and the ``ceil(window_s) - 1`` before it, divided by ``window_s``; at most
        :data:`RATE_HORIZON_S`)."""
        if not window_s > 0:
            raise ValueError("window_s must be > 0")
        window = min(float(window_s), float(RATE_HORIZON_S))
        second = int(self._clock())
        with self._lock:
            s = self._services.get(service_id)
            if s is None:
                return 0.0
            self._roll(s, second)
            n = math.ceil(window)
            idx = np.arange(second - n + 1, second + 1) % RATE_HORIZON_S
            count = int(s.rate[idx].sum())
        return count / window

    def inflight(self, service_id: int) -> int:
        with self._lock:
            s = self._services.get(service_id)
            return 0 if s is None else s.inflight

    def stats(self, service_id: int, window_s: float = 60.0) -> ServiceStats:
        """The service's traffic now and over the last ``window_s`` seconds."""
        rate = self.arrival_rate(service_id, window_s)
        since = time.time() - window_s
        with self._lock:
            s = self._services.get(service_id) or _Service()
            recent = [x for x in s.samples if x[0] >= since] if s.samples and s.samples[-1][0] >= since else []
            out = ServiceStats(
                window_s=window_s, arrival_rate=rate, inflight=s.inflight, queued=s.queued, outstanding=dict(s.at),
                answered=len(recent), queue_p50_ms=None, queue_p99_ms=None, response_p50_ms=None,
                response_p99_ms=None, slo_attainment=None, total_requests=s.arrived, codes=dict(s.codes),
                prompt_tokens=s.tokens_in, completion_tokens=s.tokens_out,
                slo_attainment_total=s.slo_met / s.slo_counted if s.slo_counted else None)
        if not recent:
            return out
        arr = np.asarray(recent, dtype=np.float64)
        q50, q99 = (float(v) * 1000.0 for v in np.percentile(arr[:, 1], [50, 99]))
        r50, r99 = (float(v) * 1000.0 for v in np.percentile(arr[:, 2], [50, 99]))
        met = arr[:, 3][arr[:, 3] >= 0]
        return ServiceStats(**{**out.__dict__, "queue_p50_ms": q50, "queue_p99_ms": q99, "response_p50_ms": r50,
                               "response_p99_ms": r99,
                               "slo_attainment": float(met.mean()) if met.size else None})
