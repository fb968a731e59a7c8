"""A job the database has accepted, on its way to the scheduling loop (:class:`Arrival`; its own module so
that the rooms of :mod:`kant.service.live` that hold arrivals, the live state and the dependency holds,
share it without importing each other)."""

from __future__ import annotations

from dataclasses import dataclass

from kant.service.db.jobs import NewJob

__all__ = ["Arrival"]


@dataclass(frozen=True, slots=True)
class Arrival:
    """A job the database has accepted: its id, what was submitted, and its submit time."""

    id: int
    job: NewJob
    submit_time: float
