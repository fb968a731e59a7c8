"""The live half of the metric registry (:data:`kant.metrics.registry.METRICS`): a metric added with one
line, with a ``live`` value, is computed after each turn of the loop and shown on ``GET /v1/cluster``
(``metrics``), as the Prometheus gauge ``kant_<key>`` and in ``kant top``, with no other file touched;
the built-in GAR, SOR and GFR go the same way."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kant.metrics import registry
from kant.metrics.occupancy import ClusterNow
from kant.service.config import ServeConfig
from kant.service.serve import build_app
from kant.service.server import Service


def busy_gpus(now: ClusterNow) -> float | None:
    """A made-up live metric: allocated GPUs, or None on an idle cluster."""
    return float(now.allocated_gpus) if now.allocated_gpus else None


def busy_gpus_of_run(run: object) -> None:
    """Its side in a simulation's summary: none (a live-only metric; None leaves it out)."""
    return None


def test_a_live_metric_added_with_one_registry_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "METRICS", (*registry.METRICS, registry.Metric(
        "busy", f"{__name__}:busy_gpus_of_run", live=(registry.Live("busy_gpus", "GPUs allocated now",
                                                                    f"{__name__}:busy_gpus"),))))
    svc = Service(ServeConfig(db_url=f"sqlite:///{tmp_path}/k.db", token_out=tmp_path / "t", cluster="tiny",
                              clock="manual", predict=False))
    svc.prepare()
    try:
        svc.start()
        svc.ready()  # (what serve() calls once uvicorn listens: the admin token file is written then)
        deadline = time.monotonic() + 30
        while (svc.loop is None or svc.loop.view is None) and time.monotonic() < deadline:
            time.sleep(0.02)
        client = TestClient(build_app(svc))
        admin = {"Authorization": f"Bearer {(tmp_path / 't').read_text().strip()}"}
        assert client.post("/v1/tenants", json={"name": "a"}, headers=admin).status_code == 201
        idle = client.get("/v1/cluster", headers=admin).json()
        # tiny: 4 nodes x 8 GPUs, all free: GAR 0, SOR and GFR undefined (no demand, no partly used
        # node but free GPUs: GFR (GPUs) = 0 / 32 = 0, GFR (nodes) = 0 / 4 = 0)
        assert idle["metrics"] == {"gar": 0.0, "sor": None, "gfr_nodes": 0.0, "gfr_gpus": 0.0, "busy_gpus": None}
        r = client.post("/v1/jobs", json={"tenant": "a", "workers": 1, "gpus_per_worker": 3, "duration_s": 100},
                        headers=admin)
        assert r.status_code == 201, r.text
        assert client.post("/v1/clock", json={"to": 1.0}, headers=admin).status_code == 200
        now = client.get("/v1/cluster", headers=admin).json()
        # 3 of 32 GPUs: GAR 3/32; SOR 3 / min(32, 3 + 0) = 1; one node of 4 partly used; 5 of 29 free on it
        assert now["metrics"] == {"gar": 3 / 32, "sor": 1.0, "gfr_nodes": 0.25, "gfr_gpus": 5 / 29, "busy_gpus": 3.0}
        assert (now["gar"], now["sor"], now["gfr_nodes"], now["gfr_gpus"]) == (3 / 32, 1.0, 0.25, 5 / 29)
        text = client.get("/metrics", headers=admin).text
        assert "# HELP kant_busy_gpus GPUs allocated now" in text and "kant_busy_gpus 3.0" in text
        assert "kant_gar 0.09375" in text  # (the built-in gauges are the registry's too)
        from rich.console import Console

        from kant.cli.client.common import Clock
        from kant.cli.client.top import _frame

        console = Console(width=200, record=True)
        console.print(_frame(now, Clock(0.0, "manual"), "http://x"))
        assert "busy_gpus  3" in console.export_text()
    finally:
        svc.close()
