"""The digital twin inside the live service: predicted starts kept fresh, and what-if runs, off the
scheduling loop.

A thread watches the loop's ``state_version``. When it has changed (and ``min_interval_s`` has passed
since the last refresh), the thread asks the loop for a :class:`~kant.twin.TwinSnapshot` (a read on
the loop's thread: a copy of the active jobs, milliseconds) and hands its JSON form to worker
*processes* that make the prediction's runs; the runs put together (:func:`~kant.twin.predict.join_parts`)
replace the previous predictions. The loop never waits for the twin.

CPU is bounded: ``workers`` prediction processes (``kant serve --predict-workers``; each makes some of
a prediction's runs, so an answer is as fresh as the runs' wall time allows, and the same for any
count) and one what-if process, each at a lowered priority (``nice`` 10), each doing one thing at a
time. What-if requests are bounded (:class:`WhatIfGate`):
each has a budget of wall seconds in the worker (rounds of runs stop before it would be passed: a
partial answer says so; a worker that has not finished one run of every scenario by twice the budget
is stopped and the request refused), at most one runs or waits per tenant (or admin token), and at
most ``queue`` in all; more is refused with 429 and ``Retry-After``.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kant.errors import KantError
from kant.service.errors import Busy, NotLeader, TooLong
from kant.text import format_duration
from kant.twin.calibrate import Calibration
from kant.twin.predict import PartStarts, join_parts, predict_part
from kant.twin.snapshot import TwinSnapshot
from kant.twin.whatif import Scenario, compare_within

if TYPE_CHECKING:
    from prometheus_client import Gauge

__all__ = ["Twin", "Predicted", "predict_runs", "run_whatif", "WhatIfGate", "default_predict_workers"]

log = logging.getLogger("kant.serve")


@dataclass(frozen=True, slots=True)
class Predicted:
    """A pending job's predicted start (absolute, on the service clock) and the snapshot it came from."""

    p50: float | None
    p10: float | None
    p90: float | None
    as_of: float  # the snapshot's time
    runs: int
    covers: str = ""  # what the band covers (kant.twin.predict.covers)
    reason: str | None = None  # why there is no P50 (None: there is one)


# --- what the worker processes run (module-level: picklable) ----------------------------------------
def _worker_init(parent: int) -> None:
    """In a worker process: run at a lower priority, leave Ctrl-C to the service (a terminal sends
    SIGINT to the whole process group: the worker would print a KeyboardInterrupt traceback while the
    service stops it anyway), and exit when the service does (even after a ``kill -9``, which leaves
    no one to shut the pool down)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):  # not permitted: run at normal priority
        os.nice(10)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="kant-twin-parent", daemon=True).start()


def predict_runs(snapshot: Mapping[str, Any], runs: int, ks: list[int]) -> PartStarts | dict[str, str]:
    """Runs ``ks`` of a snapshot's prediction (in a worker process; :func:`~kant.twin.predict.predict_part`)."""
    try:
        return predict_part(TwinSnapshot.from_dict(snapshot), ks, runs=runs)
    except KantError as exc:  # (as text: an exception with a custom signature may not unpickle)
        return {"error": str(exc)}


