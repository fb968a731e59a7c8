"""The readiness prober of the live replicas: a thread that asks each replica's readiness path
(``GET http://host:port/ready_path``, 2xx = ready) every ``every_s`` seconds, hands each result to the
:class:`~kant.service.serving.replicas.ServingRoom` (which marks the endpoint ready or not and decides
verdicts), and wakes the scheduling loop when the room has something to act on (a replica ready or
given up, timers running). The loop's thread never waits on a replica."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Protocol

import httpx

__all__ = ["Prober", "Probed", "ProbeTarget"]


class Probed(Protocol):
    @property
    def url(self) -> str:
        """The readiness URL (``http://host:port/ready_path``)."""
        ...


class ProbeTarget(Protocol):
    """What the prober uses of the room (:class:`kant.service.serving.replicas.ServingRoom`)."""

    def to_probe(self) -> Sequence[Probed]: ...

    def probed(self, replica: Probed, ok: bool, now: float) -> bool: ...

    def busy(self) -> bool: ...

    def wake(self) -> None: ...


class Prober:
    def __init__(self, room: ProbeTarget, every_s: float = 0.5) -> None:
        self.room = room
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kant-prober", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        timeout = httpx.Timeout(min(1.0, max(self.every_s, 0.1)))
        with httpx.Client(timeout=timeout, trust_env=False) as client:
            while not self._stop.wait(self.every_s):
                self.probe_once(client)

    def probe_once(self, client: httpx.Client) -> None:
        """Ask every replica once; wake the loop if the room has work."""
        act = False
        for replica in self.room.to_probe():
            if self._stop.is_set():
                return
            try:
                ok = 200 <= client.get(replica.url).status_code < 300
            except httpx.HTTPError:
                ok = False
            act = self.room.probed(replica, ok, time.monotonic()) or act
        if act or self.room.busy():
            self.room.wake()
