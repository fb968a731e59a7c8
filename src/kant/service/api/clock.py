"""The service clock (``/v1/clock``): read it; move a manual clock by hand (admins), every event and
cycle in between processed."""

from __future__ import annotations

from fastapi import APIRouter

from kant.service.api.deps import Admin, Svc, Who
from kant.service.errors import Invalid
from kant.service.schemas import ClockIn, ClockOut

__all__ = ["router"]

router = APIRouter(tags=["cluster"])


@router.get("/v1/clock", response_model=ClockOut)
def get_clock(p: Who, svc: Svc) -> ClockOut:
    return ClockOut(now=svc.clock.now(), kind=svc.config.clock)


@router.post("/v1/clock", response_model=ClockOut)
def set_clock(body: ClockIn, p: Admin, svc: Svc) -> ClockOut:
    """Manual clock only: move time to ``to``, processing every event and cycle in between."""
    if svc.config.clock != "manual":
        raise Invalid(f"the clock is {svc.config.clock}: only a manual clock is moved by hand")
    svc.leading().advance(body.to, hold=body.hold)
    return ClockOut(now=svc.clock.now(), kind=svc.config.clock)
