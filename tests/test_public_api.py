"""The curated public API: ``kant`` and ``kant.framework`` re-export their names lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

import kant
import kant.framework


@pytest.mark.parametrize("module", [kant, kant.framework])
def test_every_public_name_resolves(module: object) -> None:
    names = module.__all__  # type: ignore[attr-defined]
    assert names and len(set(names)) == len(names)
    for name in names:
        assert getattr(module, name) is not None, name
        assert name in dir(module)


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        kant.nope  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        kant.framework.nope  # type: ignore[attr-defined]  # noqa: B018


def test_re_exports_are_the_defining_objects() -> None:
    from kant.framework.plugin import Score
    from kant.scheduler import Scheduler
    from kant.traces.registry import load_trace

    assert kant.Scheduler is Scheduler and kant.load_trace is load_trace and kant.framework.Score is Score


def test_import_kant_is_cheap() -> None:
    # `import kant` (and `import kant.framework`) must not pull in NumPy, the scheduler or even
    # `typing` (which alone costs more than the rest): the CLI's start-up time depends on it
    code = ("import sys; had = 'typing' in sys.modules; import kant, kant.framework; "
            "print(sorted(m for m in sys.modules if m.startswith(('kant', 'numpy', 'pydantic'))), "
            "had or 'typing' not in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['kant', 'kant.framework'] True"
