"""The live autoscaler of one service: the simulator's :class:`kant.inference.autoscaler.Hpa`, called
every ``period_s`` wall seconds with the load the request route measured.

The offered load in replicas is ``arrival_rate(window) / capacity_rps`` when the service declares
``capacity_rps``, else ``inflight / concurrency`` (requests at once over what one replica serves at
once), exactly the quantity the simulator gives the same ``Hpa`` from its traffic. A service with
neither, or without a :class:`~kant.service.serving.signals.LoadSignals` to read, is not scaled.
"""

from __future__ import annotations

import json

from kant.inference.autoscaler import Hpa, HpaConfig
from kant.service.db.services import ServiceRow
from kant.service.serving.signals import LoadSignals

__all__ = ["LiveAutoscaler", "offered_load"]


def offered_load(row: ServiceRow, signals: LoadSignals, window_s: float) -> float | None:
    """The service's offered load in replicas now (None: it declares no load signal)."""
    if row.capacity_rps is not None:
        return signals.arrival_rate(row.id, window_s) / row.capacity_rps
    if row.concurrency is not None:
        return signals.inflight(row.id) / row.concurrency
    return None


class LiveAutoscaler:
    """One service's autoscaler on the live path (see the module docstring); built again when the
    service's autoscaler settings or bounds change."""

    def __init__(self, row: ServiceRow, started: float) -> None:
        assert row.autoscaler is not None
        self.key = self.key_of(row)
        self.config = HpaConfig.model_validate(json.loads(row.autoscaler))
        self.hpa = Hpa(self.config, min_replicas=row.min_replicas, max_replicas=row.max_replicas,
                       initial=row.replicas)
        self.next_tick = started + self.config.period_s
        self.last_load: float | None = None

    @staticmethod
    def key_of(row: ServiceRow) -> tuple[str | None, int, int]:
        return row.autoscaler, row.min_replicas, row.max_replicas

    def tick(self, now: float, row: ServiceRow, signals: LoadSignals | None) -> int | None:
        """At wall time ``now`` (monotonic seconds): the replica count decided, when a period has
        passed and there is a load to decide from; else None."""
        if now < self.next_tick:
            return None
        while self.next_tick <= now:
            self.next_tick += self.config.period_s
        if signals is None:
            return None
        load = offered_load(row, signals, self.config.window)
        if load is None:
            return None
        self.last_load = load
        return self.hpa.decide(now, load, current=row.replicas)
