"""POST /v1/agent/send: an agent's message through the freshness gate (API.md).

A thin controller: decode, call `AgentSendService.send`, encode. Every state (sent,
already_sent, held) answers 200; a held send stored nothing and tells the agent through
which seq to refresh.
"""

from __future__ import annotations

import uuid
from typing import Any

from litestar import Request, Router, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.status_codes import HTTP_200_OK
from litestar.types import Scope

from turnkeeper.adapters.http.dependencies import agent_route, mark_reached, reached, v1_router
from turnkeeper.adapters.http.fast_path import FastAnswer, FastRoute
from turnkeeper.adapters.http.openapi_problems import problems
from turnkeeper.adapters.http.problems import problem_for
from turnkeeper.adapters.http.requests import AgentSendBody
from turnkeeper.adapters.http.run_answers import AgentSendResult
from turnkeeper.application.ports.audit import AuditAction
from turnkeeper.application.services.agent_send import AgentSendService
from turnkeeper.application.services.identity import BearerToken
from turnkeeper.application.services.send_records import send_log
from turnkeeper.domain.world import Principal

#: The route's path under the application (the ``/v1`` router and this one).
SEND_PATH = "/v1/agent/send"


@post(
    "/agent/send",
    status_code=HTTP_200_OK,
    responses=problems(
        "freshness_required",
        "client_message_id_required",
        "target_key_mismatch",
        "content_required",
        "run_mismatch",
        "agents_only",
        "level_insufficient",
        "channel_archived",
        "idempotency_conflict",
        "run_not_active",
        "message_rate_limited",
    ),
    opt=agent_route(AuditAction.AGENT_SEND),
)
async def agent_send(
    request: Request[Any, Any, Any],
    data: JSONBody[AgentSendBody],
    bearer: NamedDependency[BearerToken],
    agent_send: NamedDependency[AgentSendService],
) -> AgentSendResult:
    """Send an agent's message through the freshness gate: sent, already_sent or held."""
    # From here on the service writes the record of a refusal (`log_refused_send`).
    mark_reached(request.scope)
    # The token is resolved with the send's facts, in one round trip (ADR 0026).
    return AgentSendResult.of(await agent_send.send(bearer, data.send()))


def log_refused_send(caller: Principal, exc: Exception, scope: Scope) -> None:
    """Write the ``agent_send_refused`` record of a send refused for its body.

    The service records every send it refuses (docs/freshness.md, "Logs"); a body that
    does not decode (not JSON, a duplicated or unknown member, a wrong type) is refused
    before the service sees it, so the record is written here, with the agent and the
    problem code only (such a body names nothing reliably). A person's refusal is no
    send, nor is another route's; a body over ``http.max_body_bytes`` is refused (413)
    before its caller is known, so it has no record.

    Args:
        caller: the authenticated caller (a `refuse_unknown_bearer` ``refused_input``).
        exc: the refusal.
        scope: the exchange's scope.
    """
    handler = scope.get("route_handler")
    if getattr(handler, "fn", None) is not agent_send.fn or not caller.is_agent:
        return
    if reached(scope):
        return
    answer = problem_for(exc)
    send_log().info(
        "agent_send_refused", agent_id=str(caller.id), state="refused", code=answer.code
    )


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


__all__ = ["SEND_PATH", "agent_send_router", "log_refused_send", "send_fast_route"]
