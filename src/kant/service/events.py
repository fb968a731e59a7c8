"""The event stream (server-sent events, ``GET /v1/events``): every job and node event as the database
recorded it, with its id as the SSE id, so a client that reconnects with ``Last-Event-ID`` misses
nothing. One thread reads new events after each commit (the loop calls :meth:`EventHub.notify`) and
fans them out to the subscribers; a tenant's subscription gets only its own jobs' events.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass

from kant.service.db.database import Database
from kant.service.db.events import EventRow

__all__ = ["EventHub", "event_json"]

log = logging.getLogger("kant.serve")

_KEEPALIVE_S = 15.0
_QUEUE_MAX = 10_000


def event_json(ev: EventRow) -> dict[str, object]:
    return {"id": ev.id, "time": ev.time, "wall": ev.wall, "kind": ev.kind, "job_id": ev.job_id, "node": ev.node,
            "tenant": ev.tenant, "message": ev.message}


@dataclass(eq=False)
class _Subscriber:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[EventRow | None]
    tenant: str | None
    dropped: bool = False


class EventHub:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._subs: set[_Subscriber] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._last = db.events.max_id()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="kant-events", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        """New events were committed (called by the loop after its transaction)."""
        self._wake.set()

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(1.0)
            self._wake.clear()
            if self._stop:
                return
            with self._lock:
                subs = list(self._subs)
                if not subs:  # nobody listens: no reads (a subscriber sets where reading resumes)
                    self._last = -1
                    continue
            try:
                while True:
                    rows = self.db.events.after(self._last, limit=1000)
                    if not rows:
                        break
                    self._last = rows[-1].id
                    for sub in subs:
                        for ev in rows:
                            if sub.tenant is None or ev.tenant == sub.tenant:
                                sub.loop.call_soon_threadsafe(self._put, sub, ev)
            except Exception:  # pragma: no cover - the database is down: try again on the next wake
                log.warning("reading events failed; retrying", exc_info=True)

    @staticmethod
    def _put(sub: _Subscriber, ev: EventRow) -> None:
        if sub.queue.qsize() >= _QUEUE_MAX:
            if not sub.dropped:
                sub.dropped = True
                sub.queue.put_nowait(None)  # too slow a reader: end its stream, it reconnects and replays
            return
        sub.queue.put_nowait(ev)

    async def stream(self, tenant: str | None, last_id: int | None) -> AsyncIterator[str]:
        """SSE text: a replay of events after ``last_id`` (if given), then live events."""
        sub = _Subscriber(asyncio.get_running_loop(), asyncio.Queue(), tenant)
        with self._lock:
            if self._last < 0:
                self._last = self.db.events.max_id()  # one indexed query, once per connect
            self._subs.add(sub)
        try:
            seen = last_id if last_id is not None else self._last
            if last_id is not None:
                while True:
                    rows = await asyncio.to_thread(self.db.events.after, seen, tenant=tenant, limit=1000)
                    for row in rows:
                        seen = row.id
                        yield _sse(row)
                    if len(rows) < 1000:
                        break
            yield ": connected\n\n"
            while True:
                try:
                    ev = await asyncio.wait_for(sub.queue.get(), _KEEPALIVE_S)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if ev is None:
                    return
                if ev.id > seen:
                    seen = ev.id
                    yield _sse(ev)
        finally:
            with self._lock:
                self._subs.discard(sub)


def _sse(ev: EventRow) -> str:
    return f"id: {ev.id}\nevent: {ev.kind}\ndata: {json.dumps(event_json(ev), separators=(',', ':'))}\n\n"
