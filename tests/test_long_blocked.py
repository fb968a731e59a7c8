"""LongBlocked keeps a request whose long jobs failed on worker slots alone while its slots in what the
reservation leaves (``X``) still fall short, when X grows elsewhere.

Random passes under one (pinned) reservation: each pass's X (``min(free_now, spare)``, clamped at 0 as
:class:`KeptX` clamps a pinned reservation's) shrinking within the pass (starts), requests added on
their slot shortfall in the X the walk took from :class:`KeptX` and noted (as
``EasyCycle.long_placement`` adds them).
At every pass's :meth:`LongBlocked.renew`, every request the set still holds must fall short in the
new X, counted directly; and where X grew nowhere, the set is kept whole.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.actions.backfill.leftover import LongBlocked, ShortOfSlots

N_NODES = 6

rows = st.lists(st.integers(-1, 8), min_size=N_NODES, max_size=N_NODES).map(lambda v: np.array([v], dtype=np.int64))
masks = st.one_of(st.none(), st.lists(st.booleans(), min_size=N_NODES, max_size=N_NODES).map(np.array))
#: a request: (GPUs per worker, GPU type, workers)
request_defs = st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(0, 1), st.integers(1, 14)),
                        min_size=1, max_size=5)


def _slots(x0: np.ndarray, g: int, mask: np.ndarray | None) -> int:
    v = np.maximum(x0, 0)
    return int(((v if mask is None else v[mask]) // g).sum())


@settings(max_examples=400, deadline=None)
@given(data=st.data(), type_masks=st.tuples(masks, masks), defs=request_defs)
def test_requests_kept_on_their_slots_still_fall_short(
    data: st.DataObject, type_masks: tuple[np.ndarray | None, np.ndarray | None], defs: list[tuple[int, int, int]]
) -> None:
    lb = LongBlocked()
    # the state as KeptX reads it: every node logged as changed whenever the free capacity is redrawn
    state = SimpleNamespace(shares=SimpleNamespace(slots={}), change_log=[], change_log_start=0)
    spare = data.draw(rows)
    res = SimpleNamespace(serial=1, spare=spare, pinned=True)  # pinned: X clamped at 0 (spare may be -1)
    last_x: np.ndarray | None = None  # the last X the walk noted
    for _ in range(data.draw(st.integers(1, 10))):
        free_now = np.maximum(data.draw(rows), 0)
        state.change_log.extend(range(N_NODES))
        before, changes = set(lb.requests), lb.changes
        lb.renew(res, free_now, state)  # type: ignore[arg-type]
        x = np.maximum(np.minimum(free_now, spare), 0)
        for request in lb.requests:
            g, t, w = defs[request]
            assert _slots(x[0], g, type_masks[t]) < w, "kept a request that has its worker slots now"
        if before and last_x is not None:
            if not (x > last_x).any():
                assert lb.requests == before and lb.changes == changes  # nothing grew: the set holds
            last_x = x  # renew's bound: this pass's X
        for _ in range(data.draw(st.integers(0, 3))):  # the pass: X noted, requests tested, a start
            x = lb.kept.update(state, free_now, res).copy()  # type: ignore[arg-type]
            lb.note()
            last_x = x
            for request in data.draw(st.lists(st.integers(0, len(defs) - 1), max_size=3)):
                g, t, w = defs[request]
                n = _slots(x[0], g, type_masks[t])
                if request not in lb.requests and n < w:
                    lb.add(request, ShortOfSlots(g, t, type_masks[t], n, w))
            free_now = np.maximum(free_now - np.clip(data.draw(rows), 0, 2), 0)  # a start: X only shrinks
            state.change_log.extend(range(N_NODES))
