"""Group commit of submits: concurrent requests' jobs are inserted in one database transaction.

A submit is acknowledged only after the transaction that holds it has committed (durable: SQLite
with ``synchronous=FULL``, PostgreSQL's commit). One writer thread takes every submit waiting at that
moment (up to ``max_batch`` jobs), inserts them together, hands the new jobs to the scheduling loop
and then answers every request of the batch: under load one commit serves many requests, idle a
request waits for its own commit only.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from kant.errors import KantError
from kant.service.clock import Clock
from kant.service.db.database import Database
from kant.service.db.jobs import NewJob
from kant.service.errors import NotLeader
from kant.service.live.state import Arrival
from kant.service.loop import ServiceLoop
from kant.service.metrics import ServiceMetrics

__all__ = ["SubmitWriter"]

log = logging.getLogger("kant.serve")

Result = list[tuple[int, bool]]


class SubmitWriter:
    def __init__(self, db: Database, clock: Clock, loop: Callable[[], ServiceLoop | None], *,
                 max_batch: int = 1024, metrics: ServiceMetrics | None = None) -> None:
        self.db = db
        self.clock = clock
        self._loop = loop
        self.max_batch = max_batch
        self.metrics = metrics
        self._queue: queue.SimpleQueue[tuple[Sequence[NewJob], _Waiter] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="kant-writer", daemon=True)
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    def stop(self) -> None:
        if self._started:
            self._queue.put(None)
            self._thread.join(10)
            self._started = False

    def submit_future(self, jobs: Sequence[NewJob]) -> Future[Result]:
        fut: Future[Result] = Future()
        self._queue.put((jobs, fut))
        return fut

    async def submit(self, jobs: Sequence[NewJob]) -> Result:
        """Insert ``jobs`` (ids and whether each was new), once committed."""
        fut: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._queue.put((jobs, fut))
        return await fut

    def submit_sync(self, jobs: Sequence[NewJob], timeout: float = 60.0) -> Result:
        return self.submit_future(jobs).result(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            items = [item]
            size = len(item[0])
            while size < self.max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                items.append(nxt)
                size += len(nxt[0])
            self._write(items)

    def _write(self, items: list[tuple[Sequence[NewJob], _Waiter]]) -> None:
        batch = [job for jobs, _ in items for job in jobs]
        try:
            results = self._insert(batch)
        except KantError as exc:
            if len(items) == 1:
                _fail(items[0][1], exc)
                return
            for one in items:  # one bad request must not fail the others: write them one by one
                self._write([one])
            return
        except Exception as exc:  # pragma: no cover - the database failed in an unexpected way
            log.exception("inserting %d jobs failed", len(batch))
            for _, fut in items:
                _fail(fut, KantError(f"the database failed: {exc}"))
            return
        # answer every waiter of the batch; asyncio waiters with one wake-up of their event loop
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Result], Result]]] = {}
        k = 0
        for jobs, fut in items:
            part = results[k : k + len(jobs)]
            k += len(jobs)
            if isinstance(fut, asyncio.Future):
                by_loop.setdefault(fut.get_loop(), []).append((fut, part))
            elif not fut.done():
                fut.set_result(part)
        for loop, done in by_loop.items():
            loop.call_soon_threadsafe(_resolve_all, done)

    def _insert(self, batch: list[NewJob]) -> Result:
        loop = self._loop()
        if loop is None or not loop.alive:
            raise NotLeader("this service is not the leader: submits are not accepted")
        now = self.clock.now()
        results = self.db.jobs.insert(batch, now_time=now, now_wall=time.time(), epoch=loop.epoch)
        if self.metrics is not None:
            self.metrics.commits.labels("submits").inc()
        arrivals = [Arrival(job_id, job, now) for (job_id, created), job in zip(results, batch, strict=True)
                    if created]
        if arrivals:
            loop.submit_arrivals(arrivals)
        return results


_Waiter = Future[Result] | asyncio.Future[Result]


def _resolve_all(done: list[tuple[asyncio.Future[Result], Result]]) -> None:
    for fut, result in done:
        if not fut.done():
            fut.set_result(result)


def _fail(fut: _Waiter, exc: BaseException) -> None:
    if isinstance(fut, asyncio.Future):
        fut.get_loop().call_soon_threadsafe(_fail_now, fut, exc)
    elif not fut.done():
        fut.set_exception(exc)


def _fail_now(fut: asyncio.Future[Result], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
