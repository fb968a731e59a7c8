"""The request route's connections to replicas: httpcore's HTTP/1.1 connections (httpx's core; the
HTTP is h11's), kept alive per replica address by :class:`Upstreams`, on a network backend of
asyncio's own streams. ``kant load`` (:mod:`kant.service.serving.replay`) and ``bench/bench_router.py``
send their requests with the same class (:meth:`Upstreams.call`): a load generator on httpx's client
spent 1.0-1.7 ms of CPU per request, itself the bottleneck at 500 requests/s on two CPUs.

Both parts replace httpcore's defaults because of what they cost a route whose whole work is to pass
requests on (``bench/bench_router.py``; docs/inference.md, "The route's overhead"):

- httpcore's ``AsyncConnectionPool`` looks at every connection it holds, to every replica, several
  times per request (about a third of the route's CPU with a few dozen connections open);
  :class:`Upstreams` keeps a stack of idle connections per address: taking and giving back one is
  O(1).
- its default backend wraps every read and write in anyio's stream and cancellation layers;
  :class:`AsyncioBackend` is httpcore's documented extension point (``httpcore.AsyncNetworkBackend``)
  over :func:`asyncio.open_connection`, raising httpcore's exceptions as its own backends do.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Iterable
from typing import Any

import httpcore

__all__ = ["AsyncioBackend", "AsyncioStream", "Upstreams"]

#: seconds an idle connection is kept: under the 5 s after which uvicorn (and most servers) close an
#: idle keep-alive connection, so kant seldom sends on a connection the replica is closing
KEEPALIVE_S = 4.0
#: idle connections kept per replica address (more are closed as they come back)
KEEPALIVE_PER_ADDRESS = 128


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One TCP connection, as httpcore reads and writes it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            if timeout is None:
                return await self._reader.read(max_bytes)
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(f"no answer within {timeout:g} s") from exc
        except OSError as exc:
            raise httpcore.ReadError(str(exc) or type(exc).__name__) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            self._writer.write(buffer)
            if timeout is None:
                await self._writer.drain()
            else:
                async with asyncio.timeout(timeout):
                    await self._writer.drain()
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(f"could not send within {timeout:g} s") from exc
        except (OSError, RuntimeError) as exc:  # (RuntimeError: the transport is closed)
            raise httpcore.WriteError(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        self._writer.close()  # (the transport closes the socket once what is buffered is sent; no wait)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # an idle pooled connection the replica closed (or wrote to): not reused
            return (self._reader.at_eof() or self._reader.exception() is not None
                    or self._writer.transport.is_closing())
        if info in ("socket", "client_addr", "server_addr"):
            return self._writer.get_extra_info({"client_addr": "sockname", "server_addr": "peername"}.get(info, info))
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """TCP connections by :func:`asyncio.open_connection`, TLS from the start where ``tls`` is given
    (``https`` for ``kant load`` behind a TLS front; replicas are plain HTTP); no Unix sockets."""

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None,
                          tls: ssl.SSLContext | None = None) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=(local_address, 0) if local_address else None, limit=1 << 20,
                    ssl=tls, server_hostname=host if tls is not None else None)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"no connection to {host}:{port} within {timeout:g} s") from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        sock = writer.get_extra_info("socket")
        if sock is not None:
            for option in socket_options or ():
                sock.setsockopt(*option)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return AsyncioStream(reader, writer)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("replicas listen on TCP, not on Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class Upstreams:
    """Keep-alive HTTP/1.1 connections to replicas: per address (host, port), a stack of idle ones.

    :meth:`send` sends a request on an idle connection to its address (the most recently used, whose
    socket is the warmest) or a new one, and returns the answer, its body not read yet;
    :meth:`done` takes the connection back once the answer was read and closed. A request that
    fails on a reused connection before any answer came (the replica closed it as it went idle) is
    sent once more on a new connection; on a new connection, failures are the caller's.
    """

    def __init__(self, *, keepalive_s: float = KEEPALIVE_S, per_address: int = KEEPALIVE_PER_ADDRESS,
                 tls: ssl.SSLContext | None = None) -> None:
        self.keepalive_s = keepalive_s
        self.per_address = per_address
        self._backend = AsyncioBackend()
        self._idle: dict[tuple[str, int], list[tuple[float, httpcore.AsyncHTTP11Connection]]] = {}
        self._closed = False
        self._tls = tls  # for https (the system's trusted certificates unless given; made on the first)

    async def call(self, method: bytes, url: httpcore.URL, headers: list[tuple[bytes, bytes]], body: bytes,
                   timeout: float) -> tuple[int, bytes]:
        """One whole request: the answer's status and body (read); the connection is kept for the
        next. ``timeout`` bounds each step (connect at most 10 s, each read, each write), as httpx's
        ``Timeout(timeout)`` does; httpcore's exceptions are the caller's."""
        host, port = url.host.decode("ascii"), url.port or (443 if url.scheme == b"https" else 80)
        request = httpcore.Request(method, url, content=body, headers=[
            (b"host", url.host if url.port is None else b"%s:%d" % (url.host, port)),
            (b"content-length", b"%d" % len(body)), *headers],
            extensions={"timeout": {"connect": min(timeout, 10.0), "read": timeout, "write": timeout,
                                    "pool": timeout}})
        answer, conn = await self.send(host, port, request)
        try:
            data = await answer.aread()
        finally:
            await answer.aclose()
            await self.done(host, port, conn)
        return answer.status, data

    async def send(self, host: str, port: int, request: httpcore.Request
                   ) -> tuple[httpcore.Response, httpcore.AsyncHTTP11Connection]:
        """The replica's answer to ``request`` (its body unread) and the connection it came on; hand
        the connection to :meth:`done` once the answer is closed."""
        timeouts = request.extensions.get("timeout", {})
        conn = await self._take(host, port)
        if conn is not None:
            try:
                return await conn.handle_async_request(request), conn
            except (httpcore.ReadError, httpcore.WriteError, httpcore.RemoteProtocolError):
                await conn.aclose()  # (most likely closed by the replica as it went idle: once more, anew)
        https = request.url.scheme == b"https"
        if https and self._tls is None:
            self._tls = ssl.create_default_context()
        stream = await self._backend.connect_tcp(host, port, timeout=timeouts.get("connect"),
                                                 tls=self._tls if https else None)
        conn = httpcore.AsyncHTTP11Connection(httpcore.Origin(request.url.scheme, host.encode("idna"), port), stream,
                                              keepalive_expiry=self.keepalive_s)
        try:
            return await conn.handle_async_request(request), conn
        except BaseException:
            await conn.aclose()
            raise

    async def done(self, host: str, port: int, conn: httpcore.AsyncHTTP11Connection) -> None:
        """Take back the connection of an answer that was read and closed: kept if it may carry
        another request (closed otherwise, which for a connection no longer open is nothing)."""
        if conn.is_idle() and not self._closed:
            idle = self._idle.setdefault((host, port), [])
            if len(idle) < self.per_address:
                idle.append((time.monotonic() + self.keepalive_s, conn))
                return
        await conn.aclose()

    async def _take(self, host: str, port: int) -> httpcore.AsyncHTTP11Connection | None:
        idle = self._idle.get((host, port))
        now = time.monotonic()
        while idle:
            until, conn = idle.pop()
            if until > now and conn.is_idle() and not conn.has_expired():
                return conn
            await conn.aclose()
            if until <= now:  # (the rest of the stack went idle earlier still)
                for _, old in idle:
                    await old.aclose()
                idle.clear()
        if idle is not None and not idle:  # (replicas come and go: no address kept without a connection)
            del self._idle[(host, port)]
        return None

    async def aclose(self) -> None:
        """Close every idle connection; those still in use are closed as they come back."""
        self._closed = True
        for idle in self._idle.values():
            for _, conn in idle:
                await conn.aclose()
        self._idle.clear()
