"""The one converter of pydantic validation errors (kant.config.validation), used by policy, study,
services and trace-mapping files."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, model_validator

from kant.config.validation import KeyPathError, validate, validate_document
from kant.errors import ConfigError


class _Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int = 0


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[_Item] = []
    name: str | _Item = ""

    @model_validator(mode="after")
    def _check(self) -> _Doc:
        if self.name == "bad":
            raise KeyPathError("name", "must not be 'bad'")
        if self.name == "plain":
            raise ValueError("a plain model error")
        return self


@pytest.mark.parametrize(("data", "prefix", "expected"), [
    # list indices in brackets, keys after dots, below the prefix
    ({"items": [{"n": 1}, {"n": "x"}]}, "", "f.yaml: items[1].n: Input should be a valid integer, unable to parse "
                                            "string as an integer"),
    ({"items": [{"m": 1}]}, "plugins[2].args", "f.yaml: plugins[2].args.items[0].m: Extra inputs are not permitted"),
    # a validator that knows the key names it; pydantic's "Value error, " prefix is dropped
    ({"name": "bad"}, "", "f.yaml: name: must not be 'bad'"),
    ({"name": "bad"}, "x", "f.yaml: x.name: must not be 'bad'"),
    ({"name": "plain"}, "", "f.yaml: a plain model error"),
    # the first problem, and how many more there are
    ({"items": [{"n": "x"}, {"n": "y"}], "other": 1}, "",
     "f.yaml: items[0].n: Input should be a valid integer, unable to parse string as an integer (and 2 more problems)"),
])
def test_one_line_with_the_key_path(data: dict[str, object], prefix: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(_Doc, data, "f.yaml", prefix)
    assert str(info.value) == expected


def test_a_document_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match=r"^f.yaml: a doc must be a mapping$"):
        validate_document(_Doc, [1], "f.yaml", "a doc must be a mapping")
    assert validate_document(_Doc, {"items": [{"n": 2}]}, "f.yaml", "-").items[0].n == 2
