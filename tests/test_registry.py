"""The plugin and action registry: its tables of built-in modules match what the modules register,
and a policy imports only the modules of the names it lists."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kant.config import parse_policy
from kant.errors import ConfigError
from kant.framework import registry
from kant.framework.action import Action
from kant.framework.plugin import Plugin


def _defined_in(package: str) -> dict[str, str]:
    """NAME -> defining module of every registered plugin or action defined under ``package``."""
    classes: list[type[Plugin] | type[Action]] = [*registry.plugin_classes()]
    classes += [c for c in map(registry.action_class, registry.action_names()) if c is not None]
    return {c.NAME: c.__module__ for c in classes if c.__module__.startswith(package + ".")}


@pytest.mark.parametrize(("table", "package"), [(registry.BUILTIN_PLUGINS, "kant.plugins"),
                                                (registry.BUILTIN_ACTIONS, "kant.actions")])
def test_builtin_tables_match_what_the_modules_register(table: dict[str, str], package: str) -> None:
    defined = _defined_in(package)
    assert sorted(table) == sorted(defined)
    for name, module in defined.items():
        # the table names the module that defines the class, or a package that imports it
        assert module == table[name] or module.startswith(table[name] + "."), name


def test_a_policy_imports_only_the_modules_it_names() -> None:
    code = ("import sys; from kant.config import load_policy; load_policy('kant'); "
            "print(' '.join(m for m in sys.modules if m.startswith(('kant.plugins.', 'kant.actions.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(out.split())
    assert {"kant.actions.allocate", "kant.actions.backfill", "kant.plugins.e_binpack", "kant.plugins.fifo",
            "kant.plugins.priority"} <= loaded
    # modules of names the kant policy does not list
    assert not loaded & {"kant.actions.preempt", "kant.actions.reclaim", "kant.plugins.fgd", "kant.plugins.quota",
                         "kant.plugins.tiresias", "kant.plugins.share_place", "kant.plugins.drf"}


def test_unknown_names_list_every_known_name() -> None:
    with pytest.raises(ConfigError, match=r"unknown plugin 'nope'; known: best-fit, binpack, .*topology-score$"):
        parse_policy({"name": "x", "actions": ["allocate"], "plugins": [{"name": "nope"}]})
    with pytest.raises(ConfigError, match=r"unknown action 'nope'; known: allocate, backfill, .*reclaim$"):
        parse_policy({"name": "x", "actions": ["nope"]})
