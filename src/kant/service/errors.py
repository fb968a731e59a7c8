"""The live service's domain errors: what went wrong, in the service's words, with no HTTP in them.

Everything below the API (the database, the loop, the twin, the service's use cases) raises these;
the API alone turns them into HTTP answers, in one table (``kant.service.api.errors``). Each class
says which kind of failure it is, so that table, not the raiser, decides the status code.
"""

from __future__ import annotations

from kant.errors import KantError

__all__ = [
    "Busy",
    "Conflict",
    "DatabaseError",
    "Fenced",
    "Forbidden",
    "Invalid",
    "NotFound",
    "NoReplica",
    "NotLeader",
    "Rejected",
    "ReplicaFailed",
    "ReplicaTimeout",
    "ServiceError",
    "TooLong",
    "TurnLost",
]


class ServiceError(KantError):
    """Base class of the live service's domain errors."""


class DatabaseError(ServiceError):
    """A database operation failed (connection, lock timeout, bad state)."""


class Conflict(DatabaseError):
    """The row to create already exists."""


class NotFound(DatabaseError):
    """A row (a job, a node, a service, a tenant) the operation needs does not exist, or the caller
    may not see it."""


class Fenced(DatabaseError):
    """The caller's leader epoch is no longer the current one; nothing was written."""


class TurnLost(DatabaseError):
    """The scheduling loop could not write a turn's changes (disk full, no server): the state in memory
    is ahead of the database, so the loop stops and a restart rebuilds from the database."""


class Invalid(ServiceError):
    """A command the current state does not allow (a node that still runs jobs, a clock moved back),
    with the reason."""


class Rejected(ServiceError):
    """A request that can never be met as asked (no node could hold it, a bad scenario); ``field``
    names the part of the request at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = message


class Forbidden(ServiceError):
    """The caller's token may not do this (a tenant acting for another tenant, a tenant asking for
    an admin's page)."""


class NotLeader(ServiceError):
    """This service is a standby (or stopped leading meanwhile); ``leader_url`` is where the leader
    is, and ``retry_after`` seconds when to try again, when known."""

    def __init__(self, message: str, leader_url: str | None = None, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.leader_url = leader_url
        self.retry_after = retry_after


class Busy(ServiceError):
    """A request refused for now; ``retry_after`` seconds is when to try again."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NoReplica(ServiceError):
    """An inference service's request found no replica to take it: none was ready (or free) within
    the route's queue timeout, or the service's queue was full; ``retry_after`` seconds is when to try
    again."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ReplicaFailed(ServiceError):
    """The replica a request was sent to could not be reached or broke the connection (the message
    names it)."""


class ReplicaTimeout(ReplicaFailed):
    """The replica a request was sent to did not answer within the route's timeout."""


class TooLong(ServiceError):
    """Work stopped at its hard limit without an answer (a what-if whose worker was stopped)."""
