"""Registry of plugins and actions by name. Built-ins register on import of ``kant.plugins`` and
``kant.actions``; third-party packages can add theirs through the ``kant.plugins`` entry-point
group (each entry point names a module to import)."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import TypeVar

from kant.framework.plugin import Action, Plugin

__all__ = ["register_plugin", "register_action", "plugin_class", "action_class", "plugin_names", "action_names",
           "plugin_classes"]

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


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    import kant.actions
    import kant.plugins  # noqa: F401

    for ep in entry_points(group="kant.plugins"):
        ep.load()


def _lookup(table: dict[str, type], name: str) -> type | None:
    _load()
    return table.get(name)


def plugin_class(name: str) -> type[Plugin] | None:
    return _lookup(_PLUGINS, name)


def action_class(name: str) -> type[Action] | None:
    return _lookup(_ACTIONS, name)


def _names(table: dict[str, type]) -> list[str]:
    _load()
    return sorted(table)


def plugin_names() -> list[str]:
    return _names(_PLUGINS)


def action_names() -> list[str]:
    return _names(_ACTIONS)


def plugin_classes() -> list[type[Plugin]]:
    """Every registered plugin class, by name."""
    _load()
    return [_PLUGINS[name] for name in sorted(_PLUGINS)]


