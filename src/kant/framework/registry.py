"""Registry of plugins and actions by name. Built-ins register when their module is imported;
third-party packages can add theirs through the ``kant.plugins`` entry-point group (each entry point
names a module to import).

A lookup by a built-in name imports only that name's module (:data:`BUILTIN_PLUGINS`,
:data:`BUILTIN_ACTIONS`), so loading a policy costs the plugins and actions it names, not all of
them. Listing the names, and looking up any other name, first imports every built-in module and
every entry point."""

from __future__ import annotations

import importlib
import pkgutil
from typing import TypeVar

from kant.framework.action import Action
from kant.framework.plugin import Plugin

__all__ = ["register_plugin", "register_action", "plugin_class", "action_class", "plugin_names", "action_names",
           "plugin_classes", "BUILTIN_PLUGINS", "BUILTIN_ACTIONS"]

#: built-in plugin name -> the module that registers it (``tests/test_registry.py`` checks this
#: table against what the modules of ``kant.plugins`` register)
BUILTIN_PLUGINS: dict[str, str] = {
    "best-fit": "kant.plugins.best_fit",
    "binpack": "kant.plugins.binpack",
    "co-schedule": "kant.plugins.co_schedule",
    "dot-product": "kant.plugins.share_place",
    "drf": "kant.plugins.drf",
    "e-binpack": "kant.plugins.e_binpack",
    "fgd": "kant.plugins.fgd",
    "fifo": "kant.plugins.fifo",
    "gpu-clustering": "kant.plugins.share_place",
    "gpu-packing": "kant.plugins.share_place",
    "priority": "kant.plugins.priority",
    "qssf": "kant.plugins.qssf",
    "quota": "kant.plugins.quota",
    "queues": "kant.plugins.queues",
    "queues-by-type": "kant.plugins.queues",
    "fair-share": "kant.plugins.fair_share",
    "random": "kant.plugins.random_score",
    "random-pick": "kant.plugins.share_place",
    "residual-fit": "kant.plugins.share_place",
    "runtime-estimator": "kant.plugins.estimator",
    "sjf": "kant.plugins.sjf",
    "spread": "kant.plugins.spread",
    "srtf": "kant.plugins.srtf",
    "tiresias-las": "kant.plugins.tiresias",
    "topology": "kant.plugins.topology",
    "topology-score": "kant.plugins.topology",
}
#: built-in action name -> the module that registers it (checked as :data:`BUILTIN_PLUGINS`)
BUILTIN_ACTIONS: dict[str, str] = {
    "allocate": "kant.actions.allocate",
    "backfill": "kant.actions.backfill",
    "elastic-grow": "kant.actions.elastic",
    "elastic-shrink": "kant.actions.elastic",
    "inference-reclaim": "kant.actions.inference_reclaim",
    "las-repack": "kant.actions.las_repack",
    "preempt": "kant.actions.preempt",
    "reclaim": "kant.actions.reclaim",
}
#: the packages whose every public module is imported by :func:`_load_all`
_BUILTIN_PACKAGES = ("kant.actions", "kant.plugins")

_PLUGINS: dict[str, type[Plugin]] = {}
_ACTIONS: dict[str, type[Action]] = {}
_loaded = False

P = TypeVar("P", bound=type[Plugin])
A = TypeVar("A", bound=type[Action])


def register_plugin(cls: P) -> P:
    if not cls.NAME:
        raise ValueError(f"{cls.__name__} has no NAME")
    if cls.NAME in _PLUGINS and _PLUGINS[cls.NAME] is not cls:
        raise ValueError(f"plugin name {cls.NAME!r} registered twice")
    _PLUGINS[cls.NAME] = cls
    return cls


def register_action(cls: A) -> A:
    if not cls.NAME:
        raise ValueError(f"{cls.__name__} has no NAME")
    if cls.NAME in _ACTIONS and _ACTIONS[cls.NAME] is not cls:
        raise ValueError(f"action name {cls.NAME!r} registered twice")
    _ACTIONS[cls.NAME] = cls
    return cls


def _load_all() -> None:
    """Import every built-in plugin and action module and every ``kant.plugins`` entry point."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for package in _BUILTIN_PACKAGES:
        path = importlib.import_module(package).__path__
        for module in sorted(m.name for m in pkgutil.iter_modules(path) if not m.name.startswith("_")):
            importlib.import_module(f"{package}.{module}")
    from importlib.metadata import entry_points

    for ep in entry_points(group="kant.plugins"):
        ep.load()


def _lookup(table: dict[str, type], builtin: dict[str, str], name: str) -> type | None:
    if name not in table and name in builtin:
        importlib.import_module(builtin[name])
    if name not in table:
        _load_all()
    return table.get(name)


def plugin_class(name: str) -> type[Plugin] | None:
    return _lookup(_PLUGINS, BUILTIN_PLUGINS, name)


def action_class(name: str) -> type[Action] | None:
    return _lookup(_ACTIONS, BUILTIN_ACTIONS, name)


def _names(table: dict[str, type]) -> list[str]:
    _load_all()
    return sorted(table)


def plugin_names() -> list[str]:
    return _names(_PLUGINS)


def action_names() -> list[str]:
    return _names(_ACTIONS)


def plugin_classes() -> list[type[Plugin]]:
    """Every registered plugin class, by name."""
    _load_all()
    return [_PLUGINS[name] for name in sorted(_PLUGINS)]
