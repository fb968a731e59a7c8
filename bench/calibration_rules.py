"""Calibration rules compared offline on the accuracy bench's dumps (docs/whatif.md, "The band,
calibrated on the twin's own errors").

    KANT_CAL_DUMP=/tmp/d python bench/bench_whatif.py --accuracy --policy kant --regime noisy
    python bench/calibration_rules.py /tmp/d-kant-noisy.pkl

A dump holds, for every tick of the replay, the runs' bands of the pending jobs (before calibration),
the starts seen and the pending jobs, and every job's actual start. Each rule is fed the ticks as the
service's twin feeds :class:`kant.twin.calibrate.Calibration`; the predictions made while jobs still
arrived are scored as the bench scores them (in band: P10 <= actual <= P90).
"""

from __future__ import annotations

import argparse
import math
import pickle
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kant.twin.calibrate import Calibration, km_quantile


class Rule:
    """A rule: scores from P50 (``base="p50"``) or from P10 / P90 (``"band"``), scaled by lead +
    ``norm`` seconds (None: not scaled), from the ``k`` past predictions nearest in lead (None: all),
    weighted by age with ``half_life`` (None: equal) or only the last ``window`` seconds."""

    def __init__(self, base: str = "band", k: int | None = 200, norm: float | None = None,
                 half_life: float | None = None, window: float | None = None) -> None:
        self.base, self.k, self.norm, self.half_life, self.window = base, k, norm, half_life, window
        self.open: dict[int, list[tuple[float, float, float, float]]] = {}
        self.done: deque[tuple[float, float, float, float, float]] = deque(maxlen=5000)

    def started(self, starts: dict[int, float], pending: list[int]) -> None:
        waiting = set(pending)
        for jid in list(self.open):
            st = starts.get(jid)
            if st is not None:
                self.done.extend((*kept, st) for kept in self.open.pop(jid))
            elif jid not in waiting:
                del self.open[jid]

    def observe(self, now: float, jobs: list[dict[str, Any]]) -> None:
        for j in jobs:
            if j.get("p50") is None:
                continue
            p50 = float(j["p50"])
            kept = self.open.setdefault(int(j["id"]), [])
            kept.append((now, p50 if j.get("p10") is None else float(j["p10"]), p50,
                         p50 if j.get("p90") is None else float(j["p90"])))
            if len(kept) > 32:
                del kept[1::2]

    def apply(self, now: float, jobs: list[dict[str, Any]]) -> None:
        if len(self.done) < 50:
            return
        recs = [(*r, 1.0) for r in self.done] + [(*k, now, 0.0) for ks in self.open.values() for k in ks]
        a = np.asarray(recs, dtype=np.float64)
        if self.window is not None:
            a = a[a[:, 0] >= now - self.window]
        if not len(a):
            return
        when, p10, p50, p90, st, seen_f = a.T
        seen = seen_f > 0
        lead = p50 - when
        scale = np.maximum(lead, 0) + self.norm if self.norm is not None else np.ones_like(lead)
        lo_base, hi_base = (p10, p90) if self.base == "band" else (p50, p50)
        xl, xh = (st - lo_base) / scale, (st - hi_base) / scale
        w = 0.5 ** ((now - when) / self.half_life) if self.half_life else np.ones_like(lead)
        order = np.argsort(lead, kind="stable")
        k = len(a) if self.k is None else min(self.k, len(a))
        cache: dict[int, tuple[float, float] | None] = {}
        for j in jobs:
            if j.get("p50") is None:
                continue
            q50 = float(j["p50"])
            r10 = q50 if j.get("p10") is None else float(j["p10"])
            r90 = q50 if j.get("p90") is None else float(j["p90"])
            i = int(np.searchsorted(lead[order], q50 - now))
            lo = min(max(i - k // 2, 0), len(a) - k)
            if lo not in cache:
                sel = order[lo:lo + k]
                ql, qh = km_quantile(xl[sel], seen[sel], w[sel], 0.1), km_quantile(xh[sel], seen[sel], w[sel], 0.9)
                cache[lo] = None if ql is None or qh is None else (ql, qh)
            band = cache[lo]
            if band is None:
                continue
            s = max(q50 - now, 0.0) + self.norm if self.norm is not None else 1.0
            b10, b90 = (r10, r90) if self.base == "band" else (q50, q50)
            j["p10"], j["p90"] = min(r10, b10 + s * band[0]), max(r90, b90 + s * band[1])


RULES: list[tuple[str, Callable[[], Any]]] = [
    ("kant.twin.calibrate.Calibration (current)", Calibration),
    ("P50 residuals, 200 nearest leads, censored", lambda: Rule(base="p50")),
    ("P10/P90 scores, 200 nearest leads, censored, last 24 h", lambda: Rule(window=86400.0)),
    ("P50 scaled by lead + 30 min, all, censored, half-life 6 h", lambda: Rule("p50", None, 1800.0, 6 * 3600.0)),
    ("P50 scaled by lead + 30 min, all, censored, half-life 3 h", lambda: Rule("p50", None, 1800.0, 3 * 3600.0)),
    ("P50 scaled by lead + 30 min, all, censored, half-life 12 h", lambda: Rule("p50", None, 1800.0, 12 * 3600.0)),
    ("P10/P90 scaled by lead + 30 min, all, censored, half-life 6 h", lambda: Rule("band", None, 1800.0, 6 * 3600.0)),
]


def score(path: str, make: Callable[[], Any]) -> str:
    with open(path, "rb") as fh:
        d = pickle.load(fh)
    actual, cal, rows = d["actual"], make(), []
    for now, starts, pending, jobs, rowmap, draining in d["ticks"]:
        jobs = [dict(j) for j in jobs]
        runs = [dict(j) for j in jobs]
        cal.started(starts, pending)
        cal.apply(now, jobs)
        cal.observe(now, runs)
        if draining:
            continue
        for j in jobs:
            a = actual.get(rowmap[j["id"]])
            if a is not None and j.get("p50") is not None:
                rows.append((a, -math.inf if j.get("p10") is None else j["p10"],
                             math.inf if j.get("p90") is None else j["p90"]))
    if not rows:
        return "no predictions while jobs still arrived (a longer slice, or a shorter --warmup-h)"
    act, lo, hi = np.asarray(rows, dtype=np.float64).T
    inside = np.mean((lo <= act) & (act <= hi))
    return (f"{len(act):,} predictions, in band {inside:.1%}, < P10 {np.mean(act < lo):.1%}, "
            f"> P90 {np.mean(act > hi):.1%}, median width {np.median(hi - lo) / 3600:.2f} h")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dumps", nargs="+", type=Path, help="dumps written by bench_whatif.py under KANT_CAL_DUMP")
    args = ap.parse_args()
    for dump in args.dumps:
        if not dump.is_file():
            ap.error(f"{dump}: no such file (make one with KANT_CAL_DUMP=PREFIX bench/bench_whatif.py --accuracy)")
        print(dump)
        for name, make in RULES:
            print(f"  {name:62s} {score(str(dump), make)}", flush=True)


if __name__ == "__main__":
    main()
