"""Fixtures of the unit tests."""

from __future__ import annotations

import logging
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
