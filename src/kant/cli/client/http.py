"""The client's connection to ``kant serve``: where the service is and which token to send
(:func:`resolve_target`: ``--url`` / ``KANT_URL``, ``--token-file`` / ``KANT_TOKEN`` /
``./kant-admin.token``), and :class:`Client`, whose every failure is an :class:`ApiError` with the
message ``error:`` prints (the token never in it)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

__all__ = ["DEFAULT_URL", "TOKEN_FILE", "ApiError", "Client", "Target", "resolve_target"]

DEFAULT_URL = "http://127.0.0.1:8787"
TOKEN_FILE = "kant-admin.token"
TIMEOUT_S = 30.0
_TOKEN_CHARS = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII, no spaces: what a header can carry


class ApiError(Exception):
    """A request that did not succeed; the message is what ``error:`` prints."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Target:
    """Where the service is and which token to send (``source`` names where the token came from)."""

    url: str
    url_source: str
    token: str | None
    source: str | None


def resolve_target(url: str | None, token_file: Path | None) -> Target:
    """``--url`` / ``KANT_URL`` / the default; ``--token-file`` / ``KANT_TOKEN`` / ./kant-admin.token."""
    if url is not None:
        url_source = "--url"
    elif os.environ.get("KANT_URL"):
        url, url_source = os.environ["KANT_URL"], "KANT_URL"
    else:
        url, url_source = DEFAULT_URL, "the default URL"
    url = url.strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ApiError(f"{url_source} {url!r} is not an http:// or https:// URL")
    token: str | None
    if token_file is not None:
        token, source = _read_token(token_file, f"--token-file {token_file}"), f"--token-file {token_file}"
    elif os.environ.get("KANT_TOKEN", "").strip():
        token, source = os.environ["KANT_TOKEN"].strip(), "KANT_TOKEN"
    elif Path(TOKEN_FILE).is_file():
        token, source = _read_token(Path(TOKEN_FILE), f"./{TOKEN_FILE}"), f"./{TOKEN_FILE}"
    else:
        token, source = None, None
    if token is not None and not _TOKEN_CHARS.match(token):
        raise ApiError(f"the token of {source} is not a token: it holds spaces or characters outside printable ASCII")
    return Target(url, url_source, token, source)


def _read_token(path: Path, what: str) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ApiError(f"{what}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ApiError(f"{what}: not a text file") from None
    if not text:
        raise ApiError(f"{what}: the file is empty")
    return text.splitlines()[0].strip()


class Client:
    """A synchronous client of the API; every failure is an :class:`ApiError`."""

    def __init__(self, target: Target, timeout: float = TIMEOUT_S) -> None:
        import httpx

        self.target = target
        self.timeout = timeout
        headers = {"Accept": "application/json", "User-Agent": "kant-cli"}
        if target.token is not None:
            headers["Authorization"] = f"Bearer {target.token}"
        try:
            self._http = httpx.Client(base_url=target.url, headers=headers,
                                      timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)))
        except (httpx.InvalidURL, ValueError) as exc:
            raise ApiError(f"{target.url_source} {target.url!r} is not a URL: {exc}") from None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, path: str, params: Any = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        return self.request("POST", path, json=body, headers=headers)

    def request(self, method: str, path: str, *, params: Any = None, json: Any = None,
                headers: dict[str, str] | None = None, timeout: float | None = None, text: bool = False) -> Any:
        """The answer's JSON (its text with ``text``); ``timeout`` overrides the client's."""
        import httpx

        url = self.target.url
        wait = self.timeout if timeout is None else timeout
        try:
            r = self._http.request(method, path, params=params, json=json, headers=headers,
                                   timeout=httpx.Timeout(wait, connect=min(wait, 10.0)))
        except httpx.TimeoutException:
            raise ApiError(f"cannot reach kant serve at {url}: no answer within {wait:g} s") from None
        except httpx.UnsupportedProtocol:
            raise ApiError(f"{self.target.url_source} {url!r} is not an http:// or https:// URL") from None
        except httpx.HTTPError as exc:
            raise ApiError(f"cannot reach kant serve at {url}: {self._scrub(_reason(exc))}") from None
        if r.status_code >= 400:
            raise ApiError(f"{r.status_code}: {self._scrub(self._detail(r))}", r.status_code)
        if text:
            return r.text
        try:
            return r.json()
        except ValueError:
            raise ApiError(f"{url} answered {method} {path} with something that is not JSON: is it kant serve?") \
                from None

    def _detail(self, r: httpx.Response) -> str:
        try:
            body = r.json()
        except ValueError:
            body = None
        if isinstance(body, dict):
            message, detail = body.get("message"), body.get("detail")
            if isinstance(message, str) and message:
                text = message
            elif isinstance(detail, str) and detail:
                text = detail
            elif detail is not None:
                text = json.dumps(detail, separators=(",", ":"))[:500]
            else:
                text = r.reason_phrase or "error"
        else:
            text = r.reason_phrase or (r.text.strip()[:200] or "error")
        if r.status_code == 401:
            text += (f" (the token of {self.target.source})" if self.target.source is not None
                     else " (give one with KANT_TOKEN or --token-file)")
        return text

    def _scrub(self, text: str) -> str:
        token = self.target.token
        return text.replace(token, "<token>") if token else text


def _reason(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", text)
    return text[:1].lower() + text[1:]
