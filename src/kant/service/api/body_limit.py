"""The cap on a request's body (``ServeConfig.max_body``): a larger one is refused with 413 before
any route reads it, whether its size is declared (``Content-Length``) or only seen while it streams."""

from __future__ import annotations

import json

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kant.service.api.errors import error_body

__all__ = ["BodyLimit"]


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes (413), declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = value
                break
        if declared is not None:  # the HTTP server holds the body to its declared length
            try:
                too_big = int(declared) > self.limit
            except ValueError:
                too_big = True
            if too_big:
                await _plain(send, 413, f"request body over {self.limit} bytes")
            else:
                await self.app(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge(self.limit)
            return msg

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await _plain(send, 413, f"request body over {self.limit} bytes")


class _TooLarge(HTTPException):
    """A streamed body passed the cap. An HTTPException, so that FastAPI, which answers any other
    failure while it reads a body with 400 ("error parsing the body"), lets it through to the app's
    handler of HTTP errors (413); outside a route the middleware answers it itself."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body over {limit} bytes")


async def _plain(send: Send, status: int, detail: str) -> None:
    body = json.dumps(error_body(detail)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
