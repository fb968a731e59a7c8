"""A what-if on a snapshot saved to a file, run here with no service (``kant whatif --snapshot FILE``): the
request and the answer have the shapes of ``POST /v1/whatif``'s, so the client prints either alike."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kant.config.policy import load_policy, parse_policy
from kant.errors import KantError
from kant.twin.snapshot import TwinSnapshot
from kant.twin.whatif import NodeTemplate, Scenario, compare

__all__ = ["read_snapshot", "whatif_on_file"]


def read_snapshot(path: Path) -> TwinSnapshot:
    """The snapshot saved in ``path`` (``kant whatif --save-snapshot``); a :class:`KantError` naming the
    file when it cannot be read or is not a snapshot."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise KantError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise KantError(f"{path}: not JSON: {exc}") from None
    return TwinSnapshot.from_dict(data, str(path))


def _scenario(sc: Mapping[str, Any]) -> Scenario:
    """A scenario of the request body: a bundled policy's name or a policy file's mapping, nodes added
    (like ``node``), nodes drained, tenants' quotas."""
    pol = sc.get("policy")
    policy = None if pol is None else load_policy(pol) if isinstance(pol, str) else parse_policy(pol, str(sc["name"]))
    node = None if sc.get("node") is None else NodeTemplate(**sc["node"])
    quotas = {t: (q["guaranteed"], q["max"]) for t, q in sc.get("quotas", {}).items()}
    return Scenario(sc["name"], policy, int(sc.get("add_nodes", 0)), node, tuple(sc.get("drain", ())), quotas)


def whatif_on_file(snapshot: Path, body: Mapping[str, Any], html: Path | None = None) -> dict[str, Any]:
    """Run ``body`` (``horizon_h``, ``runs``, ``scenarios``) on the snapshot saved in ``snapshot``; the answer
    as the API gives it (``as_of``, ``horizon_s``, ``runs``, ``scenarios``, ``seconds``). ``html``: also write
    the comparison's page there. Bad input is a :class:`KantError`."""
    snap = read_snapshot(snapshot)
    scenarios = [_scenario(sc) for sc in body["scenarios"]]
    horizon_s = float(body["horizon_h"]) * 3600.0
    t0 = time.perf_counter()
    arrivals = body.get("arrivals", "history")
    if arrivals not in ("history", "none"):
        raise KantError(f"arrivals: {arrivals!r} is not 'history' or 'none'")
    results = compare(snap, scenarios, horizon_s=horizon_s, runs=int(body["runs"]), arrivals=arrivals == "history")
    if html is not None:
        from kant.twin.report import write_whatif_html

        write_whatif_html(html, snap, results)
    return {"as_of": snap.now, "horizon_s": horizon_s, "runs": int(results[0].prediction.starts.shape[0]),
            "arrivals": arrivals, "state_version": snap.info.get("state_version"),
            "band_covers": results[0].prediction.covers if results else "",
            "scenarios": [r.to_dict() for r in results], "seconds": time.perf_counter() - t0}
