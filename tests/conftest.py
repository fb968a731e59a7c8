from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))

settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


# --- under pytest-xdist (``-n``; the README's test command) -----------------------------------------
RAY = "ray"


def xdist_unit(nodeid: str) -> str:
    """The work unit of a test under xdist, which runs on one worker, in order: its file (a module's
    fixtures, e.g. a ``kant serve`` or a browser, start once); the files that start a local Ray
    cluster (under tests/ray/, or named ``*_ray.py``) make one unit, so that two clusters never run
    at once."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/ray/") or path.endswith("_ray.py"):
        return RAY
    return path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``-n`` (``--dist load``, the default) and ``--dist loadfile``: the units of :func:`xdist_unit`,
    in the order the workers collected them (:func:`pytest_collection_modifyitems`). Other ``--dist``
    modes are xdist's own."""
    if config.getoption("dist") not in ("load", "loadfile"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return xdist_unit(nodeid)

    config.option.loadscopereorder = False  # (xdist's reordering puts units with many tests first)
    return UnitScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, the long units first, so that none of them is what a worker still runs
    at the end while the other waits: the Ray unit, then the files with a test marked ``slow``, then
    the rest in their usual order (the service tests before the many quick core tests)."""
    if not hasattr(config, "workerinput"):  # (not an xdist worker: the usual order)
        return
    slow = {xdist_unit(item.nodeid) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: 0 if xdist_unit(item.nodeid) == RAY else 1 if xdist_unit(item.nodeid) in slow else 2)


@pytest.fixture(scope="session")
def philly_jobs():  # type: ignore[no-untyped-def]
    from kant.traces import read_philly

    return read_philly()
