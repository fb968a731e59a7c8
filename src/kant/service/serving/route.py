"""Which replica takes a request, and the bounded queue of requests that wait for one (:class:`Router`).

A request of a service goes to the ready replica (:meth:`Endpoints.ready`: ready and not draining)
with the fewest requests outstanding at it (ties: the lowest job id), among those with fewer than
``replica_limit`` outstanding (0: no limit). When none is free, it waits in the service's queue, in
arrival order, for at most ``queue_timeout`` seconds; a request that finds ``max_queue`` requests
waiting, or that waits out its timeout, is refused with :class:`NoReplica` (answered 503 with
``Retry-After``): a request never hangs. Queued requests go on when a request at a replica ends
(:meth:`Router.release`) and when the registry changes (a replica became ready: the registry's
writer calls :meth:`Endpoints.subscribe`'s listener on its own thread, which hands the news to the
event loop with ``call_soon_threadsafe``).

Draining a replica only stops new picks: requests already at it finish there.

The router runs on one asyncio event loop (uvicorn's): every method but the registry's listener is
called on it, so its queues need no lock. The counts of requests at each replica are
:class:`~kant.service.serving.measure.Traffic`'s (the one owner of the route's counts).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque

from kant.service.errors import NoReplica
from kant.service.serving.endpoints import Endpoint, Endpoints
from kant.service.serving.measure import Traffic

__all__ = ["Router"]


class Router:
    """Least-outstanding balancing over a service's ready replicas, with a bounded queue per service."""

    def __init__(self, endpoints: Endpoints, traffic: Traffic, *, max_queue: int, queue_timeout: float,
                 replica_limit: int = 0) -> None:
        if max_queue < 0 or not queue_timeout > 0 or replica_limit < 0:
            raise ValueError("max_queue >= 0, queue_timeout > 0 and replica_limit >= 0")
        self.endpoints = endpoints
        self.traffic = traffic
        self.max_queue = max_queue
        self.queue_timeout = queue_timeout
        self.replica_limit = replica_limit
        self._queues: dict[int, deque[asyncio.Future[Endpoint]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    # --- life ---------------------------------------------------------------------------------------
    def open(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start on ``loop`` (the registry's changes wake queued requests from now on)."""
        self._loop = loop
        self._closed = False
        self.endpoints.subscribe(self._registry_changed)

    def close(self) -> None:
        """Refuse every queued request (the process stops); later changes of the registry are ignored."""
        self._closed = True
        for sid, q in self._queues.items():
            while q:
                fut = q.popleft()
                if not fut.done():
                    fut.set_exception(NoReplica(f"service {sid}: kant is stopping", retry_after=1.0))

    def _registry_changed(self, service_id: int) -> None:
        """The registry's listener (any thread): dispatch the service's queue on the event loop."""
        loop = self._loop
        if self._closed or loop is None or not self._queues.get(service_id):
            return
        with contextlib.suppress(RuntimeError):  # (the loop is closed: the process stops)
            loop.call_soon_threadsafe(self._dispatch, service_id)

    # --- a request ------------------------------------------------------------------------------------
    def pick(self, service_id: int) -> Endpoint | None:
        """The ready replica with the fewest outstanding requests under the limit (ties: the lowest
        job id), or None."""
        limit = self.replica_limit
        at = self.traffic.at
        best: Endpoint | None = None
        best_n = 0
        for ep in self.endpoints.ready(service_id):  # in job order
            n = at(service_id, ep.job_id)
            if (not limit or n < limit) and (best is None or n < best_n):
                best, best_n = ep, n
        return best

    async def acquire(self, service_id: int) -> Endpoint:
        """A replica for one request of the service (counted at it until :meth:`release`); waits in
        the queue when none is free; :class:`NoReplica` when the queue is full or the wait times out."""
        q = self._queues.get(service_id)
        if not q:
            ep = self.pick(service_id)
            if ep is not None:
                self.traffic.started(service_id, ep.job_id)
                return ep
            if q is None:
                q = self._queues[service_id] = deque()
        if self._closed or len(q) >= self.max_queue:
            self.traffic.left_queue(service_id)
            why = "kant is stopping" if self._closed else (
                f"its queue is full ({self.max_queue} requests wait for a replica)" if self.max_queue
                else "no replica is free and the route keeps no queue")
            raise NoReplica(f"service {service_id}: {why}", retry_after=1.0)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Endpoint] = loop.create_future()
        q.append(fut)
        timer = loop.call_later(self.queue_timeout, self._expire, service_id, fut)
        try:
            return await fut
        except asyncio.CancelledError:  # the client went away while it waited
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.release(service_id, fut.result())  # (it had just been given a replica)
            else:
                self._forget(service_id, fut)
                self.traffic.left_queue(service_id)
            raise
        except NoReplica:
            self.traffic.left_queue(service_id)
            raise
        finally:
            timer.cancel()

    def release(self, service_id: int, ep: Endpoint) -> None:
        """A request :meth:`acquire` gave ``ep`` is over: the next queued one may go."""
        self.traffic.done_at(service_id, ep.job_id)
        if self._queues.get(service_id):
            self._dispatch(service_id)

    # --- the queue -------------------------------------------------------------------------------------
    def _dispatch(self, service_id: int) -> None:
        """Hand free replicas to the queued requests, first come first served."""
        q = self._queues.get(service_id)
        while q:
            if q[0].done():
                q.popleft()
                continue
            ep = self.pick(service_id)
            if ep is None:
                return
            fut = q.popleft()
            self.traffic.started(service_id, ep.job_id)
            fut.set_result(ep)

    def _expire(self, service_id: int, fut: asyncio.Future[Endpoint]) -> None:
        if fut.done():
            return
        self._forget(service_id, fut)
        ready = self.endpoints.ready(service_id)
        why = (f"all {len(ready)} ready replicas are busy" if ready else "no replica is ready")
        fut.set_exception(NoReplica(f"service {service_id}: {why} after {self.queue_timeout:g} s in its queue",
                                    retry_after=max(1.0, math.ceil(self.queue_timeout / 2))))

    def _forget(self, service_id: int, fut: asyncio.Future[Endpoint]) -> None:
        q = self._queues.get(service_id)
        if q is not None:
            with contextlib.suppress(ValueError):
                q.remove(fut)

    def queued(self, service_id: int) -> int:
        """Requests of the service waiting for a replica now."""
        q = self._queues.get(service_id)
        return 0 if q is None else sum(not f.done() for f in q)
