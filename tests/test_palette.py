"""The palette of tenants and policies (kant.metrics.palette): CIEDE2000 against Sharma, Wu and
Dalal's published pairs, the palette the greedy maximin order of its candidates, its first 15 (the
Philly trace's tenants) far apart, far from the map's greys, and format.js's copy the same list."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kant.metrics.palette import CANDIDATES, PALETTE, delta_e, lab, maximin_order, min_distance

FORMAT_JS = Path(__file__).parents[1] / "src" / "kant" / "service" / "dashboard" / "static" / "format.js"


@pytest.mark.parametrize(("a", "b", "want"), [
    ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),  # Sharma et al. (2005), table 1, pairs 1-3
    ((50.0, 3.1571, -77.2803), (50.0, 0.0, -82.7485), 2.8615),
    ((50.0, 2.8361, -74.0200), (50.0, 0.0, -82.7485), 3.4412),
])
def test_ciede2000_gives_the_published_differences(a: tuple[float, float, float], b: tuple[float, float, float],
                                                   want: float) -> None:
    assert delta_e(a, b) == pytest.approx(want, abs=1e-4)
    assert delta_e(b, a) == pytest.approx(want, abs=1e-4)


def test_the_palette_is_the_maximin_order_and_its_first_15_are_far_apart() -> None:
    assert maximin_order(CANDIDATES, 16) == PALETTE
    assert len(set(PALETTE)) == 16
    # the Philly trace's 15 tenants: no two closer than 13 (Okabe and Ito's eight then Tol's, in that
    # order, the palette before: 8.0)
    assert min_distance(PALETTE[:15]) >= 13.0
    assert min_distance(PALETTE[:8]) >= 25.0
    # every colour far from the map's free, down and "others" greys and from the white page
    greys = [lab(c) for c in ("#e9ebef", "#3b3b40", "#b9b9c3", "#ffffff")]
    assert min(delta_e(lab(c), g) for c in PALETTE for g in greys) >= 15.0


def test_the_dashboards_copy_is_the_same_list() -> None:
    found = re.search(r"const PALETTE = (\[[^\]]*\])", FORMAT_JS.read_text())
    assert found is not None
    assert tuple(json.loads(found.group(1))) == PALETTE


colors = st.integers(0, 0xFFFFFF).map(lambda v: f"#{v:06X}")


@given(st.lists(colors, min_size=2, max_size=8, unique=True))
def test_maximin_order_takes_each_next_the_farthest(cands: list[str]) -> None:
    out = maximin_order(cands, len(cands))
    assert out[0] == cands[0] and sorted(out) == sorted(cands)
    labs = {c: lab(c) for c in cands}
    for k in range(1, len(out)):  # none left later was farther from those before than the one taken
        gap = min(delta_e(labs[out[k]], labs[o]) for o in out[:k])
        assert all(min(delta_e(labs[c], labs[o]) for o in out[:k]) <= gap + 1e-9 for c in out[k:])


@given(colors, colors)
def test_delta_e_is_a_symmetric_difference(a: str, b: str) -> None:
    assert delta_e(lab(a), lab(a)) == 0.0
    assert delta_e(lab(a), lab(b)) == pytest.approx(delta_e(lab(b), lab(a)), abs=1e-6)
    assert (delta_e(lab(a), lab(b)) > 0) == (a != b)
