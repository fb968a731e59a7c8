"""Reading a YAML configuration file with errors that name the file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kant.errors import ConfigError

__all__ = ["read_yaml"]


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file; an unreadable file or bad YAML raises :class:`ConfigError` (path ``""``)
    whose message says the line, e.g. ``policy.yaml: line 3: not valid YAML: ...``."""
    p = Path(path)
    source = str(p)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(source, "", "cannot read: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(source, "", f"cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ConfigError(source, "", f"{where}not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:  # e.g. an impossible date value
        raise ConfigError(source, "", f"not valid YAML: {exc}") from None
