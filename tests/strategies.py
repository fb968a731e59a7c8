"""Hypothesis strategies shared by the tests: small clusters and random training workloads."""

from __future__ import annotations

from hypothesis import strategies as st

from kant.model import Cluster, JobTable, JobTableBuilder, NodeSpec

GPU_TYPES = ("A", "B")


@st.composite
def clusters(draw: st.DrawFn, max_nodes: int = 8) -> Cluster:
    """1..max_nodes nodes of 1, 2, 4 or 8 GPUs, one or two GPU types, small leaves."""
    n = draw(st.integers(1, max_nodes))
    nodes = [
        NodeSpec(
            f"n{i}",
            draw(st.sampled_from(GPU_TYPES)),
            draw(st.sampled_from([1, 2, 4, 8])),
        )
        for i in range(n)
    ]
    return Cluster.from_nodes(
        nodes, nodes_per_leaf=draw(st.integers(1, 4)), leaves_per_spine=draw(st.integers(1, 3))
    )


@st.composite
def workloads(draw: st.DrawFn, max_jobs: int = 30) -> JobTable:
    """Training jobs with gangs of 1-4 workers x 1-8 GPUs, some typed, integer-ish times so that
    arrivals and finishes often coincide (the interesting tie cases)."""
    n = draw(st.integers(1, max_jobs))
    b = JobTableBuilder(source="hypothesis")
    for i in range(n):
        b.add(
            f"j{i}",
            submit=float(draw(st.integers(0, 50))),
            duration=float(draw(st.integers(0, 40))),
            workers=draw(st.integers(1, 4)),
            gpus_per_worker=draw(st.sampled_from([1, 1, 2, 4, 8])),
            gpu_type=draw(st.sampled_from([None, None, *GPU_TYPES])),
            priority=draw(st.integers(0, 2)),
            tenant=draw(st.sampled_from(["t1", "t2", "t3"])),
        )
    return b.build()


@st.composite
def queue_trees(draw: st.DrawFn, capacity: int, tenants: tuple[str, ...] = ("t1", "t2", "t3", "t4"),
                step: int = 1) -> dict[str, object]:
    """A two-level queues document (two organisations of two leaves, one tenant per leaf) whose
    guarantees (multiples of ``step``) fit ``capacity`` GPUs, with random borrowing and lending limits
    (some unlimited)."""
    units = capacity // step

    def limit(top: int) -> int | None:
        return draw(st.one_of(st.none(), st.integers(0, max(top, 0)).map(lambda u: u * step)))

    leaves = [draw(st.integers(0, max(units // 4, 0))) for _ in tenants]
    orgs = []
    for k in range(2):
        pair = leaves[2 * k: 2 * k + 2]
        g = sum(pair) + draw(st.integers(0, 1))
        children = []
        for i, (t, u) in enumerate(zip(tenants[2 * k: 2 * k + 2], pair, strict=True)):
            lend = limit(u)
            children.append({"name": f"q{k}{i}", "guaranteed": u * step, "borrowing_limit": limit(units),
                             "lending_limit": lend, "tenants": [t]})
        lend = limit(g)
        orgs.append({"name": f"org{k}", "guaranteed": g * step, "borrowing_limit": limit(units),
                     "lending_limit": lend, "children": children})
    if sum(o["guaranteed"] for o in orgs) > capacity:  # type: ignore[misc]
        for o in orgs:
            o["guaranteed"] = None  # (the sum of its leaves': at most 4 x capacity // 4)
            o["lending_limit"] = None
    return {"queues": orgs}
