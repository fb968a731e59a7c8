"""GAR, SOR and GFR from one definition (kant.metrics.occupancy) for a run's series and a live instant."""

from __future__ import annotations

import numpy as np
import pytest

from kant.config import load_policy
from kant.metrics import occupancy
from kant.metrics.summary import summarize
from kant.metrics.timeline import Timeline
from kant.model.job import JobTableBuilder
from kant.sim import NodeFailure, Simulator
from kant.traces import load_cluster

# (allocated, pending, down GPUs, partial nodes, free on partial, down nodes) on 16 GPUs in 3 GPU nodes
COUNTS = [(0, 0, 0, 0, 0, 0), (6, 10, 0, 2, 2, 0), (8, 0, 8, 0, 0, 1), (16, 4, 0, 0, 0, 0), (0, 4, 16, 0, 0, 3)]


def test_one_instant_reads_as_the_same_sample_of_a_series() -> None:
    """The live view's scalars are the series' values where defined, and None where not."""
    cols = [np.array(c, dtype=np.float64) for c in zip(*COUNTS, strict=True)]
    alloc, pending, down, partial, on_partial, down_nodes = cols
    series = {
        "gar": occupancy.gar(alloc, 16), "sor": occupancy.sor(alloc, pending, down, 16),
        "gfr_nodes": occupancy.gfr_nodes(partial, down_nodes, 3),
        "gfr_gpus": occupancy.gfr_gpus(on_partial, alloc, down, 16),
    }
    for k, (a, p, d, part, onp, dn) in enumerate(COUNTS):
        instant = {
            "gar": occupancy.gar(a, 16), "sor": occupancy.sor(a, p, d, 16),
            "gfr_nodes": occupancy.gfr_nodes(part, dn, 3), "gfr_gpus": occupancy.gfr_gpus(onp, a, d, 16),
        }
        for name, (values, defined) in series.items():
            want = float(values[k]) if defined[k] else None
            assert occupancy.at_instant(instant[name]) == want, (name, k)
    # by hand, sample 1: GAR 6/16; SOR 6/min(16, 16); GFR nodes 2/3; GFR GPUs 2/(16 - 6)
    assert [occupancy.at_instant(occupancy.gar(6, 16)), occupancy.at_instant(occupancy.sor(6, 10, 0, 16)),
            occupancy.at_instant(occupancy.gfr_nodes(2, 0, 3)),
            occupancy.at_instant(occupancy.gfr_gpus(2, 6, 0, 16))] == [6 / 16, 6 / 16, 2 / 3, 2 / 10]
    # sample 4: every GPU down, nothing free: SOR, GFR undefined
    assert occupancy.at_instant(occupancy.sor(0, 4, 16, 16)) is None
    assert occupancy.at_instant(occupancy.gfr_nodes(0, 3, 3)) is None
    assert occupancy.at_instant(occupancy.gfr_gpus(0, 0, 16, 16)) is None


def test_gfr_counts_down_nodes_exactly_on_unequal_nodes() -> None:
    """An 8-GPU and a 2-GPU node; one 1-GPU job runs on the 2-GPU node on [0, 100); the idle 8-GPU node
    fails at 10 and is back at 30. Down nodes are recorded at each change, so the up GPU nodes are
    counted, not estimated from down GPUs (8 down GPUs / 5 GPUs per node would make 0.4 nodes up)."""
    cluster = load_cluster("1x8:V100+1x2:V100")
    b = JobTableBuilder()
    b.add("a", submit=0, duration=100, workers=1, gpus_per_worker=1)
    res = Simulator(cluster, b.build(), load_policy("fifo"), failures=[NodeFailure(10.0, 0, 20.0)]).run()
    assert res.times.tolist() == [0.0, 10.0, 30.0, 100.0]
    assert res.down_node_times.tolist() == [10.0, 30.0] and res.down_nodes.tolist() == [1, 0]
    tl = Timeline(res)
    assert tl.series["down_nodes"].tolist() == [0.0, 1.0, 0.0, 0.0]
    # partial nodes [1, 1, 1, 0] over up nodes [2, 1, 2, 2]
    assert tl.gfr_nodes()[0].tolist() == [0.5, 1.0, 0.5, 0.0]
    # window [0, 0] (one arrival): the run window [0, 100]: (10 * 0.5 + 20 * 1.0 + 70 * 0.5) / 100
    assert summarize(res).gfr.nodes == pytest.approx(0.6)
