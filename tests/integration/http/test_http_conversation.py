"""Conversation routes over HTTP: replays, history, events and unreadable ids."""

from __future__ import annotations

import uuid

from tests.support.http import ContractClient, bearer
from turnkeeper.application.demo import DemoWorld


async def test_me_answers_the_caller(client: ContractClient, world: DemoWorld) -> None:
    response = await client.get("/v1/me", headers=bearer(world.people["alex"].token))
    assert response.json() == {
        "id": str(world.principal("alex").id),
        "kind": "person",
        "handle": "alex",
    }


async def test_a_repeated_message_is_replayed_with_200_and_the_header(
    client: ContractClient, world: DemoWorld
) -> None:
    thread = world.channels["allgemein"].main_thread_id
    alex = bearer(world.people["alex"].token)
    body = {"client_msg_id": "m-1", "content": "Hallo"}
    created = await client.post(f"/v1/threads/{thread}/messages", json=body, headers=alex)
    replayed = await client.post(f"/v1/threads/{thread}/messages", json=body, headers=alex)
    assert created.status_code == 201
    assert "idempotent-replay" not in created.headers
    assert replayed.status_code == 200
    assert replayed.headers["idempotent-replay"] == "true"
    # The original comes back as it is now (its trigger state may have moved on).
    assert replayed.json()["id"] == created.json()["id"]
    assert replayed.json()["thread_seq"] == created.json()["thread_seq"]


async def test_a_repeated_thread_creation_is_replayed(
    client: ContractClient, world: DemoWorld
) -> None:
    channel = world.channels["reports"].id
    alex = bearer(world.people["alex"].token)
    body = {"title": "Printer", "first_message": {"client_msg_id": "t-1", "content": "Jammed"}}
    created = await client.post(f"/v1/channels/{channel}/threads", json=body, headers=alex)
    replayed = await client.post(f"/v1/channels/{channel}/threads", json=body, headers=alex)
    assert created.status_code == 201
    assert (replayed.status_code, replayed.headers["idempotent-replay"]) == (200, "true")
    assert replayed.json()["thread"]["id"] == created.json()["thread"]["id"]
    assert created.json()["thread"]["title"] == "Printer"


async def test_history_events_and_close_answer_their_documents(
    client: ContractClient, world: DemoWorld
) -> None:
    channel = world.channels["reports"].id
    alex = bearer(world.people["alex"].token)
    created = await client.post(
        f"/v1/channels/{channel}/threads",
        json={"first_message": {"client_msg_id": "t-2", "content": "Hello"}},
        headers=alex,
    )
    thread_id = created.json()["thread"]["id"]
    await client.post(
        f"/v1/threads/{thread_id}/messages",
        json={"client_msg_id": "m-2", "content": "More", "mentions": []},
        headers=alex,
    )
    history = await client.get(f"/v1/threads/{thread_id}/messages?after_seq=0", headers=alex)
    assert [m["content"] for m in history.json()["messages"]] == ["Hello", "More"]
    assert history.json()["covers_through_seq"] == 2
    thread = await client.get(f"/v1/threads/{thread_id}", headers=alex)
    assert thread.json()["latest_seq"] == 2
    events = await client.get("/v1/events?after=0&limit=50", headers=alex)
    assert events.status_code == 200
    assert "thread.created" in {e["type"] for e in events.json()["events"]}
    closed = await client.post(f"/v1/threads/{thread_id}/close", headers=alex)
    assert closed.json()["state"] == "done"


async def test_a_thread_without_read_answers_exactly_like_an_unknown_id(
    client: ContractClient, world: DemoWorld
) -> None:
    # Sam has no grant in Research: its Notizen main thread is unreadable for him.
    hidden = world.channels["notizen"].main_thread_id
    sam = bearer(world.people["sam"].token)
    denied = await client.get(f"/v1/threads/{hidden}", headers={**sam, "X-Correlation-Id": "c"})
    unknown = await client.get(
        f"/v1/threads/{uuid.uuid4()}", headers={**sam, "X-Correlation-Id": "c"}
    )
    malformed = await client.get("/v1/threads/not-a-uuid", headers={**sam, "X-Correlation-Id": "c"})
    assert denied.status_code == unknown.status_code == malformed.status_code == 404
    assert denied.content == unknown.content == malformed.content
    assert dict(denied.headers) == dict(unknown.headers) == dict(malformed.headers)


async def test_a_message_into_an_unreadable_thread_is_not_found(
    client: ContractClient, world: DemoWorld
) -> None:
    hidden = world.channels["notizen"].main_thread_id
    response = await client.post(
        f"/v1/threads/{hidden}/messages",
        json={"client_msg_id": "x", "content": "hi"},
        headers=bearer(world.people["sam"].token),
    )
    assert response.status_code == 404
    assert "reason" not in response.json()


async def test_a_message_answers_as_its_event_and_its_history_show_it(
    client: ContractClient, world: DemoWorld
) -> None:
    # The answer, the event payload and the history page are built apart: one shape.
    channel = world.channels["reports"].id
    alex = bearer(world.people["alex"].token)
    alex_id = str(world.principal("alex").id)
    created = await client.post(
        f"/v1/channels/{channel}/threads",
        json={"title": "Toner", "first_message": {"client_msg_id": "t-1", "content": "Low"}},
        headers=alex,
    )
    thread = created.json()["thread"]
    first = created.json()["message"]
    reply = await client.post(
        f"/v1/threads/{thread['id']}/messages",
        json={
            "client_msg_id": "m-2",
            "content": "Ordered",
            "mentions": [alex_id],
            "reply_to_id": first["id"],
            "restricted_to": [alex_id],
        },
        headers=alex,
    )
    assert reply.status_code == 201
    # The create answer is the Message plus what became of it (`trigger`).
    message = {k: v for k, v in reply.json().items() if k != "trigger"}
    assert reply.json()["trigger"] == {"outcome": "none"}
    assert {"reply_to_id", "restricted_to", "client_msg_id"} <= set(message)
    events = (await client.get("/v1/events?after=0&limit=200", headers=alex)).json()["events"]
    payloads = {
        (e["type"], e["resource"]["id"]): e["payload"]
        for e in events
        if e["type"] in {"thread.created", "message.created"}
    }
    assert payloads[("thread.created", thread["id"])] == {"thread": thread}
    assert payloads[("message.created", first["id"])] == {"message": first}
    assert payloads[("message.created", message["id"])] == {"message": message}
    history = await client.get(f"/v1/threads/{thread['id']}/messages", headers=alex)
    assert history.json()["messages"] == [first, message]
