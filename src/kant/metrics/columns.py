"""A run's metrics as flat columns: the dotted keys of :meth:`Metrics.to_dict()
<kant.metrics.summary.Metrics.to_dict>` (``gar.window``, ``jwtd.overall.p50``), as ``kant compare``'s CSV
and a study's results table name them, and the ones the comparison plots draw (:data:`COMPARED`)."""

from __future__ import annotations

from typing import Any

__all__ = ["COMPARED", "flatten", "lookup"]

#: (label, dotted key) of the metrics drawn in a comparison (``kant compare``'s bars, a study's plots)
COMPARED: tuple[tuple[str, str], ...] = (
    ("GAR", "gar.window"),
    ("GAR while jobs wait", "gar.busy"),
    ("GAR run", "gar.run"),
    ("SOR", "sor"),
    ("GFR nodes", "gfr.nodes"),
    ("GFR GPUs", "gfr.gpus"),
    ("JWTD P50 (s)", "jwtd.overall.p50"),
    ("JWTD P90 (s)", "jwtd.overall.p90"),
    ("JWTD P99 (s)", "jwtd.overall.p99"),
    ("queued total P99 (s)", "queued.overall.p99"),
    ("JCT mean (s)", "jct.overall.mean"),
    ("queue mean", "queue.mean_len"),
)


def lookup(d: dict[str, Any], dotted: str) -> Any:
    """The value at ``dotted`` (``jwtd.overall.p50``) in a nested dict; None where a part is missing."""
    cur: Any = d
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalar leaves of a nested dict as ``dotted.key -> value`` (lists are skipped)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif not isinstance(v, list):
            out[key] = v
    return out
