"""Every error the API answers, as HTTP: the one table (:data:`ANSWERS`) from the service's domain
errors (:mod:`kant.service.errors`) to a status code, the body's text and headers; and the answers
to a request that fails validation (422, naming the first field at fault), to FastAPI's own HTTP
errors (401 from :mod:`.deps`, an unknown route, a wrong method) and to a bug (500).

Every error body is ``{"detail": ..., "message": ...}``: ``message`` is one line; ``detail`` is the
same text, or for a validation error the list of failures.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from kant.errors import KantError
from kant.service.errors import (
    Busy,
    Conflict,
    DatabaseError,
    Fenced,
    Forbidden,
    Invalid,
    NoReplica,
    NotFound,
    NotLeader,
    Rejected,
    ReplicaFailed,
    ReplicaTimeout,
    TooLong,
)

__all__ = ["ANSWERS", "Answer", "error_body", "install", "respond"]

log = logging.getLogger("kant.serve")


def error_body(detail: str) -> dict[str, str]:
    """Every error body: ``detail`` and a one-line ``message`` (a validation error's detail is the
    list of failures; its message names the first one's field)."""
    return {"detail": detail, "message": detail}


def _retry_after(seconds: float | None) -> dict[str, str]:
    return {} if seconds is None else {"Retry-After": str(math.ceil(seconds))}


def _leader(exc: Any) -> dict[str, str]:
    where = {"X-Kant-Leader": exc.leader_url} if exc.leader_url else {}
    return {**_retry_after(exc.retry_after), **where}


@dataclass(frozen=True)
class Answer:
    """How one kind of error is answered: the status code, the text (default: the error's own) and
    the headers (default: none)."""

    status: int
    text: Callable[[Any], str] = str
    headers: Callable[[Any], dict[str, str]] = lambda exc: {}


#: domain error -> its answer; an error is answered by the first of its classes (most specific
#: first, its ``__mro__``) found here. Any other KantError is a command the scheduler refused (400).
ANSWERS: dict[type[Exception], Answer] = {
    NotFound: Answer(404),
    Conflict: Answer(409),
    Invalid: Answer(409),
    Rejected: Answer(422),
    TooLong: Answer(422),
    Forbidden: Answer(403),
    Busy: Answer(429, headers=lambda exc: _retry_after(exc.retry_after)),
    NotLeader: Answer(503, headers=_leader),
    NoReplica: Answer(503, headers=lambda exc: _retry_after(exc.retry_after)),
    ReplicaTimeout: Answer(504),
    ReplicaFailed: Answer(502),
    Fenced: Answer(503, text=lambda exc: "this service lost the leadership"),
    DatabaseError: Answer(503, text=lambda exc: f"database unavailable: {exc}",
                          headers=lambda exc: _retry_after(1.0)),
    KantError: Answer(400),
    TimeoutError: Answer(504, text=lambda exc: "the scheduler did not answer in time"),
}


def answer(exc: Exception) -> JSONResponse:
    """The answer :data:`ANSWERS` gives ``exc`` (one of its classes, or a subclass of one)."""
    how = next(ANSWERS[c] for c in type(exc).__mro__ if c in ANSWERS)
    return JSONResponse(error_body(how.text(exc)), status_code=how.status, headers=how.headers(exc) or None)


async def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    return answer(exc)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    return JSONResponse(error_body(detail), status_code=exc.status_code, headers=getattr(exc, "headers", None))


async def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
              for e in exc.errors()]
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    # a key the client sent may hold a line break: such parts are quoted, the message stays one line
    where = ".".join(p if isinstance(p, str) and p.isprintable() else str(p) if isinstance(p, int) else repr(p)
                     for p in first["loc"])
    msg = " ".join(str(first["msg"]).splitlines())
    return JSONResponse({"detail": errors, "message": f"{where}: {msg}"}, status_code=422)


async def _internal(request: Request, exc: Exception) -> JSONResponse:  # pragma: no cover - a bug
    log.error("internal error on %s %s: %s", request.method, request.url.path, type(exc).__name__, exc_info=exc)
    return JSONResponse(error_body("internal error"), status_code=500)


async def respond(request: Request, exc: Exception) -> JSONResponse:
    """The answer to ``exc`` that the app's handlers (:func:`install`) give it, for a route that runs
    outside the app's router (:class:`kant.service.api.serve.ServeFirst`)."""
    if isinstance(exc, StarletteHTTPException):
        return await _http_error(request, exc)
    if any(c in ANSWERS for c in type(exc).__mro__):
        return answer(exc)
    return await _internal(request, exc)


def install(app: FastAPI) -> None:
    """Answer errors on ``app`` as this module says."""
    app.add_exception_handler(StarletteHTTPException, _http_error)
    for kind in ANSWERS:
        app.add_exception_handler(kind, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(Exception, _internal)
