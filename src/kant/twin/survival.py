"""The product-limit (Kaplan-Meier) estimate, the one place the twin computes it.

Two parts of the twin estimate a law from observations of which some are only known to lie above a
value (right-censored): the run-time ratio model (:mod:`kant.twin.ratios`: running jobs, and a history
that starts at a cut, so observations enter late: left truncation) and the band's calibration
(:mod:`kant.twin.calibrate`: jobs still waiting, each prediction weighed by its age). Both call
:func:`product_limit`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["product_limit"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def product_limit(exit_: FloatArray, event: BoolArray, *, entry: FloatArray | None = None,
                  weight: FloatArray | None = None) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The Kaplan-Meier estimate of a law seen through observations ``i`` that end at ``exit_[i]`` when
    ``event[i]`` (else they are only known to be beyond it: right-censored), each at risk at ``t`` when
    ``entry[i] < t <= exit_[i]`` (``entry`` None: from the start; left truncation) and weighing
    ``weight[i]`` (None: 1 each).

    Returns the exits sorted (an event before a censoring at the same value), the hazard at each (0 at
    a censoring) and the survival just after each. Ties of events are taken one at a time: the same
    product as taking them together.
    """
    order = np.lexsort((~event, exit_))
    x, ev = exit_[order], event[order]
    n = x.size
    w = np.ones(n) if weight is None else weight[order]
    at_risk = np.cumsum(w[::-1])[::-1]  # the weight of what exits at or after each exit
    if entry is not None:  # less what has not entered yet (an entry at or after the exit)
        by_entry = np.argsort(entry, kind="stable")
        entered_w = np.concatenate([[0.0], np.cumsum(np.ones(n) if weight is None else weight[by_entry])])
        entered = entered_w[np.searchsorted(entry[by_entry], x, side="left")]
        at_risk = at_risk - (entered_w[-1] - entered)
    hazard = np.divide(w, at_risk, out=np.zeros(n), where=ev & (at_risk > 0)).astype(np.float64, copy=False)
    surv = np.cumprod(1.0 - hazard).astype(np.float64, copy=False)
    return x, hazard, surv
