"""The colours of tenants on the dashboard and of policies in the reports (one list: :data:`PALETTE`,
``static/format.js``'s ``PALETTE`` is the same), and the colour distance they are chosen by.

The list is taken from colour-blind-safe palettes (Okabe and Ito's; Paul Tol's bright, muted and
light) in the order :func:`maximin_order` gives: each next colour the farthest, by
CIEDE2000 (:func:`delta_e`), from the ones before it, starting from Okabe and Ito's blue. A page
that gives the colours in order to ``n`` tenants thus gets ``n`` colours as far apart as this greedy
choice finds, for any ``n``; tests/metrics/test_palette.py checks the distances.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["CANDIDATES", "PALETTE", "delta_e", "lab", "maximin_order", "min_distance"]

#: where the palette's colours come from (hex sRGB): Okabe and Ito's (less black, and their yellow,
#: which reads poorly on white), Paul Tol's bright, muted and light (less their greys, and the light
#: pale yellow and pink, too close to white)
CANDIDATES: tuple[str, ...] = (
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00",  # Okabe and Ito
    "#4477AA", "#EE6677", "#228833", "#CCBB44", "#66CCEE", "#AA3377",  # Tol bright
    "#CC6677", "#332288", "#DDCC77", "#117733", "#88CCEE", "#882255", "#44AA99", "#999933", "#AA4499",  # muted
    "#77AADD", "#EE8866", "#44BB99", "#BBCC33", "#AAAA00",  # Tol light
)

#: the dashboard's tenants and the reports' policies, in this order (see the module docstring); the
#: first is Okabe and Ito's blue, the dashboard's accent. Made by ``maximin_order(CANDIDATES, 16)``.
PALETTE: tuple[str, ...] = (
    "#0072B2", "#BBCC33", "#EE6677", "#117733", "#882255", "#66CCEE", "#D55E00", "#44BB99",
    "#332288", "#E69F00", "#EE8866", "#AA4499", "#CC79A7", "#999933", "#77AADD", "#DDCC77",
)


def lab(color: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of a ``#RRGGBB`` sRGB colour."""
    rgb = [int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    r, g, b = lin
    x = (0.4124564 * r + 0.3575761 * g + 0.1804375 * b) / 0.95047
    y = 0.2126729 * r + 0.7151522 * g + 0.0721750 * b
    z = (0.0193339 * r + 0.1191920 * g + 0.9503041 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29

    fx, fy, fz = f(x), f(y), f(z)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def delta_e(lab1: Sequence[float], lab2: Sequence[float]) -> float:
    """CIEDE2000 colour difference of two L*a*b* colours (Sharma, Wu and Dalal, 2005; kL = kC = kH = 1)."""
    l1, a1, b1 = lab1
    l2, a2, b2 = lab2
    c_bar = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_bar**7 / (c_bar**7 + 25**7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p = math.degrees(math.atan2(b1, a1p)) % 360 if c1p else 0.0
    h2p = math.degrees(math.atan2(b2, a2p)) % 360 if c2p else 0.0
    dl, dc = l2 - l1, c2p - c1p
    if c1p * c2p == 0:
        dh = 0.0
    elif abs(h2p - h1p) <= 180:
        dh = h2p - h1p
    elif h2p - h1p > 180:
        dh = h2p - h1p - 360
    else:
        dh = h2p - h1p + 360
    dhh = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    l_bar, cp_bar = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        h_bar = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        h_bar = (h1p + h2p) / 2
    elif h1p + h2p < 360:
        h_bar = (h1p + h2p + 360) / 2
    else:
        h_bar = (h1p + h2p - 360) / 2
    t = (1 - 0.17 * math.cos(math.radians(h_bar - 30)) + 0.24 * math.cos(math.radians(2 * h_bar))
         + 0.32 * math.cos(math.radians(3 * h_bar + 6)) - 0.20 * math.cos(math.radians(4 * h_bar - 63)))
    d_theta = 30 * math.exp(-(((h_bar - 275) / 25) ** 2))
    r_c = 2 * math.sqrt(cp_bar**7 / (cp_bar**7 + 25**7))
    s_l = 1 + 0.015 * (l_bar - 50) ** 2 / math.sqrt(20 + (l_bar - 50) ** 2)
    s_c = 1 + 0.045 * cp_bar
    s_h = 1 + 0.015 * cp_bar * t
    r_t = -math.sin(math.radians(2 * d_theta)) * r_c
    return math.sqrt((dl / s_l) ** 2 + (dc / s_c) ** 2 + (dhh / s_h) ** 2 + r_t * (dc / s_c) * (dhh / s_h))


def min_distance(colors: Sequence[str]) -> float:
    """The least CIEDE2000 difference between two of ``colors`` (inf for fewer than two)."""
    labs = [lab(c) for c in colors]
    return min((delta_e(p, q) for i, p in enumerate(labs) for q in labs[i + 1:]), default=math.inf)


def maximin_order(candidates: Sequence[str], n: int) -> tuple[str, ...]:
    """``n`` of ``candidates``, the first first, then each the farthest (its least CIEDE2000 difference
    to those already taken the largest; ties: the earlier candidate)."""
    labs = {c: lab(c) for c in candidates}
    out = [candidates[0]]
    while len(out) < min(n, len(candidates)):
        rest = [c for c in candidates if c not in out]
        out.append(max(rest, key=lambda c: (min(delta_e(labs[c], labs[o]) for o in out), -candidates.index(c))))
    return tuple(out)
