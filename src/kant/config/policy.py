"""Policy files: a named list of actions and plugins with typed arguments, loaded from YAML.

A policy file looks like::

    name: volcano-binpack
    description: Volcano's default actions with the binpack plugin
    actions: [allocate]              # or [{name: allocate, args: {blocking: true}}]
    plugins:
      - name: priority
      - name: fifo
      - name: binpack
        weight: 1.0
        args: {}

Everything is validated on load: an unknown key, plugin, action or argument, or a value of the wrong
type, raises :class:`~kant.errors.ConfigError` naming the file and the key path
(``plugins[2].args.weight``). Nothing falls back silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kant.config.validation import validate, validate_document
from kant.config.yaml_file import read_yaml
from kant.errors import ConfigError
from kant.framework.action import Action
from kant.framework.plugin import Place, Plugin
from kant.framework.registry import action_class, action_names, plugin_class, plugin_classes, plugin_names

__all__ = ["Policy", "PluginEntry", "ActionEntry", "load_policy", "parse_policy", "bundled_policies"]


class _PluginSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    weight: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    args: dict[str, Any] = Field(default_factory=dict)


class _ActionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class _PolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    description: str = ""
    actions: list[str | _ActionSpec] = Field(min_length=1)
    plugins: list[_PluginSpec] = Field(default_factory=list)


@dataclass(frozen=True)
class PluginEntry:
    cls: type[Plugin]
    args: BaseModel
    weight: float

    def build(self) -> Plugin:
        return self.cls(self.args, self.weight)


@dataclass(frozen=True)
class ActionEntry:
    cls: type[Action]
    args: BaseModel

    def build(self) -> Action:
        return self.cls(self.args)


@dataclass(frozen=True)
class Policy:
    name: str
    description: str
    actions: tuple[ActionEntry, ...]
    plugins: tuple[PluginEntry, ...]
    source: str = ""

    def build_plugins(self) -> list[Plugin]:
        return [p.build() for p in self.plugins]

    def build_actions(self) -> list[Action]:
        return [a.build() for a in self.actions]

    def to_dict(self) -> dict[str, Any]:
        """The policy as a policy file's mapping (``parse_policy`` of it gives this policy back)."""
        return {
            "name": self.name,
            "description": self.description,
            "actions": [{"name": a.cls.NAME, "args": a.args.model_dump(mode="json")} for a in self.actions],
            "plugins": [{"name": p.cls.NAME, "weight": p.weight, "args": p.args.model_dump(mode="json")}
                        for p in self.plugins],
        }


def parse_policy(data: Any, source: str = "<policy>") -> Policy:
    """Validate an already-parsed YAML document into a :class:`Policy`."""
    doc = validate_document(_PolicyFile, data, source, "a policy file must be a mapping with name, actions and plugins")
    actions: list[ActionEntry] = []
    for i, spec in enumerate(doc.actions):
        aspec = _ActionSpec(name=spec) if isinstance(spec, str) else spec
        acls = action_class(aspec.name)
        if acls is None:
            if plugin_class(aspec.name) is not None:
                raise ConfigError(source, f"actions[{i}]",
                                  f"{aspec.name!r} is a plugin, not an action: list it under plugins")
            known = ", ".join(action_names())
            raise ConfigError(source, f"actions[{i}]", f"unknown action {aspec.name!r}; known: {known}")
        aargs = validate(acls.Args, aspec.args, source, f"actions[{i}].args")
        actions.append(ActionEntry(acls, aargs))
    plugins: list[PluginEntry] = []
    seen: dict[str, int] = {}
    for i, pspec in enumerate(doc.plugins):
        pcls = plugin_class(pspec.name)
        if pcls is None:
            if action_class(pspec.name) is not None:
                raise ConfigError(source, f"plugins[{i}].name",
                                  f"{pspec.name!r} is an action, not a plugin: list it under actions")
            known = ", ".join(plugin_names())
            raise ConfigError(source, f"plugins[{i}].name", f"unknown plugin {pspec.name!r}; known: {known}")
        if pspec.name in seen:
            first = seen[pspec.name]
            raise ConfigError(source, f"plugins[{i}].name", f"plugin {pspec.name!r} already listed at plugins[{first}]")
        seen[pspec.name] = i
        pargs = validate(pcls.Args, pspec.args, source, f"plugins[{i}].args")
        plugins.append(PluginEntry(pcls, pargs, pspec.weight))
    policy = Policy(doc.name, doc.description, tuple(actions), tuple(plugins), source)
    _check_combination(policy)
    return policy


def _check_combination(policy: Policy) -> None:
    """Plugins and actions that cannot work together: two gang placers, an action without the plugin
    kind it needs, an argument naming a plugin of the wrong kind (``rank_by``)."""
    placers = [i for i, p in enumerate(policy.plugins) if issubclass(p.cls, Place)]
    if len(placers) > 1:
        names = ", ".join(policy.plugins[i].cls.NAME for i in placers)
        raise ConfigError(policy.source, f"plugins[{placers[1]}]", f"at most one gang placement plugin, got {names}")
    classes = [p.cls for p in policy.plugins]
    for i, action in enumerate(policy.actions):
        problem = _missing_need(action.cls, classes) or action.cls.check_plugins(action.args, classes)
        if problem is not None:
            key, why = problem
            raise ConfigError(policy.source, f"actions[{i}]{'.' + key if key else ''}", why)


def _missing_need(action: type[Action], plugins: list[type[Plugin]]) -> tuple[str, str] | None:
    """The first plugin kind of ``action.NEEDS`` that none of ``plugins`` is, as (key path below
    the action's entry, reason) with the registered plugins of that kind as a hint; None if none."""
    for kind in action.NEEDS:
        if not any(issubclass(p, kind) for p in plugins):
            have = [p.NAME for p in plugin_classes() if issubclass(p, kind)]
            hint = f" (one of: {', '.join(have)})" if have else ""
            return "", f"the {action.NAME} action needs a {kind.__name__} plugin in the policy{hint}"
    return None


def bundled_policies() -> dict[str, Path]:
    """Policy files shipped with kant, by name (file stem)."""
    root = resources.files("kant.policies")
    return {
        Path(str(entry)).stem: Path(str(entry))
        for entry in root.iterdir()
        if str(entry).endswith(".yaml")
    }


def load_policy(arg: str | Path) -> Policy:
    """Load a policy from a YAML file path or a bundled policy name (``k8s-default``...)."""
    path = Path(arg)
    if not path.exists():
        bundled = bundled_policies()
        if str(arg) in bundled:
            path = bundled[str(arg)]
        else:
            names = ", ".join(sorted(bundled))
            raise ConfigError(str(arg), "", f"no such policy file or bundled policy; bundled: {names}")
    return parse_policy(read_yaml(path), str(path))
