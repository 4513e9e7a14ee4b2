"""A body with two ``Content-Type`` headers is no JSON body: 415, whatever their order.

RFC 9110, section 8.3: the field is no list. The server read the first of the two: JSON
then ``text/plain`` stored the message, ``text/plain`` then JSON answered 415, and the
two in one line (as a proxy joins them) answered 415 too (an audit). Proven over a real
server's sockets with both parsers: a test client may join the two lines into one.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.reliability.support_server import OWNER_TOKEN
from tests.reliability.test_slow_clients import _port, memory_server, parser  # noqa: F401
from tests.reliability.test_unread_requests import _exchange, _new_thread, _stored_contents

#: The two headers of each case, in the order sent.
ORDERS = {
    "json first": ("application/json", "text/plain"),
    "json twice": ("application/json", "application/json"),
}


@pytest.mark.parametrize("order", ORDERS)
async def test_two_content_types_are_415_and_store_nothing(
    tmp_path: Path,
    parser: str,  # noqa: F811
    order: str,
) -> None:
    async with memory_server(tmp_path, parser, OWNER_TOKEN=OWNER_TOKEN) as url:
        thread = await _new_thread(url)
        first, second = ORDERS[order]
        body = b'{"client_msg_id": "twice", "content": "hello"}'
        for path in (f"/v1/threads/{thread}/messages", f"/v1/threads/{thread}/close"):
            request = (
                f"POST {path} HTTP/1.1\r\nHost: example.com\r\n"
                f"Authorization: Bearer {OWNER_TOKEN}\r\n"
                f"Content-Type: {first}\r\nContent-Type: {second}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode() + body
            status, _, answer = await _exchange(_port(url), request)
            assert (status, answer["code"]) == (415, "unsupported_media_type"), path
        assert await _stored_contents(url, thread) == []
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {OWNER_TOKEN}"}) as client:
            thread_now = await client.get(f"{url}/v1/threads/{thread}")
        assert thread_now.json()["state"] == "open"
