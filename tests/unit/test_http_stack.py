"""The parser and event loop of `turnkeeper serve` by ``http.parser`` and ``http.event_loop``."""

from __future__ import annotations

import pytest
import uvloop
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from turnkeeper.adapters.http import server
from turnkeeper.adapters.http.guard import ConnectionGuard
from turnkeeper.adapters.http.server import (
    event_loop_factory,
    guarded_protocol,
    httptools_installed,
)


def _guard() -> ConnectionGuard:
    return ConnectionGuard(header_timeout=10, max_connections=10)


def test_auto_takes_httptools_when_installed_and_h11_is_kept_on_request() -> None:
    assert httptools_installed()  # the fast extra is part of dev
    auto = guarded_protocol(_guard(), "auto")
    assert issubclass(auto, HttpToolsProtocol)
    assert issubclass(guarded_protocol(_guard(), "httptools"), HttpToolsProtocol)
    plain = guarded_protocol(_guard(), "h11")
    assert issubclass(plain, H11Protocol)
    assert not issubclass(plain, HttpToolsProtocol)


def test_auto_falls_back_to_h11_without_httptools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "httptools_installed", lambda: False)
    assert issubclass(guarded_protocol(_guard(), "auto"), H11Protocol)


def test_each_protocol_class_is_bound_to_its_own_guard() -> None:
    first, second = _guard(), _guard()
    assert guarded_protocol(first, "auto").guard is first  # type: ignore[attr-defined]
    assert guarded_protocol(second, "h11").guard is second  # type: ignore[attr-defined]


def test_the_event_loop_is_uvloops_unless_asyncio_is_asked_for() -> None:
    assert event_loop_factory("auto") is uvloop.new_event_loop
    assert event_loop_factory("uvloop") is uvloop.new_event_loop
    assert event_loop_factory("asyncio") is None
