"""Fixtures of the unit tests."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """Undo a test's logging configuration: structlog's defaults, the root's handlers."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    yield
    structlog.reset_defaults()
    root.handlers[:], root.level = saved


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that another socket listens on for the test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]
