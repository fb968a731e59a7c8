"""The ``tokens`` table: API tokens, stored only as SHA-256 hashes, and a short per-process cache of
verified tokens (one query per request would otherwise be the API's largest cost)."""

from __future__ import annotations

import builtins
import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa

from kant.service.db.base import Backend
from kant.service.db.schema import tenants, tokens
from kant.service.errors import Conflict, NotFound

__all__ = ["TOKEN_CACHE_TTL_S", "TokenRepo", "TokenRow"]

TOKEN_CACHE_TTL_S: Final = 2.0
_TOKEN_CACHE_MAX: Final = 10_000


@dataclass(frozen=True, slots=True)
class TokenRow:
    """One API token (the plaintext is never stored; the hash is not exposed)."""

    id: int
    name: str
    role: str
    tenant: str | None
    created_wall: float
    expires_wall: float | None
    revoked_wall: float | None

    def valid_at(self, now_wall: float) -> bool:
        """True if the token is neither revoked nor expired at ``now_wall``."""
        return self.revoked_wall is None and (self.expires_wall is None or now_wall < self.expires_wall)


_TOKEN_COLS: Final = (tokens.c.id, tokens.c.name, tokens.c.role, tokens.c.tenant, tokens.c.created_wall,
                      tokens.c.expires_wall, tokens.c.revoked_wall)


def _token_row(r: Any) -> TokenRow:
    return TokenRow(r.id, r.name, r.role, r.tenant, r.created_wall, r.expires_wall, r.revoked_wall)


def _hash_token(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


class TokenRepo:
    """API tokens (``db.tokens``); thread-safe, with the cache of verified tokens."""

    def __init__(self, backend: Backend) -> None:
        self._db = backend
        self._cache: dict[str, tuple[TokenRow, float]] = {}
        self._cache_lock = threading.Lock()

    def create(
        self, *, role: str, tenant: str | None = None, name: str = "", expires_wall: float | None = None,
        now_wall: float | None = None,
    ) -> tuple[str, TokenRow]:
        """Create a token; returns its plaintext (shown once, stored only as SHA-256) and its row."""
        plaintext = "kant_" + secrets.token_urlsafe(32)
        row = self.add_hash(plaintext, role=role, tenant=tenant, name=name, expires_wall=expires_wall,
                            now_wall=now_wall)
        return plaintext, row

    def add_hash(
        self, plaintext: str, *, role: str, tenant: str | None = None, name: str = "",
        expires_wall: float | None = None, now_wall: float | None = None,
    ) -> TokenRow:
        """Store the hash of a given token (e.g. an operator's admin token).

        Idempotent: if the token is stored already with the same role and tenant, its row comes back
        (revoked or not); with another role or tenant, :class:`Conflict`.
        """
        if role == "admin":
            if tenant is not None:
                raise ValueError("an admin token has no tenant")
        elif role == "tenant":
            if tenant is None:
                raise ValueError("a tenant token needs a tenant")
        else:
            raise ValueError(f"unknown token role {role!r} (admin or tenant)")
        if not plaintext:
            raise ValueError("empty token")
        digest = _hash_token(plaintext)
        created = time.time() if now_wall is None else now_wall
        with self._db.tx(write=True) as conn:
            old = conn.execute(sa.select(*_TOKEN_COLS).where(tokens.c.token_hash == digest)).first()
            if old is not None:
                if (old.role, old.tenant) != (role, tenant):
                    raise Conflict(f"this token is stored already with role {old.role!r} and tenant {old.tenant!r}")
                return _token_row(old)
            if tenant is not None and conn.execute(
                    sa.select(tenants.c.name).where(tenants.c.name == tenant)).first() is None:
                raise NotFound(f"tenant {tenant!r} does not exist")
            token_id = conn.execute(tokens.insert().values(
                token_hash=digest, name=name, role=role, tenant=tenant, created_wall=created,
                expires_wall=expires_wall,
            ).returning(tokens.c.id)).scalar_one()
        return TokenRow(token_id, name, role, tenant, created, expires_wall, None)

    def verify(self, plaintext: str, now_wall: float) -> TokenRow | None:
        """The token's row if it is known, not revoked and not expired at ``now_wall``; else None.

        Rows are cached for :data:`TOKEN_CACHE_TTL_S` seconds per process (a revocation by another
        process is seen within that delay; by this one, at once).
        """
        digest = _hash_token(plaintext)
        now = time.monotonic()
        with self._cache_lock:
            hit = self._cache.get(digest)
        if hit is not None and now - hit[1] < TOKEN_CACHE_TTL_S:
            row = hit[0]
        else:
            with self._db.tx() as conn:
                r = conn.execute(
                    sa.select(tokens.c.token_hash, *_TOKEN_COLS).where(tokens.c.token_hash == digest)
                ).first()
            if r is None or not hmac.compare_digest(r.token_hash, digest):
                return None
            row = _token_row(r)
            with self._cache_lock:
                if len(self._cache) >= _TOKEN_CACHE_MAX:
                    self._cache = {k: v for k, v in self._cache.items() if now - v[1] < TOKEN_CACHE_TTL_S}
                    if len(self._cache) >= _TOKEN_CACHE_MAX:
                        self._cache.clear()
                self._cache[digest] = (row, now)
        return row if row.valid_at(now_wall) else None

    def revoke(self, token_id: int, now_wall: float) -> bool:
        """Revoke a token; False if it does not exist or was already revoked."""
        with self._db.tx(write=True) as conn:
            r = conn.execute(
                sa.select(tokens.c.token_hash, tokens.c.revoked_wall).where(tokens.c.id == token_id)
            ).first()
            if r is None:
                return False
            with self._cache_lock:
                self._cache.pop(r.token_hash, None)
            if r.revoked_wall is not None:
                return False
            conn.execute(tokens.update().where(tokens.c.id == token_id).values(revoked_wall=now_wall))
        with self._cache_lock:  # a verify between the pop above and the commit may have cached it again
            self._cache.pop(r.token_hash, None)
        return True

    def count(self) -> int:
        """How many tokens are stored (revoked ones included)."""
        with self._db.tx() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(tokens)).scalar_one())

    def list(self, tenant: str | None = None) -> builtins.list[TokenRow]:
        """Every token (of ``tenant`` if given), by id."""
        q = sa.select(*_TOKEN_COLS).order_by(tokens.c.id)
        if tenant is not None:
            q = q.where(tokens.c.tenant == tenant)
        with self._db.tx() as conn:
            return [_token_row(r) for r in conn.execute(q)]
