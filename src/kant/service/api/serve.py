"""The request route of inference services: ``/v1/services/{service}/serve/{path}``, any method.

A request for a service reaches one of its ready replicas through kant: the caller's token is
checked as on every route (another tenant's service is 404), the replica is chosen and the request
queued by :class:`~kant.service.serving.route.Router` (least outstanding requests; a bounded queue
with a timeout; 503 with ``Retry-After``, never a hang), and the request is sent on over a kept-alive
connection to the replica (:class:`~kant.service.serving.upstream.Upstreams`, open with the app's
lifespan, :func:`lifespan`). ``{path}`` and the query go to the replica as they came, with the
request's headers but kant's ``Authorization`` and the hop-by-hop ones; the replica's answer comes
back as it is (a JSON answer read whole, anything else streamed). A replica that cannot be reached
is a 502 naming it, one that does not answer within ``--route-timeout`` a 504.

``{service}`` is the service's id, or its name among the caller's tenant's active services (a path
segment of digits is an id; an admin token names services by id). Everything it measures is
:class:`~kant.service.serving.measure.Traffic`'s (``svc.traffic``): the API's
``GET /v1/services/{id}/stats``, ``/metrics`` and the live autoscaler read it there.

The route is ``async`` on uvicorn's loop: the service's row and the token come from caches (a miss
is one query in a worker thread), so a request costs no thread hop and no database round trip.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import httpcore
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from kant.service.api.deps import bearer, principal
from kant.service.api.errors import answer, respond
from kant.service.auth import Principal
from kant.service.db.services import ServiceRow
from kant.service.errors import NoReplica, NotFound, ReplicaFailed, ReplicaTimeout, ServiceError
from kant.service.server import Service
from kant.service.serving.endpoints import Endpoint
from kant.service.serving.measure import Answered
from kant.service.serving.route import Router
from kant.service.serving.upstream import Upstreams

__all__ = ["METHODS", "Proxy", "ServeFirst", "lifespan", "router"]

router = APIRouter(tags=["services"])

#: the methods the route passes on
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
#: headers that are the connection's, not the request's (RFC 9110 7.6.1), and those kant sets itself
_DROP_REQUEST = frozenset({b"host", b"authorization", b"connection", b"keep-alive", b"proxy-authorization",
                           b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"upgrade",
                           b"content-length"})
_DROP_ANSWER = frozenset({b"connection", b"keep-alive", b"proxy-authenticate", b"te", b"trailer",
                          b"transfer-encoding", b"upgrade", b"content-length", b"date", b"server"})
#: a JSON answer up to this size is read whole (its ``usage`` counted); others are streamed through
_READ_WHOLE = 4 << 20
#: seconds a service's row (or a name's id) is taken from the cache
ROW_TTL_S = 1.0


class Directory:
    """The services the route serves, by id and by (tenant, name), cached for :data:`ROW_TTL_S`
    seconds; who may see one is :func:`kant.service.api.services.visible_service`'s rule."""

    def __init__(self, svc: Service) -> None:
        self._svc = svc
        self._rows: dict[int, tuple[float, ServiceRow | None]] = {}
        self._names: dict[tuple[str, str], tuple[float, int | None]] = {}

    async def resolve(self, key: str, p: Principal) -> ServiceRow:
        """The service ``key`` (an id, or a name of ``p``'s tenant) if ``p`` may see it and it is
        active; :class:`NotFound` otherwise."""
        if key.isdigit() and len(key) <= 18:
            sid = int(key)
        else:
            if p.tenant is None:
                raise NotFound(f"no service {key!r}: an admin token names a service by its id")
            sid_or_none = await self._name(p.tenant, key)
            if sid_or_none is None:
                raise NotFound(f"no service {key!r} of tenant {p.tenant}")
            sid = sid_or_none
        row = await self._row(sid)
        if row is None or not p.sees(row.tenant):  # visible_service's rule, on the cached row
            raise NotFound(f"no service {key}")
        if row.state != "active":
            raise NotFound(f"service {key} is {row.state}")
        return row

    async def _row(self, sid: int) -> ServiceRow | None:
        now = time.monotonic()
        hit = self._rows.get(sid)
        if hit is not None and now - hit[0] < ROW_TTL_S:
            return hit[1]
        row = await run_in_threadpool(self._svc.db.services.get, sid)
        if len(self._rows) > 10_000:
            self._rows.clear()
        self._rows[sid] = (now, row)
        return row

    async def _name(self, tenant: str, name: str) -> int | None:
        now = time.monotonic()
        hit = self._names.get((tenant, name))
        if hit is not None and now - hit[0] < ROW_TTL_S:
            return hit[1]
        rows = await run_in_threadpool(self._svc.db.services.list, tenant)
        sid = next((r.id for r in rows if r.name == name), None)
        if len(self._names) > 10_000:
            self._names.clear()
        self._names[(tenant, name)] = (now, sid)
        return sid


