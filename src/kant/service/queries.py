"""Reads of the scheduler's live state that the API, the dashboard and the twin make: the loop's
published view, why jobs wait (with the twin's predicted start), the live state as a twin snapshot
and the version the twin compares. Each takes the running loop (None, or not alive, on a standby:
then there is nothing to read, and the answer says so with None or an empty one) and asks it on its
own thread (:meth:`ServiceLoop.call`)."""

from __future__ import annotations

from typing import Any

from kant.errors import KantError
from kant.service.clock import Clock
from kant.service.live.view import LiveView
from kant.service.loop import ServiceLoop
from kant.service.schemas import PredictionOut, WhyOut
from kant.service.twin import Twin, describe_prediction
from kant.twin.snapshot import TwinSnapshot

__all__ = ["live_view", "no_prediction", "pending_reasons", "state_version", "twin_snapshot", "why"]


def live_view(loop: ServiceLoop | None) -> LiveView | None:
    """The view the loop published last (the cluster at its last turn)."""
    return loop.view if loop is not None else None


def pending_reasons(loop: ServiceLoop | None, job_ids: list[int]) -> dict[int, str]:
    """Why each of these pending jobs waits (the plugin's reason), by id."""
    if not job_ids or loop is None or not loop.alive:
        return {}
    result: dict[int, str] = loop.call(lambda lp: lp.reasons(job_ids))
    return result


def why(loop: ServiceLoop | None, twin: Twin, clock: Clock, job_id: int) -> WhyOut | None:
    """Why a job waits and how many jobs are ahead, with the twin's predicted start while it waits
    (None: no loop, or the loop does not know the job)."""
    if loop is None or not loop.alive:
        return None
    def ask(lp: ServiceLoop) -> tuple[dict[str, Any], float | None]:
        info = lp.live.active.get(job_id)
        return lp.why(job_id), None if info is None else info.submit_time

    try:
        data, submitted = loop.call(ask)
    except KantError:
        return None
    out = WhyOut(id=job_id, **data)
    if out.state != "pending":
        return out
    summary = f"pending because {out.reason}"
    pred = twin.predicted(job_id)
    if pred is not None:
        out.prediction = PredictionOut(p50=pred.p50, p10=pred.p10, p90=pred.p90, as_of=pred.as_of, runs=pred.runs,
                                       covers=pred.covers or None, reason=pred.reason)
        out.prediction_text = describe_prediction(pred, clock.now())
        summary += f"; {out.prediction_text}"
    else:
        out.prediction_text = no_prediction(twin, submitted)
        summary += f"; {out.prediction_text}"
    if out.behind is not None and (ahead := twin.predicted(out.behind)) is not None:
        out.behind_prediction_text = describe_prediction(ahead, clock.now())
        summary += f"; job {out.behind} (ahead of it): {out.behind_prediction_text}"
    out.summary = summary
    return out


def no_prediction(twin: Twin, submitted: float | None) -> str:
    """Why a pending job has no prediction: predictions are off, or it arrived after the snapshot
    the twin last predicted on (the next refresh predicts it), or the twin has not predicted yet."""
    if not twin.predict_on:
        return "no predicted start: predictions are off (kant serve --no-predict)"
    if twin.as_of is None:
        return "no predicted start yet: the twin's first prediction is under way"
    if submitted is not None and submitted > twin.as_of:
        return "no predicted start yet: it arrived after the twin's last snapshot; the next refresh predicts it"
    return "no predicted start: the twin's last refresh failed or is under way (see the service's log)"


def twin_snapshot(loop: ServiceLoop | None) -> TwinSnapshot | None:
    """The live state as a digital-twin snapshot (docs/whatif.md)."""
    if loop is None or not loop.alive:
        return None
    snap: TwinSnapshot = loop.call(lambda lp: lp.twin_snapshot(), timeout=60.0)
    return snap


def state_version(loop: ServiceLoop | None) -> int | None:
    """What the twin compares to decide whether to predict again (None: nothing to predict: no
    leader, or no job waits, so no snapshot is taken)."""
    if loop is None or not loop.alive or loop.view is None or not loop.view.queue_len:
        return None
    return loop.state_version
