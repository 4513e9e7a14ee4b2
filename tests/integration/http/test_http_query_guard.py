"""Query parameters an API route does not declare, or declares once, are refused.

API.md: "Unknown request members: 400 validation_failed with code unknown_member". A
parameter a route does not declare was ignored without a word (``?after=10`` on a
thread's history, whose cursor is ``after_seq``, read from the start), and a repeated
one was decoded from its last value, while a repeated body member is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from tests.integration.http.test_http_problems import assert_problem
from tests.support.asgi import get_scope
from tests.support.http import ContractClient, bearer
from turnkeeper.application.demo import DemoWorld


def _errors(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["pointer"], e["code"]) for e in body["errors"]]


@pytest.mark.parametrize(
    ("route", "query", "errors"),
    [
        ("/v1/threads/{thread}/messages", "after=10", [("/after", "unknown_member")]),
        ("/v1/threads/{thread}/messages", "limit=1&limit=2", [("/limit", "duplicate_member")]),
        ("/v1/events", "after_seq=3", [("/after_seq", "unknown_member")]),
        (
            "/v1/events",
            "x%2Fy=1&limit=1&colour=red&limit=3&colour=blue",
            [
                ("/x~1y", "unknown_member"),
                ("/colour", "unknown_member"),
                ("/limit", "duplicate_member"),
            ],
        ),
        ("/v1/threads/{thread}", "after=1", [("/after", "unknown_member")]),
        ("/v1/me", "verbose", [("/verbose", "unknown_member")]),
        ("/v1/events/stream", "since=1", [("/since", "unknown_member")]),
    ],
)
async def test_a_query_naming_a_parameter_wrongly_is_refused(
    client: ContractClient,
    world: DemoWorld,
    route: str,
    query: str,
    errors: list[tuple[str, str]],
) -> None:
    thread = world.channels["allgemein"].main_thread_id
    response = await client.get(
        f"{route.format(thread=thread)}?{query}", headers=bearer(world.people["alex"].token)
    )
    body = assert_problem(response, 400, "validation_failed")
    assert _errors(body) == errors


async def test_a_declared_query_still_pages(client: ContractClient, world: DemoWorld) -> None:
    thread = world.channels["allgemein"].main_thread_id
    alex = bearer(world.people["alex"].token)
    for n in range(3):
        await client.post(
            f"/v1/threads/{thread}/messages",
            json={"client_msg_id": f"q-{n}", "content": f"Note {n} for Sam"},
            headers=alex,
        )
    page = await client.get(f"/v1/threads/{thread}/messages?after_seq=1&limit=1", headers=alex)
    assert page.status_code == 200
    assert [m["thread_seq"] for m in page.json()["messages"]] == [2]
    # A parameter without a value names a declared parameter: its value is the decoder's.
    blank = await client.get(f"/v1/threads/{thread}/messages?limit=", headers=alex)
    assert _errors(assert_problem(blank, 400, "validation_failed"))[0][0] == "/limit"


async def test_a_post_with_a_query_stores_nothing(client: ContractClient, world: DemoWorld) -> None:
    # The hot route's own path hands a request with a query to Litestar, which refuses it.
    thread = world.channels["allgemein"].main_thread_id
    alex = bearer(world.people["alex"].token)
    refused = await client.post(
        f"/v1/threads/{thread}/messages?notify=false",
        json={"client_msg_id": "q-post", "content": "Sam, see the plan."},
        headers=alex,
    )
    assert _errors(assert_problem(refused, 400, "validation_failed")) == [
        ("/notify", "unknown_member")
    ]
    history = await client.get(f"/v1/threads/{thread}/messages", headers=alex)
    assert "Sam, see the plan." not in {m["content"] for m in history.json()["messages"]}
    sent = await client.post(
        f"/v1/threads/{thread}/messages",
        json={"client_msg_id": "q-post", "content": "Sam, see the plan."},
        headers=alex,
    )
    assert sent.status_code == 201


async def test_an_unknown_token_is_401_before_the_query(client: ContractClient) -> None:
    response = await client.get("/v1/events?after_seq=3", headers=bearer("tk_unknown"))
    assert_problem(response, 401, "unauthenticated")


@pytest.mark.parametrize("path", ["/healthz?probe=1", "/readyz?probe=1", "/openapi.json?v=2"])
async def test_pages_outside_the_api_keep_their_queries(client: ContractClient, path: str) -> None:
    assert (await client.get(path)).status_code == 200


#: Integers written otherwise: Litestar read them through a float (``0.99999999999999999``
#: as 1, ``9007199254740993.0`` as 9007199254740992) or refused some of them only.
NOT_INTEGERS = [
    "1.5e1",
    "0.99999999999999999",
    "1.0",
    "2e0",
    "050",
    "+5",
    "%205",
    "0x10",
    "",
    "-0",
    "-05",
]


@pytest.mark.parametrize("value", NOT_INTEGERS)
@pytest.mark.parametrize(
    ("route", "name", "agent"),
    [
        ("/v1/threads/{thread}/messages", "after_seq", False),
        ("/v1/threads/{thread}/messages", "limit", False),
        ("/v1/events", "after", False),
        ("/v1/events", "limit", False),
        ("/v1/events/stream", "after", False),
        ("/v1/agent/events", "after", True),
        ("/v1/agent/events/stream", "after", True),
    ],
)
async def test_an_integer_parameter_written_otherwise_is_invalid_type(
    client: ContractClient, world: DemoWorld, route: str, name: str, agent: bool, value: str
) -> None:
    thread = world.channels["allgemein"].main_thread_id
    token = world.agents["lotse"].token if agent else world.people["alex"].token
    response = await client.get(
        f"{route.format(thread=thread)}?{name}={value}", headers=bearer(token)
    )
    body = assert_problem(response, 400, "validation_failed")
    assert _errors(body) == [(f"/{name}", "invalid_type")]


async def test_an_integer_cursor_is_read_exactly(client: ContractClient, world: DemoWorld) -> None:
    alex = bearer(world.people["alex"].token)
    big = 2**53 + 1
    page = await client.get(f"/v1/events?after={big}", headers=alex)
    assert page.status_code == 200
    assert page.json()["next_after"] == big
    # The header of a reconnecting stream follows the query's rule.
    refused = await client.get("/v1/events/stream", headers={**alex, "Last-Event-ID": "050"})
    assert _errors(assert_problem(refused, 400, "validation_failed")) == [
        ("/Last-Event-ID", "invalid_type")
    ]


async def _answer_status(app: Any, path: str, token: str, cursors: list[str]) -> int:
    """The status of the application's answer to a stream GET, its answer then cut.

    Driven as a server drives it, so that two header lines stay two (the test client
    joins them into one, "1, 2"); a stream that opens is cancelled once it has started.
    """
    scope = get_scope(path, token)
    scope["headers"] += [(b"last-event-id", cursor.encode()) for cursor in cursors]
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    client_left = asyncio.Event()
    sent_body = False

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await client_left.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and not started.done():
            started.set_result(message["status"])

    serving = asyncio.create_task(app(scope, receive, send))
    try:
        return await started
    finally:
        client_left.set()
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving


@pytest.mark.parametrize("path", ["/v1/events/stream", "/v1/agent/events/stream"])
async def test_a_cursor_header_given_twice_is_a_duplicate_as_a_query_parameter_is(
    client: ContractClient, world: DemoWorld, path: str
) -> None:
    # The first of the two was taken: a cursor the client may not have meant.
    token = world.agents["lotse"].token
    twice = await _answer_status(client.http.app, path, token, ["1", "2"])
    once = await _answer_status(client.http.app, path, token, ["1"])
    assert (twice, once) == (400, 200)
    refused = await client.get(path, headers={**bearer(token), "Last-Event-ID": "1, 2"})
    assert _errors(assert_problem(refused, 400, "validation_failed")) == [
        ("/Last-Event-ID", "invalid_type")
    ]


#: A number of more digits than Python converts to an int (``sys.get_int_max_str_digits``).
HUGE = "9" * 5000


@pytest.mark.parametrize(
    ("route", "who", "query", "errors"),
    [
        # msgspec's lax reading of a query took the word null for an absent value: the
        # filter was dropped and every grant listed, the wait was none.
        ("/v1/grants", "owner", "principal_id=null", [("/principal_id", "invalid")]),
        ("/v1/grants", "owner", "resource_id=NULL", [("/resource_id", "invalid")]),
        ("/v1/events", "alex", "wait=null", [("/wait", "invalid_type")]),
        ("/v1/agent/events", "lotse", "wait=Null", [("/wait", "invalid_type")]),
        # Numbers beyond any bound are out of range, however many digits they have
        # (Python reads at most a few thousand: they were `invalid`).
        ("/v1/events", "alex", f"after={HUGE}", [("/after", "out_of_range")]),
        ("/v1/events", "alex", f"after=-{HUGE}", [("/after", "out_of_range")]),
        ("/v1/events", "alex", f"limit={HUGE}", [("/limit", "out_of_range")]),
        ("/v1/agent/events", "lotse", f"after={HUGE}", [("/after", "out_of_range")]),
        (
            "/v1/threads/{thread}/messages",
            "alex",
            f"after_seq={HUGE}",
            [("/after_seq", "out_of_range")],
        ),
        ("/v1/events", "alex", "wait=1e309", [("/wait", "out_of_range")]),
        ("/v1/events", "alex", f"wait={HUGE}", [("/wait", "out_of_range")]),
        ("/v1/agent/events", "lotse", f"wait={HUGE}.5", [("/wait", "out_of_range")]),
    ],
)
async def test_a_value_read_loosely_or_beyond_any_bound_is_refused_as_such(
    client: ContractClient,
    world: DemoWorld,
    route: str,
    who: str,
    query: str,
    errors: list[tuple[str, str]],
) -> None:
    thread = world.channels["allgemein"].main_thread_id
    token = (
        world.owner.token if who == "owner" else (world.people.get(who) or world.agents[who]).token
    )
    response = await client.get(f"{route.format(thread=thread)}?{query}", headers=bearer(token))
    body = assert_problem(response, 400, "validation_failed")
    assert _errors(body) == errors
