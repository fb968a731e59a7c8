"""Parts of the serving room that need no service: the port book, the day of traffic, the upstream connections."""

from __future__ import annotations

from pathlib import Path

import pytest

from kant.service.serving.ports import NoFreePort, PortBook


def test_port_book_hands_each_port_once_per_address_and_says_when_none_is_left() -> None:
    book = PortBook(first=39001, last=39002)
    a, b = book.pick("n1", "10.0.0.1"), book.pick("n1", "10.0.0.1")
    assert {a, b} == {39001, 39002}
    assert book.pick("n2", "10.0.0.2") in (39001, 39002)  # another address has its own ports
    with pytest.raises(NoFreePort, match=r"no free port in 39001-39002 on node n1 \(10.0.0.1\)"):
        book.pick("n1", "10.0.0.1")
    book.release("10.0.0.1", a)
    assert book.pick("n1", "10.0.0.1") == a


def test_nodes_at_one_address_share_its_ports() -> None:
    # several raylets on one machine (a local Ray cluster) are several nodes at one address: a port
    # handed to a replica on n1 is not handed to one on n2 (the second would fail with "address in use")
    book = PortBook(first=39001, last=39003)
    got = [book.pick(node, "192.0.2.2") for node in ("n1", "n2", "n3")]
    assert sorted(got) == [39001, 39002, 39003]
    with pytest.raises(NoFreePort, match=r"on node n4 \(192.0.2.2\)"):
        book.pick("n4", "192.0.2.2")


def test_a_day_made_from_the_hour_has_the_rate_the_shape_and_the_seed() -> None:
    import numpy as np

    from kant.errors import InputError
    from kant.service.serving.replay import Day, day_requests

    day = Day(wall_s=600, mean_rps=4.0, amplitude=0.5, peak_hour=14.0, seed=3)
    r = day_requests("azure:code", day, max_requests=10**6)
    assert r.speed == 144.0 and np.all(np.diff(r.trace_time) >= 0) and r.trace_time[-1] < 86_400
    assert abs(len(r) / 600 - 4.0) < 0.3  # (a binomial draw around 2,400 requests)
    hours = np.bincount((r.trace_time // 3600).astype(np.int64), minlength=24)
    assert hours[13:16].sum() > 2 * hours[1:4].sum()  # 1 + A cos: about 1.5 at the peak, 0.5 at the trough
    again = day_requests("azure:code", day, max_requests=10**6)
    assert np.array_equal(again.trace_time, r.trace_time) and np.array_equal(again.output, r.output)
    other = day_requests("azure:code", Day(600, 4.0, seed=4), max_requests=10**6)
    assert not np.array_equal(other.trace_time[:50], r.trace_time[:50])
    with pytest.raises(InputError, match=r"cannot average 500 requests/s in 600 s .* \(at most [0-9.]+/s\)"):
        day_requests("azure:code", Day(600, 500.0), max_requests=10**6)


def test_upstreams_reuse_a_connection_and_send_again_on_one_the_replica_dropped() -> None:
    """A replica that keeps its connections: one connection carries every request. One that closes
    a connection when a second request comes on it (as a server does whose idle timeout fell just
    then): that request fails on the kept connection before any answer and is sent once more on a
    new one, so every request is answered."""
    import asyncio

    import httpcore

    from kant.service.serving.upstream import Upstreams

    async def run(drop_second: bool) -> tuple[list[int], int]:
        connections = 0

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            served = 0
            while await reader.readuntil(b"\r\n\r\n"):
                if drop_second and served == 1:
                    writer.close()
                    return
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
                served += 1

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        ups = Upstreams()
        codes = []
        for _ in range(3):
            answer, conn = await ups.send("127.0.0.1", port, httpcore.Request(
                b"GET", httpcore.URL(scheme=b"http", host=b"127.0.0.1", port=port, target=b"/"),
                headers=[(b"host", f"127.0.0.1:{port}".encode())]))
            await answer.aread()
            await answer.aclose()
            await ups.done("127.0.0.1", port, conn)
            codes.append(answer.status)
        await ups.aclose()
        server.close()
        return codes, connections

    assert asyncio.run(run(drop_second=False)) == ([200, 200, 200], 1)
    assert asyncio.run(run(drop_second=True)) == ([200, 200, 200], 3)


def test_upstreams_call_sends_one_whole_request_over_http_and_https(tmp_path: Path) -> None:
    """``call`` (what ``kant load`` and bench_router send with): the answer's status and body, the
    request's Host and Content-Length set, one kept connection for every request; over TLS too,
    trusting the certificate it is given."""
    import asyncio
    import ssl
    import subprocess

    import httpcore

    from kant.service.serving.upstream import Upstreams

    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "k.pem"),
                    "-out", str(tmp_path / "c.pem"), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)

    async def run(scheme: str) -> tuple[list[tuple[int, bytes]], list[bytes], int]:
        heads: list[bytes] = []
        connections = 0

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                length = next(int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                              if line.startswith(b"content-length:"))
                body = await reader.readexactly(length)
                heads.append(head)
                writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s" % (len(body) + 1, body + b"!"))
                await writer.drain()

        server_tls = None
        client_tls = None
        if scheme == "https":
            server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            server_tls.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
            client_tls = ssl.create_default_context(cafile=str(tmp_path / "c.pem"))
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_tls)
        port = server.sockets[0].getsockname()[1]
        ups = Upstreams(tls=client_tls)
        url = httpcore.URL(f"{scheme}://127.0.0.1:{port}/v1/completions")
        got = [await ups.call(b"POST", url, [(b"x-who", b"me")], b"hi %d" % i, 5.0) for i in range(3)]
        await ups.aclose()
        server.close()
        return got, heads, connections

    for scheme in ("http", "https"):
        got, heads, connections = asyncio.run(run(scheme))
        assert got == [(201, b"hi 0!"), (201, b"hi 1!"), (201, b"hi 2!")] and connections == 1
        first = heads[0].lower()
        assert first.startswith(b"post /v1/completions http/1.1") and b"x-who: me" in first
        assert b"host: 127.0.0.1:" in first and b"content-length: 4" in first
