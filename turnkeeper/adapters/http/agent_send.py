"""POST /v1/agent/send: an agent's message through the freshness gate (API.md).

A thin controller: decode, call `AgentSendService.send`, encode. Every state (sent,
already_sent, held) answers 200; a held send stored nothing and tells the agent through
which seq to refresh.
"""

from __future__ import annotations

from litestar import Router, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.status_codes import HTTP_200_OK

from turnkeeper.adapters.http.openapi import problems
from turnkeeper.adapters.http.requests import AgentSendBody
from turnkeeper.adapters.http.run_answers import AgentSendResult
from turnkeeper.application.services.agent_send import AgentSendService
from turnkeeper.application.services.identity import BearerToken


@post("/agent/send", status_code=HTTP_200_OK, responses=problems(403, 409, 429))
async def agent_send(
    data: JSONBody[AgentSendBody],
    bearer: NamedDependency[BearerToken],
    agent_send: NamedDependency[AgentSendService],
) -> AgentSendResult:
    """Send an agent's message through the freshness gate: sent, already_sent or held."""
    # The token is resolved with the send's facts, in one round trip (ADR 0026).
    return AgentSendResult.of(await agent_send.send(bearer, data.send()))


def agent_send_router() -> Router:
    """The freshness-gated send route, to be mounted under ``/v1``.

    Returns:
        A new router (one per application).
    """
    return Router(path="/", tags=["agent runtime"], route_handlers=[agent_send])


__all__ = ["agent_send_router"]
