"""Routes that take no body refuse one, and change nothing.

API.md gives close, cancel, archive and the DELETE routes no body, and refuses every
unknown request member
(400 ``unknown_member``): a body with members, JSON that is no object, malformed JSON
and a body of another media type are refused before anything changes. No body, a blank
one and ``{}`` are no body at all.
"""

from __future__ import annotations

import pytest

from tests.support.http import ContractClient, bearer
from turnkeeper.application.demo import DemoWorld

#: (content type, body, status, code, errors) of each refused body.
REFUSED = {
    "member": (
        "application/json",
        b'{"reason":"spam"}',
        400,
        "validation_failed",
        [{"pointer": "/reason", "code": "unknown_member"}],
    ),
    "escaped member": (
        "application/json",
        b'{"a/b":1,"c~d":2}',
        400,
        "validation_failed",
        [
            {"pointer": "/a~1b", "code": "unknown_member"},
            {"pointer": "/c~0d", "code": "unknown_member"},
        ],
    ),
    "array": (
        "application/json",
        b"[]",
        400,
        "validation_failed",
        [{"pointer": "", "code": "invalid_type"}],
    ),
    "malformed": (
        "application/json",
        b"{not json",
        400,
        "validation_failed",
        [{"pointer": "", "code": "malformed_json"}],
    ),
    "other media type": ("text/plain", b"close it", 415, "unsupported_media_type", None),
}


def _close_path(world: DemoWorld) -> str:
    return f"/v1/threads/{world.channels['allgemein'].main_thread_id}/close"


@pytest.mark.parametrize("body", REFUSED)
async def test_a_body_on_close_is_refused_and_the_thread_stays_open(
    client: ContractClient, world: DemoWorld, body: str
) -> None:
    content_type, content, status, code, errors = REFUSED[body]
    alex = bearer(world.people["alex"].token)
    path = _close_path(world)
    answer = await client.post(
        path, content=content, headers={**alex, "content-type": content_type}
    )
    assert (answer.status_code, answer.json()["code"]) == (status, code)
    if errors is not None:
        assert answer.json()["errors"] == errors
    thread = await client.get(path.removesuffix("/close"), headers=alex)
    assert thread.json()["state"] == "open"


@pytest.mark.parametrize("content", [b"", b"  \n", b"{}", b" { } "])
async def test_no_body_a_blank_one_or_an_empty_object_is_taken(
    client: ContractClient, world: DemoWorld, content: bytes
) -> None:
    alex = bearer(world.people["alex"].token)
    answer = await client.post(
        _close_path(world), content=content, headers={**alex, "content-type": "application/json"}
    )
    assert (answer.status_code, answer.json()["state"]) == (200, "done")


async def test_a_body_on_archive_is_refused_and_the_channel_stays_writable(
    client: ContractClient, world: DemoWorld
) -> None:
    owner = bearer(world.owner.token)
    channel = world.channels["allgemein"].id
    answer = await client.post(f"/v1/channels/{channel}/archive", json={"now": True}, headers=owner)
    assert (answer.status_code, answer.json()["errors"]) == (
        400,
        [{"pointer": "/now", "code": "unknown_member"}],
    )
    posted = await client.post(
        f"/v1/threads/{world.channels['allgemein'].main_thread_id}/messages",
        json={"client_msg_id": "after-archive", "content": "still open"},
        headers=bearer(world.people["alex"].token),
    )
    assert posted.status_code == 201


async def _a_grant(client: ContractClient, world: DemoWorld) -> str:
    """The id of a grant of Sam (the demo world gives him some)."""
    listed = await client.get(
        f"/v1/grants?principal_id={world.principal('sam').id}",
        headers=bearer(world.owner.token),
    )
    grants = listed.json()["grants"]
    assert grants, listed.text
    return str(grants[0]["id"])


async def _a_token(client: ContractClient, world: DemoWorld) -> str:
    """The path of a new token of Sam."""
    sam = world.principal("sam").id
    issued = await client.post(
        f"/v1/principals/{sam}/tokens", json={}, headers=bearer(world.owner.token)
    )
    assert issued.status_code == 201, issued.text
    return f"/v1/principals/{sam}/tokens/{issued.json()['id']}"


@pytest.mark.parametrize("route", ["grant", "token"])
@pytest.mark.parametrize("body", REFUSED)
async def test_a_body_on_a_delete_is_refused_and_nothing_is_deleted(
    client: ContractClient, world: DemoWorld, route: str, body: str
) -> None:
    # DELETE routes take no body either (API.md gives them none): they deleted whatever
    # body came with them, where close and archive refused it.
    content_type, content, status, code, errors = REFUSED[body]
    owner = bearer(world.owner.token)
    path = f"/v1/grants/{await _a_grant(client, world)}" if route == "grant" else None
    path = path or await _a_token(client, world)
    answer = await client.request(
        "DELETE", path, content=content, headers={**owner, "content-type": content_type}
    )
    assert (answer.status_code, answer.json()["code"]) == (status, code)
    if errors is not None:
        assert answer.json()["errors"] == errors
    # Nothing was deleted: the same request without a body deletes it now.
    deleted = await client.delete(path, headers=owner)
    assert deleted.status_code == 204, deleted.text


@pytest.mark.parametrize("content", [b"", b"  \n", b"{}"])
async def test_a_delete_with_no_body_a_blank_one_or_an_empty_object_deletes(
    client: ContractClient, world: DemoWorld, content: bytes
) -> None:
    path = f"/v1/grants/{await _a_grant(client, world)}"
    answer = await client.request(
        "DELETE",
        path,
        content=content,
        headers={**bearer(world.owner.token), "content-type": "application/json"},
    )
    assert answer.status_code == 204, answer.text
