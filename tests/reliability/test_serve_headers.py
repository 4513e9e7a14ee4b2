"""``turnkeeper serve`` answers without a ``server`` header, and with ``date``.

The contract (API.md) names no ``server`` header; uvicorn would add ``server: uvicorn``
to every answer, naming the stack to every client. ``date`` stays: an HTTP/1.1 origin
server with a clock sends it (RFC 9110, section 6.6.1).
"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.reliability.support_server import Server, server_env


async def test_served_answers_name_no_server_and_carry_a_date(
    pg_conninfo: str, tmp_path: Path
) -> None:
    server = Server(env=server_env(pg_conninfo, tmp_path), log_dir=tmp_path)
    server.start()
    try:
        await server.wait_ready()
        async with httpx.AsyncClient(base_url=server.url) as client:
            answers = [
                await client.get("/healthz"),
                await client.get("/v1/me"),  # 401, a problem answer
                await client.get("/v1/no-such-route"),  # 404 from the router
            ]
    finally:
        server.stop()
    assert [a.status_code for a in answers] == [200, 401, 404]
    for answer in answers:
        assert "server" not in answer.headers, answer.headers
        assert answer.headers["date"]
