"""Parts of the serving room that need no service: the port book."""

from __future__ import annotations

import pytest

from kant.service.serving.ports import NoFreePort, PortBook


def test_port_book_hands_each_port_once_per_node_and_says_when_none_is_left() -> None:
    book = PortBook(first=39001, last=39002)
    a, b = book.pick("n1", "10.0.0.1"), book.pick("n1", "10.0.0.1")
    assert {a, b} == {39001, 39002}
    assert book.pick("n2", "10.0.0.2") in (39001, 39002)  # another node has its own ports
    with pytest.raises(NoFreePort, match="no free port in 39001-39002 on node n1"):
        book.pick("n1", "10.0.0.1")
    book.release("n1", a)
    assert book.pick("n1", "10.0.0.1") == a
