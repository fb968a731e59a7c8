"""Fair share's decayed usage survives a restart of ``kant serve`` (real processes, a manual clock,
SQLite): it is saved at every move of the clock and on a clean stop, and taken back at the next
start, decayed by the half-life for the time the service was down (``--clock-start`` later), with
the jobs still running through it counted as holding their GPUs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from service.serve_proc import start_server

QUEUES = """\
queues:
  - name: research
    children:
      - {name: team-a, guaranteed: 16}
      - {name: team-b, guaranteed: 16}
fair_share: {half_life_s: 3600}
"""
H = 3600.0


def _held(gpus: float, start: float, end: float, now: float) -> float:
    """Decayed GPU-seconds at ``now`` of ``gpus`` held from ``start`` to ``end``."""
    return gpus * H / math.log(2) * (2 ** (-(now - end) / H) - 2 ** (-(now - start) / H))


def _usage(srv) -> dict[str, float]:  # type: ignore[no-untyped-def]
    r = srv.admin.get("/v1/queues")
    assert r.status_code == 200, r.text
    return {q["name"]: q["usage"] for q in r.json()}


def test_fair_share_usage_survives_a_restart_decayed_for_the_time_down(tmp_path: Path) -> None:
    (tmp_path / "queues.yaml").write_text(QUEUES)
    db = f"sqlite:///{tmp_path / 'kant.db'}"
    extra = ["--queues", str(tmp_path / "queues.yaml")]
    srv = start_server(tmp_path, db, extra=extra)
    try:
        srv.tenant("team-a")
        srv.tenant("team-b")
        for tenant, workers, duration in (("team-a", 2, 100), ("team-b", 1, 100_000)):
            r = srv.admin.post("/v1/jobs", json={"tenant": tenant, "workers": workers, "gpus_per_worker": 8,
                                                "duration_s": duration})
            assert r.status_code == 201, r.text
        srv.advance(1.0)  # both start at 0 (the submit instant), team-a's ends at 100, team-b's runs on
        srv.advance(1000.0)
        a, b = _held(16, 0, 100, 1000), _held(8, 0, 1000, 1000)
        assert _usage(srv)["team-a"] == pytest.approx(a / (a + b), rel=1e-9)
    finally:
        srv.stop()  # a clean stop (SIGTERM)

    # one half-life later: both decayed by half, and team-b's job held its 8 GPUs all along
    srv = start_server(tmp_path, db, extra=[*extra, "--clock-start", str(1000 + H)])
    try:
        a2, b2 = a / 2, b / 2 + _held(8, 1000, 1000 + H, 1000 + H)
        got = _usage(srv)
        assert got["team-a"] == pytest.approx(a2 / (a2 + b2), rel=1e-9)
        assert got["team-b"] == pytest.approx(b2 / (a2 + b2), rel=1e-9)
        srv.advance(1000 + 2 * H)  # (saved at every move of the manual clock)
    finally:
        srv.kill()  # kill -9: what was saved at the last move is what the next start finds

    srv = start_server(tmp_path, db, extra=[*extra, "--clock-start", str(1000 + 2 * H)])
    try:
        a3, b3 = a2 / 2, b2 / 2 + _held(8, 1000 + H, 1000 + 2 * H, 1000 + 2 * H)
        assert _usage(srv)["team-a"] == pytest.approx(a3 / (a3 + b3), rel=1e-9)
    finally:
        srv.stop()
