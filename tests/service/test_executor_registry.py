"""The executor table (:data:`kant.service.executors.EXECUTORS`): an executor added with one module and
one line is offered by ``kant serve --executor`` with its own options, built from its settings, and
run by the service; the built-in ones keep the options they always had."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kant.cli._common import DEFAULT_CLUSTER
from kant.service import executors
from kant.service.config import ServeConfig
from kant.service.executors import EXECUTORS, ExecutorEntry, ExecutorSettings, SimulatedExecutor, make_executor
from kant.service.executors.ray_exec import RaySettings

TOY = '''
from typing import Annotated

from pydantic import Field

from kant.service.executors import ExecutorSettings, Option, SimulatedExecutor


class ToySettings(ExecutorSettings):
    speed: Annotated[float, Option("--toy-speed")] = Field(2.0, gt=0, le=10, description="how fast toy jobs run.")


class ToyExecutor(SimulatedExecutor):
    name = "toy"
    discovers_nodes = True  # (it has none: the service then needs --cluster, or the database's nodes)

    def __init__(self, speed: float) -> None:
        super().__init__()
        self.speed = speed

    @classmethod
    def from_settings(cls, settings: ToySettings) -> "ToyExecutor":
        return cls(settings.speed)
'''


@pytest.fixture
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, ExecutorEntry]:
    # the module: an executor class and its settings
    (tmp_path / "toy_exec.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    # the registry line
    table = {**EXECUTORS, "toy": ExecutorEntry("toy_exec:ToyExecutor", "toy_exec:ToySettings", "a toy")}
    monkeypatch.setattr(executors, "EXECUTORS", table)
    return table


def test_an_executor_added_with_one_registry_line(table: dict[str, ExecutorEntry], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from kant.cli.serve import serve_command

    settings_model = table["toy"].load_settings()
    toy = make_executor("toy")
    assert type(toy).__name__ == "ToyExecutor" and toy.speed == 2.0  # type: ignore[attr-defined]
    assert make_executor("toy", settings_model(speed=3.5)).speed == 3.5  # type: ignore[attr-defined,call-arg]

    # kant serve offers it, with its option (help, type and bounds from the settings model)
    command = serve_command(table)
    runner = CliRunner()
    help_text = " ".join(runner.invoke(command, ["--help"], terminal_width=200).output.split())
    assert "--executor [simulated|ray|toy]" in help_text
    assert "Where jobs run: simulated (a job runs for its duration_s), ray (" in help_text
    assert "docs/ray.md) or toy (a toy)." in help_text
    assert "--toy-speed NUMBER With --executor toy: how fast toy jobs run. [default: 2.0; 0<x<=10]" in help_text
    bad = runner.invoke(command, ["--executor", "toy", "--toy-speed", "11"])
    assert bad.exit_code == 2 and "Invalid value for '--toy-speed'" in bad.output

    # ... and passes its settings to the service (an executor with nodes of its own: no default cluster)
    seen: list[ServeConfig] = []
    monkeypatch.setattr("kant.service.serve.serve", seen.append)
    done = runner.invoke(command, ["--executor", "toy", "--toy-speed", "4", "--ray-address", "10.0.0.1:6379"])
    assert done.exit_code == 0, done.output
    (config,) = seen
    assert config.executor == "toy" and config.executor_settings == settings_model(speed=4.0)  # type: ignore[call-arg]
    assert config.cluster is None
    runner.invoke(command, ["--db", "sqlite:///x.db"])
    assert seen[1].executor == "simulated" and type(seen[1].executor_settings) is ExecutorSettings
    assert seen[1].cluster == DEFAULT_CLUSTER

    # the service runs it
    from kant.service.server import Service

    svc = Service(ServeConfig(db_url=f"sqlite:///{tmp_path}/k.db", token_out=tmp_path / "t", cluster="tiny",
                              clock="manual", predict=False, executor="toy",
                              executor_settings=settings_model(speed=5.0)))  # type: ignore[call-arg]
    svc.prepare()
    try:
        svc.start()
        deadline = time.monotonic() + 30
        while (svc.loop is None or not svc.loop.alive) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert svc.loop is not None and type(svc.loop.executor).__name__ == "ToyExecutor"
        assert svc.loop.executor.speed == 5.0  # type: ignore[attr-defined]
    finally:
        svc.close()


def test_the_builtin_executors_options() -> None:
    from kant.cli.serve import executor_options

    _, settings = executor_options(EXECUTORS)
    assert settings == {"ray_address": ("ray", "address"), "log_dir": ("ray", "log_dir"),
                        "checkpoint_dir": ("ray", "checkpoint_dir"), "ray_start_timeout": ("ray", "start_timeout"),
                        "stop_grace": ("ray", "stop_grace"), "checkpoint_grace": ("ray", "checkpoint_grace")}
    assert RaySettings() == RaySettings(address="auto", log_dir=Path("kant-logs"),
                                        checkpoint_dir=Path("kant-checkpoints"), start_timeout=60.0, stop_grace=10.0,
                                        checkpoint_grace=30.0)
    with pytest.raises(ValueError, match="greater than 0"):
        RaySettings(start_timeout=0)
    assert not EXECUTORS["simulated"].load().discovers_nodes
    assert isinstance(make_executor("simulated"), SimulatedExecutor)
    with pytest.raises(TypeError, match="takes ExecutorSettings, not RaySettings"):
        make_executor("simulated", RaySettings())
    with pytest.raises(ValueError, match="unknown executor 'k8s'; known: simulated, ray"):
        make_executor("k8s")
