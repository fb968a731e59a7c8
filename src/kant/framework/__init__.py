"""The contract for policy authors: what a plugin or action needs, re-exported here (imported
lazily on first use, PEP 562, so that importing a submodule stays cheap).

Extension points (one base class per way a plugin takes part): :class:`QueueSort`, :class:`Admit`,
:class:`Filter`, :class:`Score` / :class:`ClassScore`, :class:`Place`, :class:`JobListener`,
:class:`Rank` (preempt's ``rank_by``), :class:`Guarantee` (reclaim), :class:`CoScheduling`
(inference-reclaim); cycle algorithms subclass :class:`Action`. Register them with
:func:`register_plugin` / :func:`register_action`. docs/architecture.md has a walk-through.
"""

from __future__ import annotations

# no `typing` import at run time: it alone costs more than the rest of `import kant` (mypy reads a
# module-level TYPE_CHECKING = False as true)
from kant import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:

    from kant.framework.action import Action, ActionLookup
    from kant.framework.context import CycleContext, RunningJob, SchedulerEnv
    from kant.framework.plugin import (
        MAX_SCORE,
        Admit,
        BoolArray,
        ClassScore,
        CoScheduling,
        Filter,
        FloatArray,
        Guarantee,
        IntArray,
        JobListener,
        NoArgs,
        Place,
        Placer,
        Plugin,
        PluginLookup,
        QueueSort,
        Rank,
        Score,
    )
    from kant.framework.registry import register_action, register_plugin
    from kant.framework.runner import Framework
    from kant.framework.statement import Binder, Statement
    from kant.framework.status import SUCCESS, Code, Status
    from kant.model.state import Placement

__all__ = [
    "MAX_SCORE",
    "SUCCESS",
    "Action",
    "ActionLookup",
    "Admit",
    "Binder",
    "BoolArray",
    "ClassScore",
    "CoScheduling",
    "Code",
    "CycleContext",
    "Filter",
    "FloatArray",
    "Framework",
    "Guarantee",
    "IntArray",
    "JobListener",
    "NoArgs",
    "Place",
    "Placement",
    "Placer",
    "Plugin",
    "PluginLookup",
    "QueueSort",
    "Rank",
    "RunningJob",
    "SchedulerEnv",
    "Score",
    "Statement",
    "Status",
    "register_action",
    "register_plugin",
]

_PLUGIN = "kant.framework.plugin"
#: public name -> the module that defines it
_WHERE = {
    **dict.fromkeys(["CycleContext", "RunningJob", "SchedulerEnv"], "kant.framework.context"),
    **dict.fromkeys(["Action", "ActionLookup"], "kant.framework.action"),
    **dict.fromkeys(["MAX_SCORE", "Admit", "BoolArray", "ClassScore", "CoScheduling", "Filter", "FloatArray",
                     "Guarantee", "IntArray", "JobListener", "NoArgs", "Place", "Placer", "Plugin", "PluginLookup",
                     "QueueSort", "Rank", "Score"], _PLUGIN),
    **dict.fromkeys(["register_action", "register_plugin"], "kant.framework.registry"),
    "Framework": "kant.framework.runner",
    **dict.fromkeys(["Binder", "Statement"], "kant.framework.statement"),
    **dict.fromkeys(["SUCCESS", "Code", "Status"], "kant.framework.status"),
    "Placement": "kant.model.state",
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())
