"""The digital twin inside the live service: predicted starts kept fresh, and what-if runs, off the
scheduling loop.

A thread watches the loop's ``state_version``. When it has changed (and ``min_interval_s`` has passed
since the last refresh), the thread asks the loop for a :class:`~kant.twin.TwinSnapshot` (a read on
the loop's thread: a copy of the active jobs, milliseconds) and hands its JSON form to a worker
*process* that runs the prediction. Its answer replaces the previous predictions. The loop never
waits for the twin.

CPU is bounded: one prediction process and one what-if process, each at a lowered priority
(``nice`` 10), each doing one thing at a time. What-if requests queue behind each other.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from kant.errors import KantError
from kant.text import span
from kant.twin.predict import predict
from kant.twin.snapshot import TwinSnapshot
from kant.twin.whatif import Scenario, compare

__all__ = ["Twin", "Predicted", "predict_job_starts", "run_whatif"]

log = logging.getLogger("kant.serve")


@dataclass(frozen=True, slots=True)
class Predicted:
    """A pending job's predicted start (absolute, on the service clock) and the snapshot it came from."""

    p50: float | None
    p10: float | None
    p90: float | None
    as_of: float  # the snapshot's time
    runs: int


# --- what the worker processes run (module-level: picklable) ----------------------------------------
def _worker_init(parent: int) -> None:
    """In a worker process: run at a lower priority, and exit when the service does (even after a
    ``kill -9``, which leaves no one to shut the pool down)."""
    with contextlib.suppress(OSError):  # not permitted: run at normal priority
        os.nice(10)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="kant-twin-parent", daemon=True).start()


def predict_job_starts(snapshot: Mapping[str, Any], runs: int) -> dict[str, Any]:
    """Predicted starts of a snapshot's pending jobs, by job id (in a worker process)."""
    t0 = time.perf_counter()
    try:
        snap = TwinSnapshot.from_dict(snapshot)
        pred = predict(snap, runs=runs)
    except KantError as exc:  # (as text: an exception with a custom signature may not unpickle)
        return {"error": str(exc)}
    return {"as_of": snap.now, "runs": int(pred.starts.shape[0]), "jobs": pred.pending(),
            "seconds": time.perf_counter() - t0}


def run_whatif(snapshot: Mapping[str, Any], scenarios: list[Scenario], horizon_s: float, runs: int,
               html: bool) -> dict[str, Any]:
    """A what-if comparison of a snapshot (in a worker process): the JSON result and, if asked, the
    HTML page."""
    t0 = time.perf_counter()
    try:
        snap = TwinSnapshot.from_dict(snapshot)
        results = compare(snap, scenarios, horizon_s=horizon_s, runs=runs)
    except KantError as exc:  # a change that cannot apply: the caller's error (422), as text
        return {"error": str(exc)}
    out: dict[str, Any] = {"as_of": snap.now, "horizon_s": horizon_s,
                           "runs": int(results[0].prediction.starts.shape[0]) if results else 0,
                           "scenarios": [r.to_dict() for r in results], "seconds": time.perf_counter() - t0}
    if html:
        from kant.twin.report import whatif_html

        out["html"] = whatif_html(snap, results)
    return out


class Twin:
    """Predictions kept fresh in the background, and what-if runs on request (module docstring)."""

    def __init__(self, snapshot: Callable[[], TwinSnapshot | None], *, version: Callable[[], Any] = lambda: None,
                 runs: int = 10, min_interval_s: float = 5.0, predict_on: bool = True, metrics: Any = None) -> None:
        self._snapshot = snapshot
        self._state_version = version
        self.runs = runs
        self.min_interval_s = min_interval_s
        self.predict_on = predict_on
        self._ctx = multiprocessing.get_context("spawn")
        self._pools: dict[str, ProcessPoolExecutor] = {}  # "predict", "whatif": one worker each
        self._pool_lock = threading.Lock()
        self._latest: dict[int, Predicted] = {}
        self._version: Any = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.metrics = metrics  # ServiceMetrics (twin_seconds), or None

    def _submit(self, which: str, fn: Callable[..., dict[str, Any]], *args: Any,
                timeout: float) -> dict[str, Any]:
        """Run ``fn(*args)`` in the ``which`` worker and wait for it. A worker that died (killed, out
        of memory) is replaced: this call fails, the next one starts a new worker."""
        pool = self._pool(which)
        try:
            out: dict[str, Any] = pool.submit(fn, *args).result(timeout)
        except BrokenProcessPool:
            with self._pool_lock:
                if self._pools.get(which) is pool:
                    del self._pools[which]
            pool.shutdown(wait=False, cancel_futures=True)
            raise KantError("the twin's worker process died; a new one starts with the next request") from None
        return out

    def _pool(self, which: str) -> ProcessPoolExecutor:
        with self._pool_lock:
            pool = self._pools.get(which)
            if pool is None:
                pool = self._pools[which] = ProcessPoolExecutor(max_workers=1, mp_context=self._ctx,
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
        if self._thread is not None:
            self._thread.join(5.0)
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.refresh()
            except Exception as exc:  # a bad snapshot or a dead worker: say so, keep the old predictions
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
            self._latest, self._version = {}, version
            return True
        out = self._submit("predict", predict_job_starts, snap.to_dict(), self.runs, timeout=timeout)
        if "error" in out:
            raise KantError(str(out["error"]))
        as_of, runs = float(out["as_of"]), int(out["runs"])
        self._latest = {int(j["id"]): Predicted(j["p50"], j["p10"], j["p90"], as_of, runs) for j in out["jobs"]}
        self._version = version
        if self.metrics is not None:
            self.metrics.twin_seconds.observe(float(out["seconds"]))
        return True

    def predicted(self, job_id: int) -> Predicted | None:
        return self._latest.get(job_id)

    # --- what-if -----------------------------------------------------------------------------------
    def whatif(self, scenarios: list[Scenario], *, horizon_s: float, runs: int, html: bool,
               timeout: float = 600.0) -> dict[str, Any]:
        snap = self._snapshot()
        if snap is None:
            raise KantError("this service is not the leader: no live state to run forward")
        return self._submit("whatif", run_whatif, snap.to_dict(), scenarios, horizon_s, runs, html, timeout=timeout)


def describe_prediction(pred: Predicted, now: float) -> str:
    """``predicted start in ~2h10m (1h20m - 3h40m)`` (from ``now``), or why there is none."""
    if pred.p50 is None:
        return "no predicted start: it does not start in the twin's run (if nothing else changes)"
    mid = span(pred.p50 - now)
    if pred.runs > 1:
        lo = span(pred.p10 - now) if pred.p10 is not None else "?"
        hi = span(pred.p90 - now) if pred.p90 is not None else "later"
        if lo != hi:
            return f"predicted start in ~{mid} ({lo} - {hi})"
    return f"predicted start in ~{mid}"