class Proxy:
    """What the route works with: the service's directory, the router and (while the app runs) the
    shared connection pool."""

    def __init__(self, svc: Service) -> None:
        cfg = svc.config
        self.svc = svc
        self.traffic = svc.traffic
        self.directory = Directory(svc)
        self.router = Router(svc.endpoints, svc.traffic, max_queue=cfg.route_queue,
                             queue_timeout=cfg.route_queue_timeout, replica_limit=cfg.route_concurrency)
        self.timeout = cfg.route_timeout
        self.upstreams: Upstreams | None = None
        self._timeouts: dict[str, float | None] = {"connect": min(self.timeout, 5.0), "read": self.timeout,
                                                   "write": self.timeout, "pool": None}

    async def open(self) -> None:
        self.router.open(asyncio.get_running_loop())
        self.upstreams = Upstreams()

    async def close(self) -> None:
        self.router.close()
        if self.upstreams is not None:
            await self.upstreams.aclose()
            self.upstreams = None

    async def forward(self, row: ServiceRow, request: Request) -> Response:
        """Send ``request`` to a replica of ``row`` and its answer back, measuring it."""
        sid = row.id
        slo = row.slo_ms
        body = await request.body()
        asked_in, asked_out = _asked(body)
        t0 = self.traffic.arrived(sid)
        sent = 0.0
        try:
            upstreams = self.upstreams
            if upstreams is None:
                raise NoReplica(f"service {sid}: the request route is not running", retry_after=1.0)
            ep = await self.router.acquire(sid)
        except ServiceError as exc:
            return self._refused(sid, exc, t0, slo, asked_in, asked_out)
        except asyncio.CancelledError:
            self._answered(sid, 499, t0, 0.0, slo, asked_in, asked_out)
            raise
        streaming = False
        try:
            sent = time.monotonic()
            upstream, conn = await upstreams.send(ep.host, ep.port, httpcore.Request(
                request.method.encode("ascii"), _replica_url(ep, request.scope),
                headers=_request_headers(ep, request.scope, body), content=body or None,
                extensions={"timeout": self._timeouts}))
            ctype, length = _header(upstream, b"content-type"), _header(upstream, b"content-length")
            if b"json" in ctype or (length.isdigit() and int(length) <= _READ_WHOLE):
                try:
                    data = await upstream.aread()
                finally:
                    await upstream.aclose()
                    await upstreams.done(ep.host, ep.port, conn)  # (kept for the next request if it may be)
            else:
                streaming = True
                return self._stream(sid, ep, upstream, conn, upstreams, t0, sent, slo, asked_in, asked_out)
        except httpcore.TimeoutException:
            return self._refused(sid, ReplicaTimeout(
                f"service {sid}: replica job {ep.job_id} at {ep.host}:{ep.port} did not answer within "
                f"{self.timeout:g} s"), t0, slo, asked_in, asked_out, sent)
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
            return self._refused(sid, ReplicaFailed(
                f"service {sid}: replica job {ep.job_id} at {ep.host}:{ep.port} failed: {_reason(exc)}"),
                t0, slo, asked_in, asked_out, sent)
        except asyncio.CancelledError:
            self._answered(sid, 499, t0, sent, slo, asked_in, asked_out, sent_at=sent)
            raise
        finally:
            if not streaming:
                self.router.release(sid, ep)
        used_in, used_out = _usage(data, upstream) if b"json" in ctype else (None, None)
        self._answered(sid, upstream.status, t0, sent, slo, used_in if used_in is not None else asked_in,
                       used_out if used_out is not None else asked_out, sent_at=sent)
        out = Response(content=data, status_code=upstream.status)
        out.raw_headers = [*_answer_headers(upstream), (b"content-length", str(len(data)).encode())]
        return out

    def _stream(self, sid: int, ep: Endpoint, upstream: httpcore.Response, conn: httpcore.AsyncHTTP11Connection,
                upstreams: Upstreams, t0: float, sent: float,
                slo: float | None, asked_in: int | None, asked_out: int | None) -> Response:
        """Pass a streamed answer on as it comes; the request ends at the replica when the stream does
        (or when the answer is dropped unsent: the client went away first)."""
        state = {"code": upstream.status, "done": False}

        async def finish() -> None:
            if state["done"]:
                return
            state["done"] = True
            await upstream.aclose()
            await upstreams.done(ep.host, ep.port, conn)
            self.router.release(sid, ep)
            self._answered(sid, int(state["code"]), t0, sent, slo, asked_in, asked_out, sent_at=sent)

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_stream():
                    yield chunk
            except BaseException:
                state["code"] = 499
                raise
            finally:
                await finish()

        out = _Streamed(chunks(), status_code=upstream.status, finish=finish)
        out.raw_headers = _answer_headers(upstream)
        return out

    def _refused(self, sid: int, exc: ServiceError, t0: float, slo: float | None, asked_in: int | None,
                 asked_out: int | None, sent: float = 0.0) -> Response:
        resp = answer(exc)
        self._answered(sid, resp.status_code, t0, sent, slo, asked_in, asked_out, sent_at=sent)
        return resp

    def _answered(self, sid: int, code: int, t0: float, picked: float, slo: float | None, tokens_in: int | None,
                  tokens_out: int | None, *, sent_at: float = 0.0) -> None:
        now = time.monotonic()
        queue = (picked or now) - t0
        self.traffic.answered(sid, Answered(code=code, queue_s=queue, service_s=now - sent_at if sent_at else 0.0,
                                            response_s=now - t0, prompt_tokens=tokens_in,
                                            completion_tokens=tokens_out, slo_ms=slo))


