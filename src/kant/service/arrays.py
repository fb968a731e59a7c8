"""Job arrays (Slurm's ``sbatch --array``): ``0-99%10`` is 100 tasks, at most 10 running at once;
``1,3,5-7`` and ``0-15:4`` (a step) are other index sets. Each task is a job of its own, with its index
(``KANT_ARRAY_TASK_ID``) and its array's id (``KANT_ARRAY_JOB_ID``, the first task's job id) in its
environment; the API makes them in one commit, so their ids are consecutive and a task's array id is
its id minus its position in the array."""

from __future__ import annotations

import re

__all__ = ["MAX_ARRAY_TASKS", "format_array", "parse_array"]

#: the most tasks one array may have (a batch's limit too)
MAX_ARRAY_TASKS = 1000
_ITEM = re.compile(r"^(\d{1,9})(?:-(\d{1,9})(?::(\d{1,9}))?)?$")


def parse_array(text: str) -> tuple[list[int], int | None]:
    """``0-99%10`` -> (indices 0..99 in order, throttle 10); ValueError says what is wrong."""
    spec, _, throttle_text = text.strip().partition("%")
    throttle = None
    if throttle_text:
        if not throttle_text.isdigit() or int(throttle_text) < 1:
            raise ValueError(f"%{throttle_text}: the task limit must be a whole number >= 1")
        throttle = int(throttle_text)
    indices: list[int] = []
    seen: set[int] = set()
    for item in spec.split(","):
        m = _ITEM.match(item.strip())
        if m is None:
            raise ValueError(f"{item.strip()!r} is not an index, a range A-B or a range with a step A-B:S")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        step = int(m.group(3)) if m.group(3) is not None else 1
        if hi < lo or step < 1:
            raise ValueError(f"{item.strip()!r}: a range goes up, in steps >= 1")
        if (hi - lo) // step + 1 + len(indices) > MAX_ARRAY_TASKS:
            raise ValueError(f"more than {MAX_ARRAY_TASKS} tasks")
        for i in range(lo, hi + 1, step):
            if i in seen:
                raise ValueError(f"index {i} is given twice")
            seen.add(i)
            indices.append(i)
    return indices, throttle


def format_array(indices: list[int], throttle: int | None = None) -> str:
    """The index set as ranges, as ``squeue`` shows it: [0, 1, 2, 5] -> ``0-2,5`` (``%N`` added)."""
    parts: list[str] = []
    ordered = sorted(indices)
    k = 0
    while k < len(ordered):
        j = k
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[k]) if j == k else f"{ordered[k]}-{ordered[j]}")
        k = j + 1
    return ",".join(parts) + (f"%{throttle}" if throttle is not None else "")
