"""``CycleContext.on`` (a planning view's context, docs/performance.md step 18) is
``dataclasses.replace(ctx, state=...)``: every field but the state the very same object."""

from __future__ import annotations

import dataclasses

from kant.framework.context import CycleContext


def test_on_is_replace_with_the_state() -> None:
    values = {f.name: object() for f in dataclasses.fields(CycleContext)}  # a distinct object per field
    ctx = CycleContext(**values)  # type: ignore[arg-type]
    other = object()
    got = ctx.on(other)  # type: ignore[arg-type]
    want = dataclasses.replace(ctx, state=other)
    assert got is not ctx
    for f in dataclasses.fields(CycleContext):
        assert getattr(got, f.name) is getattr(want, f.name), f.name
    assert got.state is other
    assert ctx.state is values["state"]  # the cycle's own context is untouched