class _Streamed(StreamingResponse):
    """A streamed answer whose ``finish`` runs however the response ends (sent, or dropped before its
    body was asked for: a generator never started runs no ``finally``)."""

    def __init__(self, content: AsyncIterator[bytes], status_code: int,
                 finish: Callable[[], Awaitable[None]]) -> None:
        super().__init__(content, status_code=status_code)
        self._finish = finish

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._finish()


def _replica_url(ep: Endpoint, scope: MutableMapping[str, Any]) -> httpcore.URL:
    """The replica's URL of this request: the raw path after ``/serve/`` (encoding kept) and the query."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    parts = raw.split(b"/", 5)  # b"", b"v1", b"services", SERVICE, b"serve", REST
    target = b"/" + (parts[5] if len(parts) == 6 else b"")
    query: bytes = scope.get("query_string", b"")
    if query:
        target += b"?" + query
    return httpcore.URL(scheme=b"http", host=ep.host.encode("idna"), port=ep.port, target=target)


def _request_headers(ep: Endpoint, scope: MutableMapping[str, Any], body: bytes) -> list[tuple[bytes, bytes]]:
    """The request's headers for the replica: its own ``Host`` and the body's length, the caller's
    others but :data:`_DROP_REQUEST`."""
    out = [(b"host", f"{ep.host}:{ep.port}".encode("idna"))]
    out += [(k, v) for k, v in scope["headers"] if k not in _DROP_REQUEST]
    if body:
        out.append((b"content-length", b"%d" % len(body)))
    return out


def _answer_headers(upstream: httpcore.Response) -> list[tuple[bytes, bytes]]:
    return [(k.lower(), v) for k, v in upstream.headers if k.lower() not in _DROP_ANSWER]


def _header(upstream: httpcore.Response, name: bytes) -> bytes:
    """The answer's header ``name`` (lower case), lower-cased; empty when absent."""
    for k, v in upstream.headers:
        if k.lower() == name:
            return v.lower()
    return b""


