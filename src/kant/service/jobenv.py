"""A job's environment as Slurm's ``sbatch`` gives it: the time limit (``--time``), the variables
(``--export``) and their meaning, in one place for the API and the CLI (docs/service.md, "Job
environment").

``--time``: ``MINUTES``, ``MINUTES:SECONDS``, ``HOURS:MINUTES:SECONDS``, ``DAYS-HOURS``,
``DAYS-HOURS:MINUTES`` or ``DAYS-HOURS:MINUTES:SECONDS`` (Slurm's forms), or ``UNLIMITED``.

``--export``: ``ALL`` (the submitter's whole environment, as the client sends it), ``NONE`` (none of
it: only what kant sets), or a comma-separated list of ``NAME`` (that variable of the submitter's
environment, skipped when it has none) and ``NAME=value``; a list that starts with ``ALL`` adds to the
whole environment, one without ``ALL`` gives only what it lists (Slurm's meaning).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

__all__ = ["parse_time", "parse_export", "resolve_export", "submitter_environment", "TIME_FORMS", "NOT_SENT"]

#: the submitter's variables never sent with a job (kant's own credentials: a job's environment is
#: stored, and shown to its tenant)
NOT_SENT = frozenset({"KANT_TOKEN", "KANT_ADMIN_TOKEN"})

TIME_FORMS = "MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NUM = r"(\d+)"


def parse_time(text: str) -> float | None:
    """Seconds of a Slurm time limit (None: ``UNLIMITED``/``INFINITE``); ValueError saying the forms."""
    t = text.strip()
    if t.upper() in ("UNLIMITED", "INFINITE"):
        return None
    days = 0
    m = re.fullmatch(rf"{_NUM}-(.+)", t)
    if m:
        days, rest = int(m.group(1)), m.group(2).split(":")
        if len(rest) > 3 or not all(p.isdigit() for p in rest):
            raise ValueError(f"{text!r} is not a time limit ({TIME_FORMS})")
        h, mi, s = ([int(p) for p in rest] + [0, 0])[:3]
    else:
        parts = t.split(":")
        if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
            raise ValueError(f"{text!r} is not a time limit ({TIME_FORMS})")
        nums = [int(p) for p in parts]
        h, mi, s = (0, nums[0], 0) if len(nums) == 1 else (0, nums[0], nums[1]) if len(nums) == 2 else tuple(nums)
    seconds = float(((days * 24 + h) * 60 + mi) * 60 + s)
    if seconds <= 0 or not math.isfinite(seconds):
        raise ValueError(f"{text!r}: a time limit must be more than 0")
    return seconds


def parse_export(spec: str) -> tuple[bool, list[tuple[str, str | None]]]:
    """``(all, items)`` of an ``--export`` spec: whether the whole environment goes, and the names
    (value None: from the environment) or ``NAME=value`` pairs; ValueError naming the bad item."""
    s = spec.strip()
    if s.upper() == "NONE":
        return False, []
    if not s:
        raise ValueError("is empty (ALL, NONE, or NAME[=value],...)")
    items: list[tuple[str, str | None]] = []
    every = False
    for k, item in enumerate(s.split(",")):
        if k == 0 and item.upper() == "ALL":
            every = True
            continue
        name, eq, value = item.partition("=")
        if item.upper() in ("ALL", "NONE"):
            raise ValueError(f"{item} may only come alone (or ALL first, then variables)")
        if not _NAME.match(name):
            raise ValueError(f"{item!r} is not NAME or NAME=value (a name: letters, digits and _, not first a digit)")
        items.append((name, value if eq else None))
    return every, items


def submitter_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What of the submitter's environment ``kant submit`` may send: all but :data:`NOT_SENT`."""
    return {k: v for k, v in environ.items() if k not in NOT_SENT}


def resolve_export(spec: str | None, environment: Mapping[str, str] | None) -> dict[str, str] | None:
    """The job's environment for ``--export spec`` given the submitter's ``environment``; ``spec``
    None: the environment as sent (None when none was sent: the node's own)."""
    env = dict(environment or {})
    if spec is None:
        return None if environment is None else env
    every, items = parse_export(spec)
    out = dict(env) if every else {}
    for name, value in items:
        if value is not None:
            out[name] = value
        elif name in env:
            out[name] = env[name]
    return out
