"""``turnkeeper serve`` logs and counts the requests it answers without reading them.

The audit's two requests over a raw socket, with both parsers of ``http.parser``: a
header line without a colon (``400 malformed_request``) and a head over
``http.max_header_bytes`` (``431 headers_too_large``). Each has its ``http_request``
line, with a method (the one read, else ``(unread)``), route ``(unread)``, the status,
``duration_ms`` and the answer's correlation id, and is counted in
``turnkeeper_http_requests_total{route="(unread)"}`` on ``GET /metrics``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.reliability.test_slow_clients import _port, memory_server, parser  # noqa: F401
from tests.reliability.test_unread_requests import HEAD_END, _exchange
from tests.support.json_log import file_records

#: ``http.max_header_bytes`` of the server under test.
HEADER_LIMIT = 4096
#: The audit's malformed request: a header line without a colon.
MALFORMED = b"GET /healthz HTTP/1.1\r\nHost: x\r\nFoo bar" + HEAD_END
#: A whole head one byte over the bound.
TOO_LARGE = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * HEADER_LIMIT + HEAD_END
#: The method each parser has read of each request when it refuses it: httptools reads
#: the request line before the bad header line, h11 parses the head whole or not at all.
METHODS = {
    "httptools": {400: "GET", 431: "GET"},
    "h11": {400: "(unread)", 431: "GET"},
}


def _unread_lines(log: Path) -> list[dict[str, Any]]:
    """The request lines of route ``(unread)`` among the server's output."""
    return [record for record in file_records(log) if record.get("route") == "(unread)"]


def _count(exposition: str, status: int) -> float:
    series = f'turnkeeper_http_requests_total{{route="(unread)",status="{status}"}} '
    (line,) = [line for line in exposition.splitlines() if line.startswith(series)]
    return float(line.removeprefix(series))


async def test_unread_requests_are_logged_with_method_and_duration_and_counted(
    tmp_path: Path,
    parser: str,  # noqa: F811
) -> None:
    async with memory_server(tmp_path, parser, HTTP__MAX_HEADER_BYTES=str(HEADER_LIMIT)) as url:
        ids = {}
        for request, status in ((MALFORMED, 400), (TOO_LARGE, 431)):
            answered, headers, _ = await _exchange(_port(url), request)
            assert answered == status
            ids[status] = headers["x-correlation-id"]
        async with httpx.AsyncClient() as client:
            exposition = (await client.get(f"{url}/metrics")).text
        lines = {line["status"]: line for line in _unread_lines(tmp_path / "serve.log")}
    assert sorted(lines) == [400, 431]
    for status, line in lines.items():
        assert line["method"] == METHODS[parser][status], line
        assert line["correlation_id"] == ids[status]
        assert isinstance(line["duration_ms"], float)
        assert line["duration_ms"] >= 0
        assert (line["level"], line["logger"]) == ("info", "turnkeeper.http")
        assert _count(exposition, status) == 1
