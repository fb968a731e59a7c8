"""Bearer tokens: every API request names a token; a token belongs to one tenant or is an admin's.

Tokens are random (``kant_`` + 43 URL-safe characters) and stored only as SHA-256 hashes; a lookup
hashes what the request carries and compares hashes in constant time (:meth:`kant.service.db.tokens.TokenRepo.verify`).
A tenant sees and cancels only its own jobs (another tenant's are "not found", so their ids leak
nothing) and reads only totals of others; only admins touch nodes, tenants, quotas and tokens.
Tokens are never logged and never returned, except once, when created.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from fastapi import HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from kant.service.db.database import Database

__all__ = ["Principal", "Authenticator", "bearer"]

#: the OpenAPI security scheme (requests without it are answered 401 by :class:`Authenticator`)
bearer = HTTPBearer(auto_error=False, description="A kant token: `Authorization: Bearer kant_...`")


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


def _unauthorized(why: str) -> HTTPException:
    return HTTPException(status_code=401, detail=why, headers={"WWW-Authenticate": "Bearer"})


class Authenticator:
    def __init__(self, db: Database) -> None:
        self.db = db

    def principal(self, request: Request, creds: HTTPAuthorizationCredentials | None) -> Principal:
        if creds is None:
            header = request.headers.get("authorization")
            raise _unauthorized("a bearer token is required" if header is None else
                                "the Authorization header must be 'Bearer <token>'")
        token = creds.credentials
        if not token or len(token) > 256:
            raise _unauthorized("invalid token")
        row = self.db.tokens.verify(token, time.time())
        if row is None:
            raise _unauthorized("invalid, expired or revoked token")
        return Principal(row.id, row.role, row.tenant)

    @staticmethod
    def require_admin(p: Principal) -> None:
        if not p.admin:
            raise HTTPException(status_code=403, detail="this needs an admin token")
