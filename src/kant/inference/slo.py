"""SLO model: the share of requests served within a latency target, from load and ready replicas.

**Queueing model.** In each time window the service is an M/M/c queue (Erlang C): requests arrive as
a Poisson process of rate ``lam`` (requests/s, the window's mean rate), each replica has
``concurrency`` slots (batch slots; 1 = one request at a time), so there are ``c = ready replicas x
concurrency`` servers, and each slot serves a request in an exponential time of mean ``1 / mu`` where
``mu = capacity per replica (requests/s) / concurrency``. With offered load ``a = lam / mu`` Erlangs
and ``a < c``:

* ``C = ErlangC(c, a)``: the probability a request waits (computed with the Erlang-B recursion
  ``B_0 = 1, B_k = a B_{k-1} / (k + a B_{k-1})`` and ``C = c B_c / (c - a (1 - B_c))``, which stays
  finite for hundreds of servers);
* waiting time: ``P(W > t) = C exp(-theta t)`` with ``theta = c mu - lam``;
* response time ``T = W + S``: ``P(T > t) = (1 - C) exp(-mu t) + C (theta exp(-mu t) - mu
  exp(-theta t)) / (theta - mu)`` (``C exp(-mu t)(1 + mu t)`` when ``theta = mu``).

The SLO attainment of a window is ``P(T <= slo)`` (``slo_metric: response``) or ``P(W <= slo)``
(``slo_metric: wait``: queueing delay only, a time-to-first-token style target). A window with
``a >= c`` (overloaded: the queue grows without bound) or with load and no ready replica counts as
0; a window without load is not counted (it has no requests). The run's attainment is the
request-weighted mean over windows.

**Limits.** Steady state is assumed within each window (a queue built up in an overloaded window
does not carry over to the next, and a window starts in equilibrium); arrivals are Poisson (ServeGen's
per-window CV, often well above 1, is not used, so bursty traffic is scored optimistically); service
times are exponential (LLM decode times are closer to their token counts than to an exponential);
slots of one replica are independent servers (no batching slowdown as the batch fills); requests are
never dropped.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["attainment", "erlang_c", "response_within", "wait_within"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def erlang_c(servers: npt.ArrayLike, load: npt.ArrayLike) -> FloatArray:
    """Probability of waiting in M/M/c with ``servers`` = c and offered ``load`` = lam / mu
    (Erlangs), element-wise; 1 where ``load >= servers`` (and where there is no server)."""
    c = np.asarray(servers, dtype=np.int64)
    a = np.asarray(load, dtype=np.float64)
    c, a = np.broadcast_arrays(c, a)
    b = np.ones(a.shape, dtype=np.float64)
    top = int(c.max()) if c.size else 0
    for k in range(1, top + 1):
        on = c >= k
        ab = a * b
        b = np.where(on, ab / (k + ab), b)
    stable = (a < c) & (c > 0)
    den = np.where(stable, c - a * (1.0 - b), 1.0)
    out: FloatArray = np.where(stable, c * b / den, 1.0)
    return np.clip(out, 0.0, 1.0)


def wait_within(t: float | FloatArray, servers: npt.ArrayLike, lam: npt.ArrayLike, mu: npt.ArrayLike) -> FloatArray:
    """``P(W <= t)`` in M/M/c; 0 where unstable (``lam >= c mu``), 1 where ``lam == 0``."""
    c = np.asarray(servers, dtype=np.int64)
    lam_a = np.asarray(lam, dtype=np.float64)
    mu_a = np.asarray(mu, dtype=np.float64)
    a = lam_a / mu_a
    cw = erlang_c(c, a)
    theta = c * mu_a - lam_a
    stable = (a < c) & (c > 0)
    p = 1.0 - cw * np.exp(-np.where(stable, theta, 0.0) * t)
    out: FloatArray = np.where(lam_a <= 0, 1.0, np.where(stable, p, 0.0))
    return out


def response_within(t: float | FloatArray, servers: npt.ArrayLike, lam: npt.ArrayLike,
                    mu: npt.ArrayLike) -> FloatArray:
    """``P(W + S <= t)`` in M/M/c (S exponential with rate ``mu``); 0 where unstable, and for
    ``lam == 0`` the service time alone, ``1 - exp(-mu t)``."""
    c = np.asarray(servers, dtype=np.int64)
    lam_a = np.asarray(lam, dtype=np.float64)
    mu_a = np.asarray(mu, dtype=np.float64)
    a = lam_a / mu_a
    cw = erlang_c(c, a)
    stable = (a < c) & (c > 0)
    theta = np.where(stable, c * mu_a - lam_a, 1.0)
    e_mu = np.exp(-mu_a * t)
    e_th = np.exp(-theta * t)
    diff = theta - mu_a
    near = np.abs(diff) <= 1e-9 * mu_a
    safe = np.where(near, 1.0, diff)
    tail_wait = np.where(near, e_mu * (1.0 + mu_a * t), (theta * e_mu - mu_a * e_th) / safe)
    tail = (1.0 - cw) * e_mu + cw * tail_wait
    p = np.clip(1.0 - tail, 0.0, 1.0)
    out: FloatArray = np.where(lam_a <= 0, 1.0 - e_mu, np.where(stable, p, 0.0))
    return out


def attainment(lam: npt.ArrayLike, ready: npt.ArrayLike, capacity_rps: npt.ArrayLike, concurrency: int,
               slo_s: float, metric: str = "response") -> FloatArray:
    """SLO attainment per window: ``lam`` requests/s, ``ready`` replicas, ``capacity_rps`` requests/s
    per replica (may vary per window, e.g. for token capacity), ``concurrency`` slots per replica.
    Windows without load get 1 (they carry no requests, so they weigh nothing)."""
    lam_a = np.asarray(lam, dtype=np.float64)
    servers = np.asarray(ready, dtype=np.int64) * int(concurrency)
    mu = np.asarray(capacity_rps, dtype=np.float64) / float(concurrency)
    if metric == "wait":
        p = wait_within(slo_s, servers, lam_a, mu)
    elif metric == "response":
        p = response_within(slo_s, servers, lam_a, mu)
    else:
        raise ValueError(f"unknown SLO metric {metric!r}; expected 'response' or 'wait'")
    out: FloatArray = np.where(lam_a <= 0, 1.0, p)
    return out
