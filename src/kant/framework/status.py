"""Results of extension points as values: a code, a readable reason, and who said it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

__all__ = ["Code", "Status", "SUCCESS"]


class Code(IntEnum):
    SUCCESS = 0
    UNSCHEDULABLE = 1  # does not fit now; may fit later
    UNRESOLVABLE = 2  # can never fit on this cluster under this policy
    WAIT = 3  # admitted but held back (e.g. a reservation)
    ERROR = 4


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reason: str = ""
    plugin: str = ""
    #: ``code`` is SUCCESS (set once at construction: read at every arrival, a property would be a call)
    ok: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _set_ok(self, self.code == Code.SUCCESS)

    def __str__(self) -> str:
        if self.ok:
            return "ok"
        who = f"[{self.plugin}] " if self.plugin else ""
        return f"{who}{self.reason}"

    @staticmethod
    def unschedulable(reason: str, plugin: str = "") -> Status:
        return Status(Code.UNSCHEDULABLE, reason, plugin)

    @staticmethod
    def unresolvable(reason: str, plugin: str = "") -> Status:
        return Status(Code.UNRESOLVABLE, reason, plugin)


_set_ok = vars(Status)["ok"].__set__  # the slot's own setter (the class is frozen)

SUCCESS = Status()
