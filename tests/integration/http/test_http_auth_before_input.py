"""A missing or unknown token is 401 before anything the request's input would get.

Whatever is wrong with the body (a body of another media type, malformed JSON, a
duplicated member, a NUL character, an unknown member), a caller that is not known gets
401 ``unauthenticated`` and learns nothing of how the body is read; a known caller gets
the input's own answer. On a route that reads the token in its unit (the message route)
and on one that resolves it first (createSpace).
"""

from __future__ import annotations

import pytest

from tests.support.http import ContractClient, bearer
from turnkeeper.application.demo import DemoWorld

#: (content type, body, the answer a known caller gets: status and code)
BODIES = {
    "other media type": ("text/plain", b"hello", 415, "unsupported_media_type"),
    "malformed json": ("application/json", b"{not json", 400, "validation_failed"),
    "duplicate member": (
        "application/json",
        b'{"name":"Lab","name":"Lab"}',
        400,
        "validation_failed",
    ),
    "nul character": ("application/json", b'{"name":"Lab\\u0000"}', 400, "validation_failed"),
    "unknown member": ("application/json", b'{"name":"Lab","colour":1}', 400, "validation_failed"),
}
#: Authorization headers of callers that are not known (None: no header).
STRANGERS = {"none": None, "unknown": "Bearer tk_unknown", "other scheme": "Basic YWxleA=="}


def _path(world: DemoWorld, route: str) -> str:
    if route == "messages":
        return f"/v1/threads/{world.channels['allgemein'].main_thread_id}/messages"
    return "/v1/spaces"


@pytest.mark.parametrize("route", ["messages", "spaces"])
@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("stranger", STRANGERS)
async def test_a_stranger_is_401_whatever_the_body(
    client: ContractClient, world: DemoWorld, route: str, body: str, stranger: str
) -> None:
    content_type, content, _, _ = BODIES[body]
    headers = {"content-type": content_type}
    if STRANGERS[stranger] is not None:
        headers["authorization"] = str(STRANGERS[stranger])
    answer = await client.post(_path(world, route), content=content, headers=headers)
    assert (answer.status_code, answer.json()["code"]) == (401, "unauthenticated")
    assert answer.headers["www-authenticate"].lower().startswith("bearer")


@pytest.mark.parametrize("route", ["messages", "spaces"])
@pytest.mark.parametrize("body", BODIES)
async def test_a_known_caller_gets_the_answer_of_the_body(
    client: ContractClient, world: DemoWorld, route: str, body: str
) -> None:
    content_type, content, status, code = BODIES[body]
    headers = {"content-type": content_type, **bearer(world.owner.token)}
    answer = await client.post(_path(world, route), content=content, headers=headers)
    assert (answer.status_code, answer.json()["code"]) == (status, code)
