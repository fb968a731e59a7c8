"""What the request route measures of a service's traffic, as the live autoscaler reads it.

The request route implements :class:`LoadSignals` (one object for every service); the live
autoscaler turns its arrival rate into the offered load in replicas that
:class:`kant.inference.autoscaler.Hpa` decides from, exactly as the simulator does from its traffic.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["LoadSignals"]


class LoadSignals(Protocol):
    def arrival_rate(self, service_id: int, window_s: float) -> float:
        """Requests per second that arrived for the service over the last ``window_s`` wall seconds."""
        ...

    def inflight(self, service_id: int) -> int:
        """Requests of the service accepted and not yet answered (queued or at a replica) now."""
        ...
