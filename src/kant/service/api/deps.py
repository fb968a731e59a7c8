"""What the routes take as parameters: the service (:data:`Svc`, the :class:`Service` the app was
made for, from ``app.state``), the caller (:data:`Who`: any valid bearer token; :data:`Admin`: an
admin's) and ids in paths (:data:`Id`, at most :data:`MAX_ID`).

A route that needs the scheduling loop asks for it where its checks put it, with
``svc.leading()`` (:class:`~kant.service.errors.NotLeader` on a standby, answered 503 with
``Retry-After`` and ``X-Kant-Leader``), not as a dependency: FastAPI runs a dependency before it
validates the request, and a standby would then answer 503 where the route answers 422 (a bad
body), 404 (another tenant's job) or 409 (a clock that is not manual).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from kant.service.auth import Principal
from kant.service.server import Service

__all__ = ["MAX_ID", "Admin", "Id", "Svc", "Who", "admin", "bearer", "principal", "service"]

#: the OpenAPI security scheme (requests without it are answered 401 by :func:`principal`)
bearer = HTTPBearer(auto_error=False, description="A kant token: `Authorization: Bearer kant_...`")

#: the largest id a database holds (a 64-bit integer): a larger one in a path is a 422, not a driver error
MAX_ID = 2**63 - 1


async def service(request: Request) -> Service:
    """The service this app serves (:func:`kant.service.api.create_app` keeps it in ``app.state``)."""
    svc: Service = request.app.state.svc
    return svc


Svc = Annotated[Service, Depends(service)]


def _unauthorized(why: str) -> HTTPException:
    return HTTPException(status_code=401, detail=why, headers={"WWW-Authenticate": "Bearer"})


async def principal(svc: Svc, request: Request,
                    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Principal:
    """The caller: the bearer token's tenant or admin (401 without a valid one).

    async: a sync dependency would cost a thread-pool hop per request (a cached token needs no I/O;
    a miss, once per token per 2 s, is one indexed query)."""
    if creds is None:
        header = request.headers.get("authorization")
        raise _unauthorized("a bearer token is required" if header is None else
                            "the Authorization header must be 'Bearer <token>'")
    token = creds.credentials
    if not token or len(token) > 256:
        raise _unauthorized("invalid token")
    p = svc.auth.principal(token)
    if p is None:
        raise _unauthorized("invalid, expired or revoked token")
    return p


async def admin(svc: Svc, p: Annotated[Principal, Depends(principal)]) -> Principal:
    """The caller, who must hold an admin token (:class:`~kant.service.errors.Forbidden`: 403)."""
    svc.auth.require_admin(p)
    return p


#: the caller (any valid token) and an admin caller, as route parameters
Who = Annotated[Principal, Depends(principal)]
Admin = Annotated[Principal, Depends(admin)]
#: a job, service or token id in a route's path
Id = Annotated[int, Path(ge=0, le=MAX_ID)]