def default_predict_workers() -> int:
    """Prediction processes by default: half the machine's CPUs (the other half for the scheduling
    loop and the API), 1 to 4."""
    return min(max((os.cpu_count() or 1) // 2, 1), 4)


def run_whatif(snapshot: Mapping[str, Any], scenarios: list[Scenario], horizon_s: float, runs: int,
               html: bool, budget_s: float | None = None, arrivals: bool = True) -> dict[str, Any]:
    """A what-if comparison of a snapshot (in a worker process): the JSON result and, if asked, the
    HTML page. With ``budget_s``, rounds of runs stop before the budget would be passed
    (:func:`~kant.twin.whatif.compare_within`): ``runs`` is then below ``runs_asked`` and ``cut``
    says why."""
    t0 = time.perf_counter()
    try:
        snap = TwinSnapshot.from_dict(snapshot)
        done = compare_within(snap, scenarios, horizon_s=horizon_s, runs=runs, budget_s=budget_s, arrivals=arrivals)
    except KantError as exc:  # a change that cannot apply: the caller's error (422), as text
        return {"error": str(exc)}
    results = done.results
    cut = None
    if done.cut and budget_s is not None:
        cut = (f"stopped after {done.runs_done} of {done.runs_asked} runs per scenario: another round would "
               f"pass this service's what-if budget of {budget_s:g} s (kant serve --whatif-budget)")
    out: dict[str, Any] = {"as_of": snap.now, "horizon_s": horizon_s, "runs": done.runs_done,
                           "runs_asked": runs, "cut": cut, "arrivals": "history" if arrivals else "none",
                           "state_version": snap.info.get("state_version"),
                           "band_covers": results[0].prediction.covers if results else "",
                           "scenarios": [r.to_dict() for r in results], "seconds": time.perf_counter() - t0}
    if html:
        from kant.twin.report import whatif_html

        out["html"] = whatif_html(snap, results)
    return out


class WhatIfGate:
    """Admission of what-if requests: at most one per ``key`` (a tenant, an admin token) running or
    waiting, at most ``queue`` in all; one at a time in the worker, in arrival order as far as a
    lock gives it. ``shown`` (the service's ``kant_whatif_requests`` gauge, by state) is kept equal
    to the requests running in the worker (0 or 1) and those admitted that wait for it."""

    def __init__(self, budget_s: float, queue: int, shown: Gauge | None = None) -> None:
        self.budget_s = budget_s
        self.queue = queue
        self._lock = threading.Lock()
        self._in: dict[str, float] = {}  # key -> when its request came (monotonic)
        self._running = 0  # requests holding the worker (0 or 1)
        self._turn = threading.Lock()
        self._shown = shown
        self._show()

    def hard_limit_s(self) -> float:
        """The longest one request holds the worker: twice the budget (the first round always
        runs; a later one may overrun its estimate)."""
        return 2.0 * self.budget_s

    def _show(self) -> None:
        if self._shown is not None:
            self._shown.labels("running").set(self._running)
            self._shown.labels("waiting").set(len(self._in) - self._running)

    @contextlib.contextmanager
    def admit(self, key: str) -> Iterator[None]:
        """Admit ``key``'s request (or raise :class:`~kant.service.errors.Busy`), wait for the
        worker, hold it for the body, and let the next one in."""
        now = time.monotonic()
        with self._lock:
            since = self._in.get(key)
            if since is not None:
                left = max(self.hard_limit_s() * len(self._in) - (now - since), 1.0)
                raise Busy(f"a what-if of {key} is already running or waiting: one at a time each", left)
            if len(self._in) >= self.queue:
                raise Busy(f"{len(self._in)} what-if requests are running or waiting, the most this service takes "
                           "(kant serve --whatif-queue)", self.hard_limit_s())
            self._in[key] = now
            self._show()
        turn = False
        try:
            with self._turn:
                with self._lock:
                    self._running, turn = 1, True
                    self._show()
                yield
        finally:
            with self._lock:
                self._in.pop(key, None)
                if turn:
                    self._running = 0
                self._show()


class Twin:
    """Predictions kept fresh in the background, and what-if runs on request (module docstring)."""

    def __init__(self, snapshot: Callable[[], TwinSnapshot | None], *, version: Callable[[], Any] = lambda: None,
                 runs: int = 10, min_interval_s: float = 5.0, predict_on: bool = True, metrics: Any = None,
                 workers: int = 1) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self._snapshot = snapshot
        self._state_version = version
        self.runs = runs
        self.workers = workers  # prediction processes, each making some of the runs
        self.min_interval_s = min_interval_s
        self.predict_on = predict_on
        self._ctx = multiprocessing.get_context("spawn")
        self._pools: dict[str, ProcessPoolExecutor] = {}  # "predict" (``workers`` processes), "whatif" (one)
        self._pool_lock = threading.Lock()
        self._latest: dict[int, Predicted] = {}
        self._version: Any = None
        #: the snapshot the latest predictions ran on (its JSON form) and its time: a what-if of an
        #: unchanged state runs on it, so that both answers are one (docs/whatif.md)
        self._snap: dict[str, Any] | None = None
        self.as_of: float | None = None
        self.calibration = Calibration()  # the twin's own past errors (kant.twin.calibrate)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.metrics = metrics  # ServiceMetrics (twin_seconds), or None

    def _submit(self, which: str, fn: Callable[..., Any], calls: list[tuple[Any, ...]], *, timeout: float) -> list[Any]:
        """Run ``fn(*args)`` for each of ``calls`` in the ``which`` pool and wait for all (``timeout``
        seconds in all). A worker that died (killed, out of memory) is replaced: this call fails, the
        next one starts a new pool."""
        pool = self._pool(which)
        deadline = time.monotonic() + timeout
        try:
            futures = [pool.submit(fn, *args) for args in calls]
            return [f.result(max(deadline - time.monotonic(), 0.0)) for f in futures]
        except BrokenProcessPool:
            self._drop(which, pool)
            raise KantError("the twin's worker process died; a new one starts with the next request") from None

    def _pool(self, which: str) -> ProcessPoolExecutor:
        with self._pool_lock:
            pool = self._pools.get(which)
            if pool is None:
                size = self.workers if which == "predict" else 1
                pool = self._pools[which] = ProcessPoolExecutor(max_workers=size, mp_context=self._ctx,
                                                                initializer=_worker_init, initargs=(os.getpid(),))
            return pool

    # --- the refresh thread ----------------------------------------------------------------------
    def start(self) -> None:
        if not self.predict_on or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="kant-twin", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        with self._pool_lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:  # (first: a prediction under way ends at once, and the refresh thread with it)
            _stop_pool(pool)
        if self._thread is not None:
            self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.refresh()
            except Exception as exc:  # a bad snapshot or a dead worker: say so, keep the old predictions
                if self._stop.is_set():  # (closed under it: its worker was stopped)
                    return
                log.warning("predicting start times failed: %s", exc)
            wait = max(self.min_interval_s - (time.monotonic() - t0), 0.0)
            self._wake.wait(max(wait, 0.05))
            self._wake.clear()

    def refresh(self, timeout: float = 600.0) -> bool:
        """Predict again if the state changed since the last prediction; returns whether it did."""
        version = self._state_version()
        if version is None or version == self._version:
            return False
        snap = self._snapshot()
        if snap is None:
            return False
        version = snap.info.get("state_version", version)
        if not snap.sched.pending:
            self.calibration.calibrate(snap, [])  # (the jobs that started since still give their errors)
            self._latest, self._version, self._snap, self.as_of = {}, version, None, snap.now
            return True
        data = snap.to_dict()
        t0 = time.perf_counter()
        w = min(self.workers, self.runs)  # (each worker makes every w-th run: the same runs for any count)
        calls = [(data, self.runs, list(range(i, self.runs, w))) for i in range(w)]
        parts = self._submit("predict", predict_runs, calls, timeout=timeout)
        for part in parts:
            if isinstance(part, dict):
                raise KantError(str(part["error"]))
        pred = join_parts(snap, parts)
        jobs = pred.pending()
        self.calibration.calibrate(snap, jobs)  # (the band widened to the twin's own past errors)
        as_of, runs = snap.now, int(pred.starts.shape[0])
        covers = self.calibration.covers(pred.covers)
        self._latest = {int(j["id"]): Predicted(j["p50"], j["p10"], j["p90"], as_of, runs, covers, j.get("reason"))
                        for j in jobs}
        self._version, self._snap, self.as_of = version, data, as_of
        if self.metrics is not None:
            self.metrics.twin_seconds.observe(time.perf_counter() - t0)
        return True

    def predicted(self, job_id: int) -> Predicted | None:
        return self._latest.get(job_id)

    def unchanged_snapshot(self) -> dict[str, Any] | None:
        """The snapshot the latest predictions ran on, if the live state has not changed since (a
        what-if then runs on it: the same starts as the predictions), else None."""
        snap = self._snap
        if snap is None or self._state_version() != self._version:
            return None
        return snap

    # --- what-if -----------------------------------------------------------------------------------
    def whatif(self, scenarios: list[Scenario], *, horizon_s: float, runs: int, html: bool,
               budget_s: float | None = None, hard_limit_s: float = 600.0, arrivals: bool = True) -> dict[str, Any]:
        """Run a what-if of the live state in the what-if worker (``budget_s``: see :func:`run_whatif`).
        A worker still busy after ``hard_limit_s`` is stopped (a new one starts with the next request)
        and :class:`TooLong` is raised."""
        data = self.unchanged_snapshot()
        if data is None:
            snap = self._snapshot()
            if snap is None:
                raise NotLeader("this service is not the leader: no live state to run forward")
            data = snap.to_dict()
        pool = self._pool("whatif")
        try:  # the worker's pid (this also waits for a new worker to start: not counted in the limit)
            pid = int(pool.submit(os.getpid).result(60.0))
        except BrokenProcessPool:
            self._drop("whatif", pool)
            raise KantError("the twin's worker process died; a new one starts with the next request") from None
        future: Future[dict[str, Any]] = pool.submit(run_whatif, data, scenarios, horizon_s, runs, html,
                                                     budget_s, arrivals)
        try:
            out: dict[str, Any] = future.result(hard_limit_s)
        except BrokenProcessPool:
            self._drop("whatif", pool)
            raise KantError("the twin's worker process died; a new one starts with the next request") from None
        except TimeoutError:
            with contextlib.suppress(OSError):  # (no public way to stop a pool's busy worker)
                os.kill(pid, signal.SIGKILL)
            self._drop("whatif", pool)
            raise TooLong(f"stopped after {hard_limit_s:g} s") from None
        if "scenarios" in out:  # the bands of the live state's own scenario, as its predictions have them
            for sc in out["scenarios"]:
                if sc.get("name") == "now" and self.calibration.apply(float(out["as_of"]), sc["jobs"]):
                    sc["band_covers"] = self.calibration.covers(str(sc.get("band_covers", "")))
                    out["band_covers"] = sc["band_covers"]
        return out

    def _drop(self, which: str, pool: ProcessPoolExecutor) -> None:
        """Forget a worker pool (the next call starts a new one)."""
        with self._pool_lock:
            if self._pools.get(which) is pool:
                del self._pools[which]
        pool.shutdown(wait=False, cancel_futures=True)


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool`` now and wait until it is gone: its worker is terminated (it may be in the middle of
    a long what-if) and its queues are closed. Not waiting (``shutdown(wait=False)``) left the queues'
    semaphores to the process's exit, which a signal ends before they are freed: multiprocessing's
    resource tracker then warned of leaked semaphores at every stop of ``kant serve``."""
    procs: dict[int, Any] = getattr(pool, "_processes", None) or {}  # (no public way to stop a busy worker)
    for proc in list(procs.values()):
        with contextlib.suppress(OSError, AttributeError):
            proc.terminate()
    pool.shutdown(wait=True, cancel_futures=True)  # (a terminated worker breaks the pool: this returns at once)


NO_START = "it does not start in the twin's run"


def describe_prediction(pred: Predicted, now: float) -> str:
    """``predicted start in ~2h10m (1h20m - 3h40m)`` (from ``now``), or why there is none. A P50
    already past (the prediction is older than the start it predicted) says so instead of ``~0s``."""
    if pred.p50 is None:
        return f"no predicted start: {pred.reason or NO_START}"
    if pred.p50 < now:
        late = format_duration(now - pred.p50, "compact")
        hi = (f"; its band runs to {format_duration(pred.p90 - now, 'compact')} from now"
              if pred.p90 is not None and pred.p90 > now else "")
        made = format_duration(now - pred.as_of, "compact")
        return f"predicted to start {late} ago (a prediction made {made} ago){hi}"
    mid = format_duration(pred.p50 - now, "compact")
    if pred.runs > 1:
        lo = format_duration(max(pred.p10 - now, 0.0), "compact") if pred.p10 is not None else "?"
        hi = format_duration(pred.p90 - now, "compact") if pred.p90 is not None else "later"
        if lo != hi:
            return f"predicted start in ~{mid} ({lo} - {hi})"
    return f"predicted start in ~{mid}"
