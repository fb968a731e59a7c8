"""Where the live service's jobs run: one small interface (:class:`Executor`, in :mod:`.base`), one
module per engine, and :data:`EXECUTORS`, the table of them.

Adding an executor is one module and one line: write ``kant/service/executors/<name>.py`` with the
executor class (the :class:`Executor` methods, a ``from_settings`` classmethod and a
``discovers_nodes`` class attribute: :class:`ExecutorClass`) and, if it has settings, their model
(an :class:`ExecutorSettings`), then add its line to :data:`EXECUTORS`. ``kant serve --executor``
then offers it, with one option per field of its settings (docs/architecture.md, "Adding an
executor"). Both are named ``"module:Name"`` and imported on first use: an engine's own library
(Ray) is imported by its executor's constructor, never when the table is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from kant.service.executors.base import (
    ExecEvent,
    Executor,
    ExecutorClass,
    ExecutorSettings,
    Launch,
    LogChunk,
    NodeEvent,
    Option,
)
from kant.service.executors.simulated import SimulatedExecutor

__all__ = ["EXECUTORS", "ExecEvent", "Executor", "ExecutorClass", "ExecutorEntry", "ExecutorSettings", "Launch",
           "LogChunk", "NodeEvent", "Option", "SimulatedExecutor", "make_executor"]


def _resolve(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(import_module(module), name)


@dataclass(frozen=True)
class ExecutorEntry:
    """One line of :data:`EXECUTORS`: the executor class and its settings model, each as
    ``"module:Name"``, and what it does in a few words (``kant serve --executor``'s help: "Where jobs
    run: NAME (ABOUT) or ...")."""

    executor: str
    settings: str
    about: str

    def load(self) -> ExecutorClass:
        cls: ExecutorClass = _resolve(self.executor)
        return cls

    def load_settings(self) -> type[ExecutorSettings]:
        model = _resolve(self.settings)
        if not (isinstance(model, type) and issubclass(model, ExecutorSettings)):
            raise TypeError(f"{self.settings} is not an ExecutorSettings model")
        return model


#: every executor ``kant serve --executor`` offers, by name, in the order its help lists them
EXECUTORS: Mapping[str, ExecutorEntry] = {
    "simulated": ExecutorEntry("kant.service.executors.simulated:SimulatedExecutor",
                               "kant.service.executors.base:ExecutorSettings", "a job runs for its duration_s"),
    "ray": ExecutorEntry("kant.service.executors.ray_exec:RayExecutor", "kant.service.executors.ray_exec:RaySettings",
                         "each worker a detached Ray actor on the node kant chose; docs/ray.md"),
}


def make_executor(name: str, settings: ExecutorSettings | None = None) -> Executor:
    """The executor called ``name`` in :data:`EXECUTORS`, with ``settings`` (an instance of its
    settings model; None: the model's defaults)."""
    entry = EXECUTORS.get(name)
    if entry is None:
        raise ValueError(f"unknown executor {name!r}; known: {', '.join(EXECUTORS)}")
    model = entry.load_settings()
    if settings is None:
        settings = model()
    elif type(settings) is not model:
        raise TypeError(f"executor {name!r} takes {model.__name__}, not {type(settings).__name__}")
    return entry.load().from_settings(settings)
