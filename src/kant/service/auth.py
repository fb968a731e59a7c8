"""Bearer tokens: every API request names a token; a token belongs to one tenant or is an admin's.

Tokens are random (``kant_`` + 43 URL-safe characters) and stored only as SHA-256 hashes; a lookup
hashes what the request carries and compares hashes in constant time (:meth:`Database.tokens.verify`).
A tenant sees and cancels only its own jobs (another tenant's are "not found", so their ids leak
nothing) and reads only totals of others; only admins touch nodes, tenants, quotas and tokens.
Tokens are never logged and never returned, except once, when created. How a request carries its
token (the ``Authorization`` header) is the API's part (:mod:`kant.service.api.deps`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kant.service.db.database import Database
from kant.service.errors import Forbidden

__all__ = ["Principal", "Authenticator"]


@dataclass(frozen=True, slots=True)
class Principal:
    token_id: int
    role: str  # admin | tenant
    tenant: str | None  # None for admins

    @property
    def admin(self) -> bool:
        return self.role == "admin"

    @property
    def who(self) -> str:
        return "admin" if self.admin else f"tenant {self.tenant}"

    def scope(self) -> str | None:
        """The tenant whose jobs this principal may see (None: all)."""
        return None if self.admin else self.tenant

    def sees(self, tenant: str) -> bool:
        """Whether this principal may see ``tenant``'s jobs, services and quota (an admin: every
        tenant's; a tenant: its own; another's are "not found", so their ids leak nothing)."""
        return self.admin or tenant == self.tenant


class Authenticator:
    def __init__(self, db: Database) -> None:
        self.db = db

    def principal(self, token: str) -> Principal | None:
        """Whose ``token`` is (None: no such token, or it expired or was revoked)."""
        row = self.db.tokens.verify(token, time.time())
        return None if row is None else Principal(row.id, row.role, row.tenant)

    @staticmethod
    def require_admin(p: Principal) -> None:
        if not p.admin:
            raise Forbidden("this needs an admin token")
