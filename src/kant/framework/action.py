"""The base of a cycle-level algorithm (:class:`Action`: allocate, backfill, preempt, ...) and the
lookup of a policy's actions by kind.

An action runs once per cycle, in the order the policy lists it, and drives the runner
(:class:`kant.framework.runner.Framework`): it asks for admission and placements and starts or
evicts jobs. It sits above the runner (it is handed one), while plugins sit below it: the runner
calls plugins, never actions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar

from pydantic import BaseModel

from kant.framework.plugin import NoArgs, Plugin

if TYPE_CHECKING:
    from kant.framework.context import CycleContext, SchedulerEnv
    from kant.framework.runner import Framework

__all__ = ["Action", "ActionLookup"]


class Action:
    """A cycle-level algorithm (allocate, backfill, preempt). Actions run in the configured order."""

    NAME: ClassVar[str] = ""
    Args: ClassVar[type[BaseModel]] = NoArgs
    #: the action may stop running jobs and queue them again (preempt, reclaim): how much of an
    #: interrupted run's work survives is then the execution model's business (checkpoints)
    EVICTS: ClassVar[bool] = False
    #: the action must see every instant where something changed, even with no job waiting (it
    #: keeps its own account of running jobs at each event, as ``las-repack``); see kant.instant
    EVERY_EVENT: ClassVar[bool] = False

    #: plugin kinds the action cannot run without (e.g. reclaim: a :class:`Guarantee`); a policy
    #: that lists the action without one is rejected when it is loaded (by the policy loader)
    NEEDS: ClassVar[tuple[type[Plugin], ...]] = ()

    def __init__(self, args: BaseModel | None = None) -> None:
        self.args = args if args is not None else self.Args()

    @classmethod
    def check_plugins(cls, args: BaseModel, plugins: Sequence[type[Plugin]]) -> tuple[str, str] | None:
        """Can the action run with these arguments next to the policy's plugin classes (in policy
        order)? None if it can, else (key path below the action's entry, e.g. ``args.rank_by``; a
        one-line reason). Called when a policy is loaded, after the policy loader has checked
        :attr:`NEEDS` (:func:`kant.config.policy.parse_policy`). Default: nothing more to check."""
        return None

    def attach(self, fw: Framework) -> None:
        """Called once when the scheduler is built, after every plugin's setup: find the plugins the
        action works with here (:meth:`Framework.plugin <kant.framework.runner.Framework.plugin>`),
        never per cycle or per job. Default: nothing."""

    def notes(self) -> list[str]:
        """Caveats about the run so far, one line each, for its report (e.g. an approximation the
        action had to make); the simulator puts them in ``SimResult.info["notes"]``. Default: none."""
        return []

    def setup(self, env: SchedulerEnv) -> None:
        pass

    def jobs_added(self, env: SchedulerEnv, start: int) -> None:
        """As :meth:`Plugin.jobs_added`: jobs ``start ..`` were added to the store."""

    def execute(self, ctx: CycleContext, fw: Framework) -> None:
        raise NotImplementedError

    def idle(self, ctx: CycleContext) -> bool:
        """Optional fast path, for a policy whose every action has one (and that has no admission
        plugin): called instead of :meth:`execute`, action by action (the last
        first), when the cluster state has not changed since the last cycle (jobs may have joined or
        left the queue); the cycle is idle when every action says so, else it runs in full (an
        action's test may then not have been asked). Return
        True only if ``execute`` would now start nothing and change nothing but ``ctx.reasons``
        (which this call must then leave as ``execute`` would) and caches of this action's own
        that ``execute`` would only bring up to date; False runs the full cycle. ``ctx`` has this cycle's
        time, state, queue and reasons, but its statement and started/evicted/wakeup lists are the
        last cycle's: do not change the state or use them. With a queue order that changes with
        time (``Framework.dynamic``) a test must not depend on the order. The default never claims
        idleness."""
        return False




A = TypeVar("A", bound=Action)


class ActionLookup(Protocol):
    """Anything that finds a policy's actions by kind: a :class:`~kant.scheduler.Scheduler` or a
    :class:`~kant.sim.simulator.Simulator` (``sim.action(Backfill)``)."""

    def action(self, kind: type[A]) -> A | None: ...
