"""``kant tenants create|list|set-quota`` and ``kant tokens create|list|revoke`` through the API, on
SQLite and PostgreSQL; and the README's first ``kant submit`` with the admin token (no --tenant): the
job goes to the tenant ``default``, made on first use."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from service.inproc import App, app_for


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    with app_for(request, tmp_path_factory.mktemp("tenants"), request.param) as a:
        yield a


def _ok(result: object) -> str:
    assert result.exit_code == 0, (result.stdout, result.stderr)  # type: ignore[attr-defined]
    return str(result.stdout)  # type: ignore[attr-defined]


def _err(result: object) -> str:
    assert result.exit_code == 2, (result.stdout, result.stderr)  # type: ignore[attr-defined]
    return str(result.stderr).strip()  # type: ignore[attr-defined]


def test_tenants_create_list_set_quota(app: App) -> None:
    out = _ok(app.kant("tenants", "create", "vision", "--guaranteed", "8", "--max", "16", "--max-time", "2:00:00"))
    assert out.strip() == "tenant vision created: guaranteed 8, max 16 GPUs; default time -, max time 2h00m"
    assert _err(app.kant("tenants", "create", "vision")) == "error: 409: tenant 'vision' already exists"
    assert _err(app.kant("tenants", "create", "nlp", "--guaranteed", "9", "--max", "4")) == (
        "error: 422: max_gpus is below guaranteed_gpus"
    )
    assert "Invalid value for '--max'" in _err(app.kant("tenants", "create", "nlp", "--max", "-1"))
    out = _ok(app.kant("tenants", "set-quota", "vision", "--max", "none", "--default-time", "30"))
    assert out.strip() == "tenant vision set: guaranteed 8, max - GPUs; default time 30m00s, max time 2h00m"
    assert _err(app.kant("tenants", "set-quota", "vision")).startswith("error: nothing to change")
    assert _err(app.kant("tenants", "set-quota", "vision", "--default-time", "3:00:00")) == (
        "error: 422: default_time_limit_s: the default time limit is above the maximum time limit (--default-time)"
    )
    assert _err(app.kant("tenants", "set-quota", "nope", "--max", "1")) == "error: 404: no tenant 'nope'"
    lines = _ok(app.kant("tenants", "list")).splitlines()
    assert lines[0].split() == ["TENANT", "GUARANTEED", "MAX", "RUNNING_GPUS", "PENDING", "DEFAULT_TIME", "MAX_TIME"]
    assert ["vision", "8", "-", "0", "0", "30m00s", "2h00m"] in [line.split() for line in lines[1:]]


def test_tokens_create_list_revoke(app: App, tmp_path: Path) -> None:
    _ok(app.kant("tenants", "create", "audio"))
    made = app.kant("tokens", "create", "--tenant", "audio", "--name", "ci", "--ttl", "90d")
    token = _ok(made).strip()
    assert token.startswith("kant_") and "shown this once" in made.stderr
    listing = [line.split() for line in _ok(app.kant("tokens", "list", "--tenant", "audio")).splitlines()]
    assert listing[0] == ["ID", "ROLE", "TENANT", "NAME", "CREATED", "EXPIRES", "REVOKED"]
    (row,) = listing[1:]
    assert row[1:4] == ["tenant", "audio", "ci"] and row[-1] == "-" and token not in " ".join(row)
    # the tenant token works, and sees its own tenant only
    assert [line.split()[0] for line in _ok(app.kant("tenants", "list", token=token)).splitlines()] == [
        "TENANT",
        "audio",
    ]
    assert _err(app.kant("tokens", "list", token=token)) == "error: 403: this needs an admin token"
    assert _ok(app.kant("tokens", "revoke", row[0])).strip() == f"token {row[0]}: revoked"
    assert "401: invalid, expired or revoked token" in _err(app.kant("tenants", "list", token=token))
    assert _err(app.kant("tokens", "revoke", row[0])) == f"error: 404: no active token {row[0]}"
    # an admin token into a file (mode 600)
    out = tmp_path / "ops.token"
    assert "written to" in _ok(app.kant("tokens", "create", "--admin", "--name", "ops", "--out", str(out)))
    assert out.stat().st_mode & 0o777 == 0o600 and _ok(app.kant("tokens", "list", token=out.read_text().strip()))
    assert (
        _err(app.kant("tokens", "create")) == "error: give --tenant NAME (a tenant's token) or --admin (an admin token)"
    )


def test_first_submit_of_the_readme_goes_to_the_default_tenant(app: App) -> None:
    job = int(_ok(app.kant("submit", "--workers", "2", "--gpus", "8", "--estimate", "2h", "--", "python", "train.py")))
    got = app.call("GET", f"/v1/jobs/{job}").json()
    assert (got["tenant"], got["user"], got["workers"], got["gpus_per_worker"]) == ("default", "default", 2, 8)
    assert "default" in _ok(app.kant("tenants", "list"))
    again = int(_ok(app.kant("submit", "--gpus", "1", "--", "true")))
    assert app.call("GET", f"/v1/jobs/{again}").json()["tenant"] == "default"
    for j in (job, again):
        _ok(app.kant("cancel", str(j)))
