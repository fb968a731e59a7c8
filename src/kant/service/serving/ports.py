"""The ports kant hands to replicas of services with ``port: 0``: one free port per replica on its
node's address, tracked per address (not per node name: several nodes may share one address, as
several raylets on one machine do), so that two replicas at one address never get the same one.
Each book starts at a random port of the range: two kant services on one machine (each checks that
nothing listens on a port before handing it out, but a replica binds it only later) then do not
both hand out the range's first ports at once."""

from __future__ import annotations

import random
import threading

from kant.service.executors.base import LOCAL_HOST
from kant.service.executors.local import port_taken

__all__ = ["PortBook", "NoFreePort", "FIRST_PORT", "LAST_PORT"]

#: the range kant picks replicas' ports from (below Linux's ephemeral range, 32768-60999)
FIRST_PORT, LAST_PORT = 20000, 29999


class NoFreePort(Exception):
    """Every port of the range is handed out (or listened on) at the node's address."""


class PortBook:
    """Ports handed out, per address (thread-safe)."""

    def __init__(self, first: int = FIRST_PORT, last: int = LAST_PORT) -> None:
        self.first, self.last = first, last
        self._used: dict[str, set[int]] = {}
        self._cursor: dict[str, int] = {}
        self._start = random.SystemRandom().randrange(last - first + 1) if last >= first else 0  # (os entropy)
        self._lock = threading.Lock()

    def pick(self, node: str, host: str) -> int:
        """A port not handed out at ``host``, the address of ``node`` (and, on this machine, not
        listened on); it is booked until :meth:`release`."""
        span = self.last - self.first + 1
        with self._lock:
            used = self._used.setdefault(host, set())
            start = self._cursor.get(host, self._start)
            for k in range(span):
                port = self.first + (start + k) % span
                if port in used or (host == LOCAL_HOST and port_taken(port, host)):
                    continue
                used.add(port)
                self._cursor[host] = (start + k + 1) % span
                return port
        raise NoFreePort(f"no free port in {self.first}-{self.last} on node {node} ({host})")

    def release(self, host: str, port: int) -> None:
        with self._lock:
            self._used.get(host, set()).discard(port)

    def used(self, host: str) -> set[int]:
        with self._lock:
            return set(self._used.get(host, ()))
