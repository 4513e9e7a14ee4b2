"""The methods of a path: OPTIONS and a 405 name them all; HEAD is the GET without content."""

from __future__ import annotations

import re
import uuid

import anyio
import pytest
from litestar.routes import HTTPRoute
from litestar.testing import AsyncTestClient

from turnkeeper.adapters.http.app import create_app
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import build_demo_world

#: A method no route has (its 405 names the methods the path has).
UNUSED_METHOD = "PROPFIND"
#: Seconds a HEAD of an event stream may take (its head comes at once, no event needed).
STREAM_HEAD_SECONDS = 5


def _concrete(path_format: str) -> str:
    """A request path for a route template: every parameter spelt as a new id."""
    return re.sub(r"\{[^}]+\}", lambda _match: str(uuid.uuid4()), path_format)


def _methods(header: str) -> set[str]:
    return {method.strip() for method in header.split(",")}


async def test_options_names_every_method_of_a_path_with_several_handlers(
    services: Services,
) -> None:
    app = create_app(services, services.settings)
    async with AsyncTestClient(app) as http:
        response = await http.options(f"/v1/threads/{uuid.uuid4()}/messages")
    assert response.status_code == 204
    assert _methods(response.headers["allow"]) == {"GET", "HEAD", "OPTIONS", "POST"}


@pytest.mark.parametrize("method", ["OPTIONS", UNUSED_METHOD])
async def test_every_route_answers_its_own_methods(services: Services, method: str) -> None:
    app = create_app(services, services.settings)
    routes = [route for route in app.routes if isinstance(route, HTTPRoute)]
    async with AsyncTestClient(app) as http:
        for route in routes:
            response = await http.request(method, _concrete(route.path_format))
            expected = set(route.methods) | ({"HEAD"} if "GET" in route.methods else set())
            assert _methods(response.headers["allow"]) == expected, route.path


async def test_head_is_the_get_without_its_content(services: Services) -> None:
    # RFC 9110, 9.1: a general-purpose server supports GET and HEAD.
    world = await build_demo_world(services)
    app = create_app(services, services.settings)
    alex = {"Authorization": f"Bearer {world.people['alex'].token}"}
    async with AsyncTestClient(app) as http:
        for path, headers in (("/healthz", {}), ("/v1/me", alex), ("/openapi.json", {})):
            got = await http.get(path, headers=headers)
            head = await http.head(path, headers=headers)
            assert (head.status_code, head.content) == (got.status_code, b""), path
            assert head.headers["content-type"] == got.headers["content-type"], path
            assert head.headers["content-length"] == got.headers["content-length"], path
            assert head.headers["x-correlation-id"] != got.headers["x-correlation-id"]
        refused = await http.head("/v1/me")
        assert (refused.status_code, refused.content) == (401, b"")


async def test_head_of_a_stream_answers_its_head_at_once(services: Services) -> None:
    world = await build_demo_world(services)
    app = create_app(services, services.settings)
    alex = {"Authorization": f"Bearer {world.people['alex'].token}"}
    async with AsyncTestClient(app) as http:
        with anyio.fail_after(STREAM_HEAD_SECONDS):
            head = await http.head("/v1/events/stream", headers=alex)
    assert head.status_code == 200
    assert head.headers["content-type"].startswith("text/event-stream")
    assert head.content == b""


async def test_head_is_allowed_where_get_is(services: Services) -> None:
    app = create_app(services, services.settings)
    async with AsyncTestClient(app) as http:
        options = await http.options("/healthz")
        assert _methods(options.headers["allow"]) == {"GET", "HEAD", "OPTIONS"}
        posted_only = await http.head("/v1/agent/send")
        assert posted_only.status_code == 405
        assert "HEAD" not in _methods(posted_only.headers["allow"])
        wrong = await http.delete("/healthz")
        assert _methods(wrong.headers["allow"]) == {"GET", "HEAD", "OPTIONS"}


@pytest.mark.parametrize("path", ["/v1/agent/events", "/v1/agent/events/stream"])
async def test_head_of_the_agent_feed_delivers_nothing(services: Services, path: str) -> None:
    # Found by an audit: the HEAD ran the GET, which delivers: it minted an invocation
    # token nobody received, moved the trigger message to queued (a message.updated for
    # every reader) and made the agent's first real poll say redelivered.
    world = await build_demo_world(services)
    app = create_app(services, services.settings)
    alex = {"Authorization": f"Bearer {world.people['alex'].token}"}
    lotse = {"Authorization": f"Bearer {world.agents['lotse'].token}"}
    thread = world.channels["allgemein"].main_thread_id
    async with AsyncTestClient(app) as http:
        posted = await http.post(
            f"/v1/threads/{thread}/messages",
            json={"client_msg_id": "head-1", "content": "Lotse, the report please"},
            headers=alex,
        )
        assert posted.json()["trigger"]["outcome"] == "run_opened"
        with anyio.fail_after(STREAM_HEAD_SECONDS):
            head = await http.head(path, headers=lotse)
        assert (head.status_code, head.content) == (200, b"")
        history = await http.get(f"/v1/threads/{thread}/messages", headers=alex)
        (message,) = [m for m in history.json()["messages"] if m["id"] == posted.json()["id"]]
        assert message["trigger_state"] == "received"
        polled = await http.get("/v1/agent/events", headers=lotse)
        (delivery,) = polled.json()["events"]
        assert (delivery["type"], "redelivered" in delivery) == ("agent.invocation", False)
        # The checks of the GET still answer: no token, a person, a bad limit.
        assert (await http.head(path)).status_code == 401
        assert (await http.head(path, headers=alex)).status_code == 403
        assert (await http.head(f"{path}?after=-1", headers=lotse)).status_code == 400
