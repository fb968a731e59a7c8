"""``Status.ok`` is a field set at construction (issue 32: read at every arrival), not a property: it must
say whether the code is SUCCESS for every code and however the status was made (constructor, the
helpers, ``dataclasses.replace``, a pickle round trip), and stay out of equality, hashing and repr."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from kant.framework.status import SUCCESS, Code, Status


@pytest.mark.parametrize("code", list(Code))
def test_ok_is_the_code_being_success(code: Code) -> None:
    made = [Status(code), Status(code, "why", "who"), dataclasses.replace(SUCCESS, code=code),
            dataclasses.replace(Status(Code.ERROR, "x"), code=code)]
    for status in made + [pickle.loads(pickle.dumps(s)) for s in made]:
        assert status.ok is (code == Code.SUCCESS)


def test_ok_stays_out_of_equality_hash_and_repr() -> None:
    a, b = Status.unschedulable("full", "p"), Status.unschedulable("full", "p")
    assert a == b and hash(a) == hash(b) and not a.ok
    assert "ok" not in repr(a)
    assert Status.unresolvable("never").ok is False and SUCCESS.ok is True and str(SUCCESS) == "ok"
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.ok = True  # type: ignore[misc]
