"""A request with two ``Authorization`` headers carries no credentials: 401.

RFC 9110, section 5.3: a field that is no list is not sent twice, and which of two the
client meant cannot be known. The server used the first, whatever the second said (an
audit authenticated as Alex with Alex's token followed by an unknown one). Proven over
a real server's sockets with both parsers: a test client may join the two lines into
one before the application sees them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.support_server import OWNER_TOKEN
from tests.reliability.test_slow_clients import _port, memory_server, parser  # noqa: F401
from tests.reliability.test_unread_requests import _exchange, _new_thread, _stored_contents

#: The second header of each case.
SECONDS = {
    "same": f"Bearer {OWNER_TOKEN}",
    "unknown": "Bearer tk_unknown",
    "other scheme": "Basic YWxleA==",
}


@pytest.mark.parametrize("second", SECONDS)
async def test_two_authorization_headers_are_401_and_store_nothing(
    tmp_path: Path,
    parser: str,  # noqa: F811
    second: str,
) -> None:
    async with memory_server(tmp_path, parser, OWNER_TOKEN=OWNER_TOKEN) as url:
        thread = await _new_thread(url)
        authorizations = f"Authorization: Bearer {OWNER_TOKEN}\r\nAuthorization: {SECONDS[second]}"
        body = b'{"client_msg_id": "twice", "content": "hello"}'
        for request in (
            f"GET /v1/me HTTP/1.1\r\nHost: example.com\r\n{authorizations}\r\n"
            "Connection: close\r\n\r\n".encode(),
            # The message route's own fast path, then Litestar's route.
            f"POST /v1/threads/{thread}/messages HTTP/1.1\r\nHost: example.com\r\n"
            f"{authorizations}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body,
        ):
            status, headers, answer = await _exchange(_port(url), request)
            assert (status, answer["code"]) == (401, "unauthenticated")
            assert headers["www-authenticate"] == "Bearer"
        assert await _stored_contents(url, thread) == []
