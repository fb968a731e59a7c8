"""kant: a unified scheduler and trace-driven simulator for AI clusters.

The public API, imported lazily (``import kant`` loads nothing else; each name is imported on first
use, PEP 562)::

    import kant

    policy = kant.load_policy("kant")                 # a bundled policy name or a YAML file
    jobs = kant.load_trace("philly")                  # a trace file or a bundled trace name
    cluster = kant.load_cluster("philly")
    result = kant.Simulator(cluster, jobs, policy).run()
    metrics = kant.summarize(result)

``kant.framework`` has what a plugin author needs (docs/architecture.md).
"""

from __future__ import annotations

# no `typing` import at run time: it alone costs more than the rest of `import kant` (mypy reads a
# module-level TYPE_CHECKING = False as true)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from kant.config.policy import Policy, load_policy
    from kant.metrics.summary import summarize
    from kant.scheduler import Scheduler
    from kant.sim.simulator import Simulator, simulate
    from kant.traces.inventory import load_cluster
    from kant.traces.registry import load_trace

__version__ = "0.1.0"

__all__ = ["Policy", "Scheduler", "Simulator", "load_cluster", "load_policy", "load_trace", "simulate", "summarize"]

#: public name -> the module that defines it
_WHERE = {
    "Policy": "kant.config.policy",
    "Scheduler": "kant.scheduler",
    "Simulator": "kant.sim.simulator",
    "load_cluster": "kant.traces.inventory",
    "load_policy": "kant.config.policy",
    "load_trace": "kant.traces.registry",
    "simulate": "kant.sim.simulator",
    "summarize": "kant.metrics.summary",
}


def lazy_exports(
    package: str, where: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's PEP 562 ``__getattr__`` and ``__dir__`` for public names imported on first use:
    ``where`` maps each name to the module that defines it; ``namespace`` is the package's
    ``globals()`` (a name, once imported, is put there so later lookups skip ``__getattr__``)."""

    def __getattr__(name: str) -> Any:
        from importlib import import_module

        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *where])

    return __getattr__, __dir__


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())
