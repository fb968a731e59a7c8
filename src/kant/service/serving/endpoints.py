"""Where each service's replicas listen, and which of them take requests.

One registry, shared by two sides on different threads:

- the replicas' lifecycle (the loop's serving room: launches, readiness probes, draining, stops)
  writes it: :meth:`Endpoints.add` when a replica's run is launched at ``host:port``,
  :meth:`Endpoints.set_ready` after each probe, :meth:`Endpoints.drain` before a replica is stopped
  (scale down, rolling update, reclaim), :meth:`Endpoints.remove` once its run ended;
- the request route reads it: :meth:`Endpoints.ready` lists the replicas that take new requests (ready
  and not draining), and :meth:`Endpoints.subscribe` tells it (from the writer's thread) that the set
  changed, so requests queued while no replica was ready go on at once.

Every method is thread-safe; a reader gets immutable :class:`Endpoint` values.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

__all__ = ["Endpoint", "Endpoints"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One replica's run of a service: the job (and run) behind it and where it listens."""

    service_id: int
    job_id: int
    run: int
    host: str
    port: int
    ready: bool = False  # its readiness path answered 2xx at the last probe
    draining: bool = False  # it is being stopped: no new requests

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def takes_requests(self) -> bool:
        return self.ready and not self.draining


class Endpoints:
    """The registry (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_service: dict[int, dict[int, Endpoint]] = {}
        self._listeners: list[Callable[[int], None]] = []
        self.version = 0  # bumped on every change

    # --- written by the replicas' lifecycle ----------------------------------------------------------
    def add(self, endpoint: Endpoint) -> None:
        """A replica's run was launched (not ready yet unless ``endpoint.ready``); replaces the job's
        earlier run."""
        with self._lock:
            self._by_service.setdefault(endpoint.service_id, {})[endpoint.job_id] = endpoint
        self._changed(endpoint.service_id)

    def set_ready(self, service_id: int, job_id: int, ready: bool) -> bool:
        """The result of a probe; True when it changed the replica's readiness."""
        return self._update(service_id, job_id, ready=ready)

    def drain(self, service_id: int, job_id: int) -> bool:
        """Send the replica no new requests (those it has go on); True when it was taking them."""
        return self._update(service_id, job_id, draining=True)

    def remove(self, service_id: int, job_id: int) -> Endpoint | None:
        """The replica's run ended: forget it (its endpoint, or None if unknown)."""
        with self._lock:
            gone = self._by_service.get(service_id, {}).pop(job_id, None)
            if gone is not None and not self._by_service[service_id]:
                del self._by_service[service_id]
        if gone is not None:
            self._changed(service_id)
        return gone

    def _update(self, service_id: int, job_id: int, **fields: bool) -> bool:
        with self._lock:
            eps = self._by_service.get(service_id, {})
            old = eps.get(job_id)
            if old is None:
                return False
            new = replace(old, **fields)  # type: ignore[arg-type]
            if new == old:
                return False
            eps[job_id] = new
            before = old.takes_requests
        self._changed(service_id)
        return before != new.takes_requests

    def _changed(self, service_id: int) -> None:
        with self._lock:
            self.version += 1
            listeners = list(self._listeners)
        for fn in listeners:
            fn(service_id)

    # --- read by the request route, the API and the dashboard -------------------------------------------
    def ready(self, service_id: int) -> list[Endpoint]:
        """The replicas that take new requests now, in job order."""
        with self._lock:
            eps = self._by_service.get(service_id, {})
            return [e for _, e in sorted(eps.items()) if e.takes_requests]

    def all(self, service_id: int) -> list[Endpoint]:
        """Every known replica run of the service (starting, ready, draining), in job order."""
        with self._lock:
            return [e for _, e in sorted(self._by_service.get(service_id, {}).items())]

    def get(self, service_id: int, job_id: int) -> Endpoint | None:
        with self._lock:
            return self._by_service.get(service_id, {}).get(job_id)

    def subscribe(self, listener: Callable[[int], None]) -> None:
        """``listener(service_id)`` is called after every change (on the writer's thread: be quick)."""
        with self._lock:
            self._listeners.append(listener)