def _count(d: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        v = d.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
    return None


def _asked(body: bytes) -> tuple[int | None, int | None]:
    """The tokens a request's JSON body asks for: prompt (``prompt_tokens``/``input_tokens``) and
    generated (``max_tokens``/``output_tokens``)."""
    if not body or body[:1] != b"{":
        return None, None
    try:
        d = json.loads(body)
    except ValueError:
        return None, None
    if not isinstance(d, dict):
        return None, None
    return _count(d, "prompt_tokens", "input_tokens"), _count(d, "max_tokens", "output_tokens")


def _usage(data: bytes, upstream: httpcore.Response) -> tuple[int | None, int | None]:
    """The tokens a JSON answer's ``usage`` counts (prompt, completion)."""
    if _header(upstream, b"content-encoding") or not data or data[:1] != b"{":
        return None, None
    try:
        d = json.loads(data)
    except ValueError:
        return None, None
    usage = d.get("usage") if isinstance(d, dict) else None
    if not isinstance(usage, dict):
        return None, None
    return _count(usage, "prompt_tokens", "input_tokens"), _count(usage, "completion_tokens", "output_tokens")


def _reason(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.splitlines())[:200]


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The route's shared connection pool and router, open while the app runs."""
    proxy: Proxy = app.state.proxy
    await proxy.open()
    try:
        yield
    finally:
        await proxy.close()


async def serve_request(request: Request) -> Response:
    """A request for the service's replicas (see the module docstring). A plain Starlette route on the
    API's router (FastAPI's per-request dependency solving is most of a small route's cost): the
    caller is :mod:`.deps`' :func:`~.deps.principal`, called here as the other routes have it
    injected; its errors are answered by the app's handlers like every route's."""
    svc: Service = request.app.state.svc
    p = await principal(svc, request, await bearer(request))
    svc.leading()
    proxy: Proxy = request.app.state.proxy
    row = await proxy.directory.resolve(request.path_params["service"], p)
    return await proxy.forward(row, request)


router.add_route("/v1/services/{service}/serve/{path:path}", serve_request, methods=METHODS,
                 include_in_schema=False)


class ServeFirst:
    """An ASGI layer of the app (inside its body limit): a request for a service's replicas goes to
    :func:`serve_request` at once, past the app's router, which would match its path against every
    route of the API first (about a third of the route's own CPU: ``bench/bench_router.py``); its
    errors get the answers the app's handlers give (:func:`~kant.service.api.errors.respond`). Any
    other request goes on to the app. The route stays on the app's router too (one rule, one handler;
    an app without this layer serves it the same)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        parts: list[str] = scope["path"].split("/", 5) if scope["type"] == "http" else []
        # b"", "v1", "services", SERVICE, "serve", REST (REST may be empty)
        if (len(parts) != 6 or parts[1] != "v1" or parts[2] != "services" or parts[4] != "serve" or not parts[3]
                or scope["method"] not in METHODS):
            await self.app(scope, receive, send)
            return
        scope["path_params"] = {"service": parts[3], "path": parts[5]}
        request = Request(scope, receive, send)
        try:
            response = await serve_request(request)
        except Exception as exc:  # (as the app's handlers answer it; a bug is a 500 and a log line)
            response = await respond(request, exc)
        await response(scope, receive, send)
