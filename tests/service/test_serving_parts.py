"""Parts of the serving room that need no service: the port book."""

from __future__ import annotations

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
