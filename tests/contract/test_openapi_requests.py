"""The request schemas state what the server refuses, and nothing it accepts.

Found by schemathesis ("Schema-valid request rejected"): each bound below is checked
in the document, then over HTTP on both sides of it, so that the document is neither
looser than the server (a valid request refused) nor stricter (an invalid one accepted).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support.fakes import FakeClock
from tests.support.http import ContractClient, bearer, contract_client, http_world
from tests.support.openapi import Spec
from tests.support.scenario import main_thread
from tests.support.services import memory_services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.settings import Settings
from turnkeeper.domain.events import MAX_SEQ

#: A character of four UTF-8 bytes: a client id of them shows that the bound counts
#: characters, not bytes.
WIDE = "\N{GRINNING FACE}"


def _member(spec: Spec, schema: str, member: str) -> dict[str, Any]:
    """A member's schema, through Litestar's one-way ``oneOf`` of an optional member."""
    found: dict[str, Any] = spec["components"]["schemas"][schema]["properties"][member]
    (only,) = found.get("oneOf", [found])
    return {**found, **only}


def _send(thread: str, **members: Any) -> dict[str, Any]:
    return {
        "target": thread,
        "content": "hello",
        "client_message_id": "c1",
        "freshness": {"target_key": f"thread:{thread}", "seen_up_to_seq": 0},
        **members,
    }


async def test_a_send_requires_its_client_message_id_and_freshness(
    client: ContractClient,
) -> None:
    required = client.spec["components"]["schemas"]["AgentSendBody"]["required"]
    assert set(required) == {"target", "content", "client_message_id", "freshness"}


async def test_freshness_is_optional_where_the_settings_make_it_so() -> None:
    services = memory_services(Settings(freshness_required_for_agents=False), FakeClock())
    async with contract_client(services) as client:
        required = client.spec["components"]["schemas"]["AgentSendBody"]["required"]
    assert set(required) == {"target", "content", "client_message_id"}


@pytest.mark.parametrize("required", [True, False])
async def test_a_send_documents_freshness_required_only_while_the_settings_require_it(
    required: bool,
) -> None:
    services = memory_services(Settings(freshness_required_for_agents=required), FakeClock())
    async with contract_client(services) as client:
        refused = client.spec["paths"]["/v1/agent/send"]["post"]["responses"]["400"]
    (media,) = refused["content"].values()
    assert ("freshness_required" in media["examples"]) is required
    assert ("freshness_required" in refused["description"]) is required
    assert "client_message_id_required" in media["examples"]


@pytest.mark.parametrize(
    ("schema", "member"),
    [("MessageCreate", "client_msg_id"), ("AgentSendBody", "client_message_id")],
)
@pytest.mark.parametrize("limit", [Settings().max_client_id_length, 8])
async def test_client_ids_state_the_configured_length_in_characters(
    schema: str, member: str, limit: int
) -> None:
    services = memory_services(Settings(max_client_id_length=limit), FakeClock())
    async with contract_client(services) as client:
        bounds = _member(client.spec, schema, member)
    assert (bounds["type"], bounds["minLength"], bounds["maxLength"]) == ("string", 1, limit)


async def test_the_server_counts_a_messages_client_id_in_characters(
    client: ContractClient, world: DemoWorld
) -> None:
    limit = Settings().max_client_id_length
    thread = main_thread(world, "allgemein")
    alex = bearer(world.people["alex"].token)
    url = f"/v1/threads/{thread}/messages"
    for client_id, status, code in (
        ("", 400, "required"),
        (WIDE * (limit + 1), 400, "too_long"),
        (WIDE * limit, 201, None),
    ):
        answer = await client.post(
            url, json={"client_msg_id": client_id, "content": "x"}, headers=alex
        )
        assert answer.status_code == status, answer.text
        if code is not None:
            assert answer.json()["errors"] == [{"pointer": "/client_msg_id", "code": code}]


async def test_the_server_counts_a_sends_client_id_in_characters(
    client: ContractClient, world: DemoWorld
) -> None:
    limit = Settings().max_client_id_length
    thread = str(main_thread(world, "eskalation"))
    lotse = bearer(world.agents["lotse"].token)
    for client_id, status, code in (
        ("", 400, "client_message_id_required"),
        (WIDE * (limit + 1), 400, "too_long"),
        (WIDE * limit, 200, None),
    ):
        sent = _send(thread, client_message_id=client_id)
        answer = await client.post("/v1/agent/send", json=sent, headers=lotse)
        assert answer.status_code == status, answer.text
        if code is not None:
            assert answer.json()["errors"] == [{"pointer": "/client_message_id", "code": code}]
    for left_out in ("client_message_id", "freshness"):
        sent = {k: v for k, v in _send(thread).items() if k != left_out}
        answer = await client.post("/v1/agent/send", json=sent, headers=lotse)
        assert answer.status_code == 400, answer.text


async def test_an_audience_is_not_empty(client: ContractClient, world: DemoWorld) -> None:
    assert _member(client.spec, "MessageCreate", "restricted_to")["minItems"] == 1
    thread = main_thread(world, "allgemein")
    alex = bearer(world.people["alex"].token)
    url = f"/v1/threads/{thread}/messages"
    empty = await client.post(
        url, json={"client_msg_id": "e", "content": "x", "restricted_to": []}, headers=alex
    )
    assert empty.status_code == 400
    assert empty.json()["errors"] == [{"pointer": "/restricted_to", "code": "empty"}]
    robin = str(world.owner.principal.id)
    one = await client.post(
        url, json={"client_msg_id": "o", "content": "x", "restricted_to": [robin]}, headers=alex
    )
    assert one.status_code == 201, one.text


async def test_mentions_are_unique(client: ContractClient, world: DemoWorld) -> None:
    mentions = _member(client.spec, "MessageCreate", "mentions")
    assert mentions["uniqueItems"] is True
    # uniqueItems compares strings: the description says ids are compared as UUIDs.
    assert "compared as UUIDs" in mentions["description"]
    thread = main_thread(world, "allgemein")
    alex = bearer(world.people["alex"].token)
    url = f"/v1/threads/{thread}/messages"
    sam = str(world.people["sam"].principal.id)
    twice = await client.post(
        url, json={"client_msg_id": "m2", "content": "x", "mentions": [sam, sam]}, headers=alex
    )
    assert twice.status_code == 400
    assert twice.json()["errors"] == [{"pointer": "/mentions", "code": "duplicate"}]
    spelt_twice = await client.post(
        url,
        json={"client_msg_id": "m3", "content": "x", "mentions": [sam, sam.upper()]},
        headers=alex,
    )
    assert spelt_twice.json()["errors"] == [{"pointer": "/mentions", "code": "duplicate"}]
    once = await client.post(
        url, json={"client_msg_id": "m1", "content": "x", "mentions": [sam]}, headers=alex
    )
    assert once.status_code == 201, once.text


@pytest.mark.parametrize("schema", ["MessageCreate", "AgentSendBody"])
async def test_content_states_its_rules(
    client: ContractClient, world: DemoWorld, schema: str
) -> None:
    # JSON Schema counts characters, not UTF-8 bytes, and cannot say "not blank": the
    # description says both, and the schema states only what holds of every content.
    limit = Settings().max_content_bytes
    content = _member(client.spec, schema, "content")
    assert content["minLength"] == 1
    assert "maxLength" not in content
    description = content["description"]
    assert f"{limit} UTF-8 bytes" in description
    for code in ("required", "too_long", "invalid_character", "U+0000"):
        assert code in description, code
    thread = main_thread(world, "allgemein")
    alex = bearer(world.people["alex"].token)
    url = f"/v1/threads/{thread}/messages"
    for index, (text, status) in enumerate(
        (
            (WIDE * (limit // 4), 201),
            (WIDE * (limit // 4) + "x" * (limit % 4 + 1), 400),
            (" ", 400),
            ("a\u0000b", 400),
        )
    ):
        answer = await client.post(
            url, json={"client_msg_id": f"c{index}", "content": text}, headers=alex
        )
        assert answer.status_code == status, answer.text


async def test_the_grant_filters_are_uuids(client: ContractClient, world: DemoWorld) -> None:
    owner = bearer(world.owner.token)
    parameters = client.spec["paths"]["/v1/grants"]["get"]["parameters"]
    for name in ("principal_id", "resource_id"):
        (schema,) = [p["schema"] for p in parameters if p["name"] == name]
        assert (schema["type"], schema["format"]) == ("string", "uuid"), name
        refused = await client.get(f"/v1/grants?{name}=abc", headers=owner)
        assert refused.status_code == 400
        assert refused.json()["errors"] == [{"pointer": f"/{name}", "code": "invalid"}]
        accepted = await client.get(f"/v1/grants?{name}={uuid.uuid4()}", headers=owner)
        assert accepted.status_code == 200


#: The routes of a cursor, with the caller that may read them (streams are not read:
#: an accepted stream never ends).
CURSORS = (
    ("/v1/threads/{thread_id}/messages", "after_seq", "alex", True),
    ("/v1/events", "after", "alex", True),
    ("/v1/agent/events", "after", "lotse", True),
    ("/v1/events/stream", "after", "alex", False),
    ("/v1/agent/events/stream", "after", "lotse", False),
)


@pytest.mark.parametrize(("path", "name", "who", "read"), CURSORS)
async def test_cursors_state_the_largest_seq(
    client: ContractClient, world: DemoWorld, path: str, name: str, who: str, read: bool
) -> None:
    parameters = client.spec["paths"][path]["get"]["parameters"]
    (schema,) = [p["schema"] for p in parameters if p["name"] == name and p["in"] == "query"]
    assert (schema["minimum"], schema["maximum"]) == (0, MAX_SEQ) == (0, 2**63 - 1)
    url = path.format(thread_id=main_thread(world, "allgemein"))
    headers = bearer((world.people.get(who) or world.agents[who]).token)
    beyond = await client.get(f"{url}?{name}={MAX_SEQ + 1}", headers=headers)
    assert beyond.status_code == 400
    assert beyond.json()["errors"] == [{"pointer": f"/{name}", "code": "out_of_range"}]
    if read:
        last = await client.get(f"{url}?{name}={MAX_SEQ}", headers=headers)
        assert last.status_code == 200, last.text


@pytest.mark.parametrize("limit", [Settings().max_source_message_ids, 3])
async def test_the_sources_of_a_send_state_their_configured_count(limit: int) -> None:
    async with http_world(Settings(max_source_message_ids=limit)) as given:
        client, world = given.client, given.world
        freshness = client.spec["components"]["schemas"]["SendFreshnessBody"]
        sources = _member(client.spec, "SendFreshnessBody", "source_message_ids")
        assert sources["maxItems"] == limit
        assert "source_message_ids" not in freshness.get("required", [])
        thread = str(main_thread(world, "eskalation"))
        lotse = bearer(world.agents["lotse"].token)
        for count, status in ((limit + 1, 400), (limit, 200)):
            sent = _send(thread, client_message_id=f"s{count}")
            sent["freshness"]["source_message_ids"] = [str(uuid.uuid4()) for _ in range(count)]
            answer = await client.post("/v1/agent/send", json=sent, headers=lotse)
            assert answer.status_code == status, answer.text
            if status == 400:
                assert answer.json()["errors"] == [
                    {"pointer": "/freshness/source_message_ids", "code": "too_many"}
                ]
