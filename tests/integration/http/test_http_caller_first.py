"""A caller a route never admits is refused before its input is read.

A non-owner on an administrative route gets 403 ``forbidden`` / ``owner_required``, a
person on a route of the agent runtime 403 ``forbidden`` / ``agents_only``: audited, and
whatever it sent, so it learns nothing of how the input is read (docs/rights.md: "Every
denial is audited, also the refusals of administrative routes to anyone but the
owner"). An unknown token is still 401 first; an admitted caller's bad input is 400.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.integration.http.test_http_problems import assert_problem
from tests.support.http import ContractClient, bearer
from tests.support.scenario import denials
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld

#: (method, path, request keywords, audited action) of refused administrative inputs; the
#: path names ids of the demo world by `_ids`.
REQUESTS: list[tuple[str, str, dict[str, Any], str]] = [
    (
        "POST",
        "/v1/principals",
        {"json": {"kind": "person", "handle": "x", "extra": 1}},
        "principal.create",
    ),
    ("POST", "/v1/spaces", {"json": {}}, "space.create"),
    (
        "POST",
        "/v1/spaces/{space}/channels",
        {"json": {"name": "v", "type": "voice"}},
        "channel.create",
    ),
    ("PUT", "/v1/channels/{channel}/behavior", {"json": {"x": 1}}, "channel.behavior"),
    ("PUT", "/v1/channels/{channel}/operator", {"json": {"mode": "bogus"}}, "channel.operator"),
    ("POST", "/v1/channels/{channel}/archive", {"json": {"why": "no"}}, "channel.archive"),
    ("POST", "/v1/grants", {"json": {"level": "admin"}}, "grant.create"),
    ("DELETE", "/v1/grants/not-a-uuid", {}, "grant.delete"),
    ("GET", "/v1/grants", {"params": {"principal_id": "bad"}}, "grant.list"),
    ("PUT", "/v1/agents/{lotse}/config", {"json": {"enabled": "no"}}, "agent.config"),
    ("POST", "/v1/principals/{sam}/tokens", {"json": {"label": 7}}, "token.create"),
    ("GET", "/v1/principals/not-a-uuid/tokens", {}, "token.list"),
    ("DELETE", "/v1/principals/{sam}/tokens/{unknown}x", {}, "token.revoke"),
]


def _ids(world: DemoWorld) -> dict[str, uuid.UUID]:
    return {
        "channel": world.channels["allgemein"].id,
        "space": world.spaces["support"].id,
        "sam": world.principal("sam").id,
        "lotse": world.principal("lotse").id,
        "unknown": uuid.uuid4(),
    }


@pytest.mark.parametrize(("method", "path", "keywords", "action"), REQUESTS)
async def test_an_unknown_token_is_still_401_first(
    client: ContractClient,
    world: DemoWorld,
    method: str,
    path: str,
    keywords: dict[str, Any],
    action: str,
) -> None:
    path = path.format(**_ids(world))
    answer = await client.request(method, path, headers=bearer("tk_unknown"), **keywords)
    assert_problem(answer, 401, "unauthenticated")


#: Inputs of the agent runtime's routes a person sends: (method, path, keywords, action).
AGENT_REQUESTS: list[tuple[str, str, dict[str, Any], str]] = [
    ("POST", "/v1/agent/send", {"json": {"x": 1}}, "agent.send"),
    ("POST", "/v1/agent/events/ack", {"json": {}}, "agent.events.consume"),
    ("PUT", "/v1/agent/heartbeat", {"json": {"y": 1}}, "agent.heartbeat"),
    ("GET", "/v1/agent/events", {"params": {"limit": "x"}}, "agent.events.consume"),
    ("GET", "/v1/agent/events/stream", {"params": {"after": "x"}}, "agent.events.consume"),
]


#: Every refused input with the reason of its refusal: Alex is neither the owner nor an agent.
REFUSALS = [(*request, "owner_required") for request in REQUESTS] + [
    (*request, "agents_only") for request in AGENT_REQUESTS
]


@pytest.mark.parametrize(("method", "path", "keywords", "action", "reason"), REFUSALS)
async def test_a_caller_the_route_never_admits_is_refused_before_its_input_is_read(
    client: ContractClient,
    world: DemoWorld,
    services: Services,
    method: str,
    path: str,
    keywords: dict[str, Any],
    action: str,
    reason: str,
) -> None:
    path = path.format(**_ids(world))
    alex = world.principal("alex")
    answer = await client.request(
        method, path, headers=bearer(world.people["alex"].token), **keywords
    )
    body = assert_problem(answer, 403, "forbidden")
    assert body["reason"] == reason
    assert await denials(services, alex) == [(action, reason, 1)]


@pytest.mark.parametrize(("method", "path", "keywords", "action"), AGENT_REQUESTS)
async def test_an_agents_own_bad_input_is_still_400(
    client: ContractClient,
    world: DemoWorld,
    method: str,
    path: str,
    keywords: dict[str, Any],
    action: str,
) -> None:
    answer = await client.request(
        method, path, headers=bearer(world.agents["lotse"].token), **keywords
    )
    assert_problem(answer, 400, "validation_failed")
