"""Routes whose body has no required member take a request without a body as ``{}``.

API.md gives four routes a body of optional members only: a token's ``{label?}``, a
channel's switches, an agent's configuration and await-input's ``{question?}``. A client
that has nothing to say sends no body at all, and gets what ``{}`` gets. JSON ``null``
is no object: it stays refused, as on every route with a body.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.http.test_http_runs import poll, trigger
from tests.support.http import ContractClient, bearer, bearer_of
from turnkeeper.application.demo import DemoWorld

#: The routes with a body of optional members only: (method, path template).
OPTIONAL_BODY_ROUTES = {
    ("post", "/v1/principals/{principal_id}/tokens"),
    ("put", "/v1/channels/{channel_id}/behavior"),
    ("put", "/v1/agents/{agent_id}/config"),
    ("post", "/v1/runs/{run_id}/await-input"),
}


async def _running_run(client: ContractClient, world: DemoWorld) -> str:
    await trigger(client, world)
    (invocation,) = [
        e for e in (await poll(client, world))["events"] if e["type"] == "agent.invocation"
    ]
    run_id = str(invocation["payload"]["run_id"])
    started = await client.post(
        f"/v1/runs/{run_id}/start",
        json={"invocation_token": invocation["invocation_token"]},
        headers=bearer_of(world, "lotse"),
    )
    assert started.json()["state"] == "running"
    return run_id


async def _request(
    client: ContractClient,
    world: DemoWorld,
    route: str,
    headers_extra: dict[str, str] | None = None,
    **body: Any,
) -> tuple[int, dict[str, Any]]:
    """Send one of the routes with ``body`` (httpx's content= or json=)."""
    owner = {**bearer(world.owner.token), **(headers_extra or {})}
    if route == "token":
        answer = await client.post(
            f"/v1/principals/{world.principal('sam').id}/tokens", headers=owner, **body
        )
    elif route == "behavior":
        channel = world.channels["allgemein"].id
        answer = await client.put(f"/v1/channels/{channel}/behavior", headers=owner, **body)
    elif route == "config":
        agent = world.principal("lotse").id
        answer = await client.put(f"/v1/agents/{agent}/config", headers=owner, **body)
    else:
        run_id = await _running_run(client, world)
        answer = await client.post(
            f"/v1/runs/{run_id}/await-input",
            headers={**bearer_of(world, "lotse"), **(headers_extra or {})},
            **body,
        )
    decoded: dict[str, Any] = answer.json()
    return answer.status_code, decoded


def _same_effect(route: str, answer: dict[str, Any]) -> Any:
    """What an answer of the route shows that does not differ between two calls."""
    if route == "token":
        return sorted(answer)
    return {k: v for k, v in answer.items() if k not in {"updated_at"}}


ROUTES = ["token", "behavior", "config", "await-input"]


@pytest.mark.parametrize("route", ROUTES)
async def test_no_body_is_taken_as_an_empty_object(
    client: ContractClient, world: DemoWorld, route: str
) -> None:
    status, answer = await _request(client, world, route)
    assert status in (200, 201), answer
    if route == "await-input":
        # A second run of the thread would be a follow-up of this one: test_http_runs
        # shows what ``{}`` does.
        assert answer["state"] == "waiting_input"
        return
    empty_status, empty = await _request(client, world, route, json={})
    assert (status, _same_effect(route, answer)) == (empty_status, _same_effect(route, empty))
    if route == "token":
        assert "label" not in answer


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    "content_type", ["application/x-www-form-urlencoded", "text/plain", "multipart/form-data"]
)
async def test_an_empty_body_of_another_media_type_is_no_body_either(
    client: ContractClient, world: DemoWorld, route: str, content_type: str
) -> None:
    # ``curl -X POST -d ''`` sends an empty form.
    status, answer = await _request(
        client, world, route, content=b"", headers_extra={"content-type": content_type}
    )
    assert status in (200, 201), answer


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("content_type", ["application/json", "text/plain"])
async def test_a_blank_body_is_no_body_either(
    client: ContractClient, world: DemoWorld, route: str, content_type: str
) -> None:
    # The routes that take no body take a blank one; these take it as no body too.
    status, answer = await _request(
        client, world, route, content=b" \r\n\t ", headers_extra={"content-type": content_type}
    )
    assert status in (200, 201), answer


@pytest.mark.parametrize("route", ROUTES)
async def test_a_body_of_another_media_type_is_still_refused(
    client: ContractClient, world: DemoWorld, route: str
) -> None:
    status, answer = await _request(
        client, world, route, content=b"label=x", headers_extra={"content-type": "text/plain"}
    )
    assert (status, answer["code"]) == (415, "unsupported_media_type")


@pytest.mark.parametrize("route", ROUTES)
async def test_json_null_is_still_refused(
    client: ContractClient, world: DemoWorld, route: str
) -> None:
    status, answer = await _request(client, world, route, content=b"null")
    assert (status, answer["code"], answer["errors"]) == (
        400,
        "validation_failed",
        [{"pointer": "", "code": "invalid_type"}],
    )


async def test_the_document_marks_those_bodies_optional_and_every_other_required(
    client: ContractClient,
) -> None:
    bodies = {
        (method, path): operation["requestBody"].get("required", False)
        for path, item in client.spec["paths"].items()
        for method, operation in item.items()
        if isinstance(operation, dict) and "requestBody" in operation
    }
    assert set(bodies) >= OPTIONAL_BODY_ROUTES
    assert {route for route, required in bodies.items() if not required} == OPTIONAL_BODY_ROUTES
