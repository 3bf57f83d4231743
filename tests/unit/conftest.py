"""Unit-tier fixtures."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture
def listener():
    """A port every host of a bad-input test points at: input refused before any host is
    touched leaves it without a connection (``accept`` times out)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    sock.settimeout(0.2)
    yield sock
    sock.close()
