"""Where the live service's jobs run: one small interface (:class:`Executor`), one module per engine."""

from kant.service.executors.base import ExecEvent, Executor, Launch
from kant.service.executors.simulated import SimulatedExecutor

__all__ = ["ExecEvent", "Executor", "Launch", "SimulatedExecutor", "make_executor"]


def make_executor(name: str, *, speed: float = 1.0) -> Executor:
    """The executor called ``name`` (``simulated``)."""
    if name == "simulated":
        return SimulatedExecutor()
    raise ValueError(f"unknown executor {name!r}; known: simulated")
