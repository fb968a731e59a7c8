"""The one converter of pydantic validation errors into :class:`~kant.errors.ConfigError`: one line
naming the file and the key path of the first problem (``plugins[2].args.weight: ...``).

Used by every typed configuration: policy files, study files (``kant.sweep``), services files
(``kant.inference.services``), trace mappings (``kant.traces.mapping``) and the FGD experiment's
policy arguments. A validator that knows better which key is wrong raises :class:`KeyPathError`.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kant.errors import ConfigError

__all__ = ["KeyPathError", "config_error", "key_path", "validate", "validate_document"]

M = TypeVar("M", bound=BaseModel)

#: parts of a pydantic error location that name a union member or validator, not a key
_TAGS = frozenset({"str", "_ActionSpec", "tuple[str, ...]"})
_VALUE_ERROR = "Value error, "


class KeyPathError(ValueError):
    """Raised in a model validator that knows which key is wrong (``path``, from the document's
    root); the error then names that key instead of the model's location."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def key_path(prefix: str, loc: tuple[int | str, ...]) -> str:
    """``prefix`` followed by ``loc`` as a key path: ``.key`` for names, ``[i]`` for list indices."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _TAGS or part.startswith("function-"):
            continue
        else:
            out += f".{part}" if out else part
    return out


def config_error(source: str, exc: ValidationError, prefix: str = "") -> ConfigError:
    """The first problem of ``exc`` as a one-line :class:`ConfigError` at ``prefix`` + its location,
    with a count of any further problems."""
    errors = exc.errors()
    err = errors[0]
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, KeyPathError):
        path = f"{prefix}.{cause.path}" if prefix and cause.path else (cause.path or prefix)
    else:
        path = key_path(prefix, tuple(err.get("loc", ())))
    msg = str(err.get("msg", "invalid value")).removeprefix(_VALUE_ERROR)
    more = len(errors) - 1
    if more:
        msg += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ConfigError(source, path, msg)


def validate(model: type[M], data: Any, source: str, prefix: str = "") -> M:
    """``data`` as ``model``, or a :class:`ConfigError` naming ``source`` and the key path below
    ``prefix``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise config_error(source, exc, prefix) from None


def validate_document(model: type[M], data: Any, source: str, shape: str) -> M:
    """A whole parsed YAML document as ``model``; ``shape`` says what the file must be, for a
    document that is no mapping."""
    if not isinstance(data, dict):
        raise ConfigError(source, "", shape)
    return validate(model, data, source)
