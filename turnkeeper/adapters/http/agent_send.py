"""POST /v1/agent/send: an agent's message through the freshness gate (API.md).

A thin controller: decode, call `AgentSendService.send`, encode. Every state (sent,
already_sent, held) answers 200; a held send stored nothing and tells the agent through
which seq to refresh.
"""

from __future__ import annotations

import uuid

from litestar import Router, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.status_codes import HTTP_200_OK

from turnkeeper.adapters.http.dependencies import agent_route, v1_router
from turnkeeper.adapters.http.fast_path import FastAnswer, FastRoute
from turnkeeper.adapters.http.openapi import problems
from turnkeeper.adapters.http.requests import AgentSendBody
from turnkeeper.adapters.http.run_answers import AgentSendResult
from turnkeeper.application.ports.audit import AuditAction
from turnkeeper.application.services.agent_send import AgentSendService
from turnkeeper.application.services.identity import BearerToken

#: The route's path under the application (the ``/v1`` router and this one).
SEND_PATH = "/v1/agent/send"


@post(
    "/agent/send",
    status_code=HTTP_200_OK,
    responses=problems(403, 409, 429),
    opt=agent_route(AuditAction.AGENT_SEND),
)
async def agent_send(
    data: JSONBody[AgentSendBody],
    bearer: NamedDependency[BearerToken],
    agent_send: NamedDependency[AgentSendService],
) -> AgentSendResult:
    """Send an agent's message through the freshness gate: sent, already_sent or held."""
    # The token is resolved with the send's facts, in one round trip (ADR 0026).
    return AgentSendResult.of(await agent_send.send(bearer, data.send()))


def send_fast_route(agent_send: AgentSendService) -> FastRoute:
    """`agent_send` for `turnkeeper.adapters.http.fast_path` (ADR 0032).

    Args:
        agent_send: the service the route calls.

    Returns:
        The route, with the same call and answer as `agent_send`.
    """

    async def call(bearer: BearerToken, _: uuid.UUID | None, data: AgentSendBody) -> FastAnswer:
        return FastAnswer(
            AgentSendResult.of(await agent_send.send(bearer, data.send())), HTTP_200_OK
        )

    return FastRoute(path=SEND_PATH, body=AgentSendBody, call=call)


def agent_send_router() -> Router:
    """The freshness-gated send route, under ``/v1`` (`v1_router`).

    Returns:
        A new router (one per application).
    """
    return v1_router("agent runtime", [agent_send])


__all__ = ["SEND_PATH", "agent_send_router", "send_fast_route"]
