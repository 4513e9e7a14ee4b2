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
from turnkeeper.adapters.http.schemas import AgentSendBody, AgentSendResult, answer, given
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.services.agent_send import AgentSend, SendFreshness, SendOutcome
from turnkeeper.domain.world import Principal


def _request(body: AgentSendBody) -> AgentSend:
    freshness = given(body.freshness)
    return AgentSend(
        target=body.target,
        content=body.content,
        client_message_id=given(body.client_message_id) or "",
        run_id=given(body.run_id),
        freshness=None
        if freshness is None
        else SendFreshness(
            target_key=given(freshness.target_key) or "",
            seen_up_to_seq=freshness.seen_up_to_seq,
            source_message_ids=tuple(given(freshness.source_message_ids) or ()),
        ),
    )


def send_document(outcome: SendOutcome) -> dict[str, object]:
    """The answer document of a send (absent members omitted, never null).

    Args:
        outcome: the service's answer.

    Returns:
        ``{state, target_key, client_message_id, latest_seq, message_id?,
        seen_up_to_seq?, accepted_seq?, needs_refresh_until_seq?}``.
    """
    document: dict[str, object] = {
        "state": outcome.state.value,
        "target_key": outcome.target_key,
        "client_message_id": outcome.client_message_id,
        "latest_seq": outcome.latest_seq,
    }
    optional = {
        "message_id": None if outcome.message_id is None else str(outcome.message_id),
        "seen_up_to_seq": outcome.seen_up_to_seq,
        "accepted_seq": outcome.accepted_seq,
        "needs_refresh_until_seq": outcome.needs_refresh_until_seq,
    }
    document.update({k: v for k, v in optional.items() if v is not None})
    return document


@post("/agent/send", status_code=HTTP_200_OK, responses=problems(403, 409, 429))
async def agent_send(
    data: JSONBody[AgentSendBody],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> AgentSendResult:
    """Send an agent's message through the freshness gate: sent, already_sent or held."""
    outcome = await services.agent_send.send(principal, _request(data))
    return answer(send_document(outcome), AgentSendResult)


def agent_send_router() -> Router:
    """The freshness-gated send route, to be mounted under ``/v1``.

    Returns:
        A new router (one per application).
    """
    return Router(path="/", tags=["agent runtime"], route_handlers=[agent_send])


__all__ = ["agent_send_router", "send_document"]
