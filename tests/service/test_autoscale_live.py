"""The live autoscaler from measured arrivals: a ``Service`` in this process (wall clock, simulated
executor: replicas are real local processes), a small real :class:`LoadSignals` that counts the
requests this test sends to the ready replicas, and the simulator's ``Hpa`` deciding from it.

(The request route's measurements are the real LoadSignals of ``kant serve``; this one lives in the
test on purpose.)"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kant.inference.autoscaler import HpaConfig, ScalingPolicy, ScalingRules
from kant.service.config import ServeConfig
from kant.service.executors.local import LocalRuns
from kant.service.server import Service
from service.serve_proc import eventually

SERVER = Path(__file__).with_name("replica_server.py")


class CountedArrivals:
    """A LoadSignals: the arrivals recorded (one per request sent), counted over a window."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times: dict[int, deque[float]] = {}
        self._inflight: dict[int, int] = {}

    def record(self, service_id: int) -> None:
        with self._lock:
            self._times.setdefault(service_id, deque()).append(time.monotonic())

    def arrival_rate(self, service_id: int, window_s: float) -> float:
        cut = time.monotonic() - window_s
        with self._lock:
            times = self._times.get(service_id, deque())
            while times and times[0] < cut:
                times.popleft()
            return len(times) / window_s

    def inflight(self, service_id: int) -> int:
        with self._lock:
            return self._inflight.get(service_id, 0)


@pytest.fixture
def svc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    monkeypatch.chdir(tmp_path)  # (the replicas' logs: kant-logs/)
    service = Service(ServeConfig(db_url=f"sqlite:///{tmp_path / 'kant.db'}", cluster="2x8:V100", admin_token="t",
                                  token_out=tmp_path / "token", predict=False))
    service.signals = CountedArrivals()
    service.prepare()
    service.start()
    try:
        eventually(lambda: service.loop is not None and service.loop.alive, "leading", timeout=30)
        yield service
    finally:
        service.close()


def test_autoscale_up_and_down_from_measured_arrivals(svc: Service) -> None:
    signals = svc.signals
    assert isinstance(signals, CountedArrivals) and svc.loop is not None
    svc.db.tenants.create("team")
    svc.tenants.changed()
    fast = ScalingRules(stabilization_window_s=0, policies=(ScalingPolicy(type="Pods", value=4, period_s=1),))
    hpa = HpaConfig(period_s=0.5, target_utilization=0.5, metric_window_s=2, scale_up=fast, scale_down=fast)
    row = svc.db.services.create(tenant="team", name="chat", gpus_per_replica=1, replicas=0, min_replicas=1,
                                 max_replicas=3, capacity_rps=5, autoscaler=hpa.model_dump_json(),
                                 command=f"exec {sys.executable} {SERVER}")
    svc.loop.serving.changed()
    svc.loop.scale(row.id, 1)
    ready = lambda n: len(svc.endpoints.ready(row.id)) == n  # noqa: E731
    eventually(lambda: ready(1), "one ready replica")
    stop = threading.Event()
    served: list[int] = []

    def traffic() -> None:  # about 20 requests/s, round robin over the ready replicas
        k = 0
        with httpx.Client(timeout=5, trust_env=False) as client:
            while not stop.wait(0.05):
                eps = svc.endpoints.ready(row.id)
                if not eps:
                    continue
                signals.record(row.id)
                served.append(client.get(eps[k % len(eps)].url + "/").json()["port"])
                k += 1

    sender = threading.Thread(target=traffic, daemon=True)
    sender.start()
    try:
        # offered load about 20 / 5 = 4 replicas at 50 % target: 8 wanted, 3 at most
        eventually(lambda: ready(3) and svc.db.services.get(row.id).replicas == 3, "scaled up to 3", timeout=90)
        eventually(lambda: len(set(served[-30:])) == 3, "requests reach the three replicas")
    finally:
        stop.set()
        sender.join(10)
    # no arrivals: back to min_replicas, the extra replicas drained and stopped
    eventually(lambda: ready(1) and svc.db.services.get(row.id).replicas == 1 and len(svc.endpoints.all(row.id)) == 1,
               "scaled down to 1", timeout=90)
    stats = svc.loop.serving.stats(row.id)
    assert stats["load"] == 0.0 and stats["scale_up_p50_s"] is not None and stats["failures"] == 0


def test_preempt_sends_the_checkpoint_signal_first(tmp_path: Path) -> None:
    """A local run stopped with why=preempt gets SIGUSR1, then SIGTERM after the grace."""
    from kant.service.executors.base import Launch

    runs = LocalRuns(tmp_path / "logs", tmp_path / "ckpt", checkpoint_grace_s=0.5, stop_grace_s=5)
    script = ("import signal, sys, time\n"
              "signal.signal(signal.SIGUSR1, lambda *a: print('checkpoint', flush=True))\n"
              "signal.signal(signal.SIGTERM, lambda *a: (print('term', flush=True), sys.exit(0)))\n"
              "print('up', flush=True)\n"
              "while True: time.sleep(0.05)\n")
    (tmp_path / "w.py").write_text(script)
    runs.start(Launch(7, 1, ("n0",), 1, 0.0, command=f"exec {sys.executable} {tmp_path / 'w.py'}", service="s"), 0.0)
    eventually(lambda: "up" in runs.logs.tail(7, 1, 0), "the worker is up")
    runs.stop(7, "preempt")
    eventually(lambda: "term\n" in (tmp_path / "logs/job-7/run-1/worker-0.log").read_text(), "terminated")
    assert (tmp_path / "logs/job-7/run-1/worker-0.log").read_text() == "up\ncheckpoint\nterm\n"
    assert runs.poll(1.0) == []  # a stopped run reports nothing
    runs.close()
