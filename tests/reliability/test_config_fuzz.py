"""Fuzzing of the policy and services files (the traces and mapping files are fuzzed in
tests/test_traces_fuzz.py): every bundled policy and example services file, mutated as a document
(a value replaced with junk of another type, a key deleted, an unknown key added, a list emptied or
its items duplicated) or as text (bytes cut, junk inserted, invalid UTF-8), written to a file and
loaded. A file may load; otherwise it fails with :class:`~kant.errors.KantError` naming the file
(and, for a document that parses, the key). A policy that loads must also build a scheduler: its
plugin arguments are checked there. ``KANT_FUZZ_EXAMPLES`` scales the count (the bench runs 10,000+)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kant.config.policy import bundled_policies, load_policy
from kant.errors import ConfigError, KantError
from kant.inference.services import load_services
from kant.model.cluster import Cluster
from kant.model.store import JobStore
from kant.scheduler import Scheduler

EXAMPLES = int(os.environ.get("KANT_FUZZ_EXAMPLES", "30")) * 4
SERVICES = sorted((Path(__file__).resolve().parents[2] / "examples" / "services").glob("*.yaml"))
POLICIES = sorted(bundled_policies().items())
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-(10**12), 10**12), st.floats(allow_nan=True),
                 st.text(max_size=8), st.sampled_from(["", "-1", "nan", "inf", "1e999", "{}", "x" * 300]),
                 st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn, text: str) -> bytes:
    if draw(st.integers(0, 4)) == 0:  # text-level damage
        data = text.encode()
        cut = draw(st.integers(0, len(data)))
        junk = draw(st.sampled_from([b"", b"\xff\xfe", b": :", b"\t- [", b"{", b"\n  - x\n", b"'"]))
        return data[:cut] + junk + data[cut + draw(st.integers(0, 20)):]
    doc = yaml.safe_load(text)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        if not path:
            doc = draw(JUNK) if draw(st.integers(0, 9)) == 0 else doc
            continue
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        key = path[-1]
        how = draw(st.sampled_from(["junk", "delete", "unknown", "empty", "duplicate"]))
        if how == "junk":
            parent[key] = draw(JUNK)
        elif how == "delete":
            del parent[key]
        elif how == "unknown" and isinstance(parent[key], dict):
            parent[key][draw(st.sampled_from(["surprise", "args", "name", "x-y"]))] = draw(JUNK)
        elif how == "empty" and isinstance(parent[key], list | dict):
            parent[key] = type(parent[key])()
        elif how == "duplicate" and isinstance(parent[key], list) and parent[key]:
            parent[key] = parent[key] + parent[key][:1]
    return yaml.safe_dump(doc, allow_unicode=True).encode()


def _check(err: KantError, path: Path) -> None:
    text = str(err)
    assert str(path) in text, text  # the file is named
    assert "\n" not in text.strip() or isinstance(err, ConfigError), text
    if isinstance(err, ConfigError) and err.path:
        assert err.path in text  # and the key


def _cluster_store() -> tuple[Cluster, JobStore]:
    return Cluster.uniform(2, 8), JobStore(tenant_names=["a", "b"])


@pytest.mark.parametrize(("name", "source"), POLICIES, ids=[n for n, _ in POLICIES])
def test_mutated_policies_give_config_errors(name: str, source: Path) -> None:
    text = source.read_text()

    @settings(max_examples=max(5, EXAMPLES // len(POLICIES)), deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(data=mutated(text))
    def run(data: bytes) -> None:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / f"{name}.yaml"
            path.write_bytes(data)
            try:
                policy = load_policy(str(path))
            except KantError as err:
                _check(err, path)
                return
            try:
                Scheduler(policy, *_cluster_store())
            except KantError as err:  # a plugin's or action's arguments: the error names it
                assert any(w in str(err) for w in ("plugin", "action", "policy")), str(err)

    run()


@pytest.mark.parametrize("source", SERVICES, ids=[p.stem for p in SERVICES])
def test_mutated_services_files_give_config_errors(source: Path) -> None:
    text = source.read_text()

    @settings(max_examples=max(5, EXAMPLES // 2), deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=mutated(text))
    def run(data: bytes) -> None:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / source.name
            path.write_bytes(data)
            try:
                load_services(path)
            except KantError as err:
                _check(err, path)

    run()
