"""The event stream (``GET /v1/events``): server-sent events of every job and node event (a tenant:
its own jobs'), resumed from the client's ``Last-Event-ID``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header
from fastapi.responses import StreamingResponse

from kant.service.api.deps import MAX_ID, Svc, Who

__all__ = ["router"]

router = APIRouter(tags=["events"])


@router.get("/v1/events", response_class=StreamingResponse, responses={200: {"content": {"text/event-stream": {}}}})
async def events(p: Who, svc: Svc, last_event_id: Annotated[int | None, Header(ge=0, le=MAX_ID)] = None,
                 ) -> StreamingResponse:
    """Server-sent events: every job and node event (a tenant: its own jobs'), from the last id
    the client saw (``Last-Event-ID``) on."""
    assert svc.hub is not None
    return StreamingResponse(svc.hub.stream(p.scope(), last_event_id), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
