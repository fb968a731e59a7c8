"""Where the live service's jobs run: one small interface (:class:`Executor`), one module per engine
(``simulated``; ``ray`` in :mod:`kant.service.executors.ray_exec`, imported only when asked for)."""

from __future__ import annotations

from pathlib import Path

from kant.service.executors.base import ExecEvent, Executor, Launch, LogChunk, NodeEvent
from kant.service.executors.simulated import SimulatedExecutor

__all__ = ["ExecEvent", "Executor", "Launch", "LogChunk", "NodeEvent", "SimulatedExecutor", "make_executor",
           "EXECUTORS"]

EXECUTORS = ("simulated", "ray")


def make_executor(name: str, *, ray_address: str = "auto", log_dir: Path = Path("kant-logs"),
                  checkpoint_dir: Path = Path("kant-checkpoints"), start_timeout: float = 60.0) -> Executor:
    """The executor called ``name``: ``simulated``, or ``ray`` (connects to the Ray cluster at
    ``ray_address``; workers' output under ``log_dir``, each job's checkpoint folder under
    ``checkpoint_dir``)."""
    if name == "simulated":
        return SimulatedExecutor()
    if name == "ray":
        from kant.service.executors.ray_exec import RayExecutor

        return RayExecutor(ray_address, log_dir=log_dir, checkpoint_dir=checkpoint_dir, start_timeout=start_timeout)
    raise ValueError(f"unknown executor {name!r}; known: {', '.join(EXECUTORS)}")
