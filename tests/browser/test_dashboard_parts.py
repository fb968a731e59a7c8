"""The dashboard's pure parts, without a browser: the tenants' lent GPUs and the time series'
sampling (Hypothesis invariants)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from kant.metrics.summary import Dist
from kant.service.dashboard.layout import lent_gpus
from kant.service.history import History

names = st.sampled_from(["a", "b", "c", "d", "e"])


@given(st.dictionaries(names, st.integers(0, 64)), st.dictionaries(names, st.integers(0, 64)))
def test_lent_is_idle_guarantee_that_borrowing_uses(guaranteed: dict[str, int], used: dict[str, int]) -> None:
    lent = lent_gpus(guaranteed, used)
    assert set(lent) == set(guaranteed)
    idle = {t: max(0, g - used.get(t, 0)) for t, g in guaranteed.items()}
    borrowed = sum(max(0, u - guaranteed.get(t, 0)) for t, u in used.items())
    for t, n in lent.items():
        assert 0 <= n <= idle[t]  # a tenant lends only what it does not use
    assert sum(lent.values()) <= borrowed  # nothing is lent that nobody borrows
    if borrowed >= sum(idle.values()):
        assert lent == idle  # every idle guarantee is in use by borrowers
    assert sum(lent.values()) >= min(borrowed, sum(idle.values())) - len(idle)  # (floored per tenant)


@dataclass
class _View:
    now: float
    metrics: Mapping[str, float | None] = field(
        default_factory=lambda: {"gar": 0.5, "sor": 1.0, "gfr_nodes": 0.0, "gfr_gpus": None})
    queue_len: int = 0
    pending_gpus: int = 0
    allocated_gpus: int = 0


@given(st.lists(st.tuples(st.floats(0, 100), st.lists(st.floats(0, 1e5), max_size=4), st.booleans()), max_size=40))
def test_history_folds_turns_and_keeps_every_wait(turns: list[tuple[float, list[float], bool]]) -> None:
    """Turns closer than min_gap_s (here: those flagged ``fold``) fold into the last sample; none of
    the waits is lost, and a reader that replaces samples by id ends with the history's samples."""
    h = History(maxlen=10_000, min_gap_s=0.0)
    now = 0.0
    seen: dict[int, dict[str, object]] = {}
    after = 0
    all_waits: list[float] = []
    for dt, waits, fold in turns:
        h.min_gap_s = 1e9 if fold else 0.0
        now += dt
        for w in waits:
            h.wait(w)
        all_waits += waits
        h.observe(_View(now))  # type: ignore[arg-type]
        for s in h.since(after):
            seen[s["id"]] = s  # type: ignore[index]
        after = h.seq
    samples = h.since(0)
    assert [s["id"] for s in samples] == sorted(seen) == list(range(1, len(samples) + 1))
    assert samples == [seen[i] for i in sorted(seen)]
    assert sum(s["wait"]["count"] for s in samples) == len(all_waits)  # type: ignore[index]
    if samples:
        assert samples[-1]["t"] == now
    if samples and all_waits and len(samples) == 1:
        assert samples[0]["wait"]["p50"] == Dist.of(all_waits).p50  # type: ignore[index]


@given(st.text(alphabet="ab 0123456789.;:[]-", max_size=60))
def test_reason_kinds_count_like_reasons_together(reason: str) -> None:
    """The queue's reason summary: a reason without its numbers; the same reason with other numbers
    is the same kind, and a kind is its own kind."""
    from kant.service.dashboard.queue import reason_kind

    kind = reason_kind(reason)
    assert not any(c.isdigit() for c in kind)
    assert reason_kind(kind) == kind
    assert reason_kind(reason.translate(str.maketrans("0123456789", "9876543210"))) == kind
