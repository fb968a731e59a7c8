"""KeptX (what the EASY reservation leaves free now, ``X = min(free_now, spare)``, kept across walks
from the state's change log) equals the fresh computation at every look.

Random clusters and histories on a real :class:`ClusterState` (allocations, releases, cordons and
their end), under a reservation whose ``spare`` changes as the walk changes it: long jobs backfilled
against it take spare on the nodes they start on (:meth:`EasyReservation.take`), a short share pins
it (spare below 0 there, X clamped at 0), a new reservation (a new serial) brings another spare. At
each look, X, :attr:`KeptX.whole`, :attr:`KeptX.over` and the worker slots per (GPUs per worker, GPU
type) must be those computed afresh, and the nodes reported moved must hold every node where X
changed since the last look, with X there then.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.actions.backfill.fit import Capacity
from kant.actions.backfill.leftover import KeptX
from kant.model.cluster import Cluster
from kant.model.state import ClusterState, Placement
from strategies import clusters

GPUS = (1, 2, 4, 8)


def _spare(data: st.DataObject, n: int, rows: int) -> np.ndarray:
    return np.array([data.draw(st.lists(st.integers(0, 8 * (1 + 2 * r)), min_size=n, max_size=n))
                     for r in range(rows)], dtype=np.int64)


def _free_now(state: ClusterState, rows: int) -> np.ndarray:
    """GPUs, and with two rows a second resource: three units per free GPU (it changes where they do)."""
    return state.free[None, :] if rows == 1 else np.stack([state.free, 3 * state.free])


@settings(max_examples=300, deadline=None)
@given(data=st.data(), rows=st.sampled_from([1, 2]), cluster=clusters(max_nodes=8),
       ops=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 99), st.sampled_from(GPUS), st.booleans(),
                              st.booleans()), max_size=40))
def test_kept_x_equals_the_fresh_computation(data: st.DataObject, rows: int, cluster: Cluster,
                                             ops: list[tuple[int, int, int, bool, bool]]) -> None:
    state = ClusterState(cluster)
    n = cluster.n_nodes
    res = SimpleNamespace(serial=1, pinned=False, spare=_spare(data, n, rows))
    kept = KeptX()
    masks = [None] + [cluster.gpu_type == t for t in range(len(cluster.gpu_type_names))]
    held: dict[int, int] = {}
    last: np.ndarray | None = None  # X at the last look
    for k, (op, pick, g, take, look) in enumerate([*ops, (-1, 0, 1, False, True)]):
        node = pick % n
        if 0 <= op <= 1 and state.fits(node, g):  # a start; a long one takes spare where it started
            state.allocate(k, Placement((node,), g))
            held[k] = node
            if take:
                res.spare[:, node] -= [g, 3 * g][:rows]
        elif op == 2 and held:
            state.release(min(held))
            del held[min(held)]
        elif op == 3:
            state.set_unschedulable(node)
        elif op == 4:
            state.set_schedulable(node)
        elif op == 5:  # a new reservation
            res = SimpleNamespace(serial=res.serial + 1, pinned=False, spare=_spare(data, n, rows))
        elif op == 6 and state.fits(node, 1):  # a short share pinned: spare may go below 0 there
            state.allocate(k, Placement((node,), 1))
            held[k] = node
            res.spare[:, node] -= [1 + int(take), 3][:rows]
            res.pinned = True
        if look:  # a walk looks at X (after any number of changes)
            free_now = _free_now(state, rows)
            x = kept.update(state, free_now, res)  # type: ignore[arg-type]
            fresh = np.minimum(free_now, res.spare)
            if res.pinned:
                fresh = np.maximum(fresh, 0)
            assert np.array_equal(x, fresh)
            assert kept.whole == bool((free_now <= res.spare).all())
            assert kept.over == set(np.flatnonzero((free_now > res.spare).any(axis=0)).tolist())
            for t, mask in enumerate(masks):
                for gw in GPUS:
                    assert kept.slots(gw, t - 1, mask) == Capacity.gpu_slots(fresh[0], gw, mask), (gw, t)
            moved = kept.take_moved()
            if moved is not None and last is not None:
                for v in range(n):
                    if not np.array_equal(x[:, v], last[:, v]):
                        assert moved.get(v) == last[:, v].tolist(), "X moved on a node not reported"
                for v, was in moved.items():
                    assert was == last[:, v].tolist()
            last = x.copy()
