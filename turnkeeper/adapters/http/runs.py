"""Routes of runs and of the agent runtime (API.md, sections Runs and Agent runtime).

Thin controllers: decode, call the runs service, encode. Invocation tokens appear only in
the agent feed's answers, never in logs or problems. An agent's moves of its own run
(start, await-input, resume, finish, the patch), its poll and its acknowledgement take
the bearer token unresolved: the use case reads it in the round trip that locks the run,
or the cursor (ADR 0026).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from litestar import Request, Response, Router, get, patch, post, put
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_204_NO_CONTENT

from turnkeeper.adapters.http.correlation import answers_head
from turnkeeper.adapters.http.dependencies import agent_route, v1_router
from turnkeeper.adapters.http.disconnect import until_client_leaves
from turnkeeper.adapters.http.openapi_problems import ProblemName, problems
from turnkeeper.adapters.http.requests import (
    AckBody,
    AwaitInputBody,
    FinishBody,
    HeartbeatBody,
    InvocationTokenBody,
    RunPatch,
    given,
)
from turnkeeper.adapters.http.run_answers import AgentEventPage, Run
from turnkeeper.application.ports.audit import AuditAction
from turnkeeper.application.services.identity import BearerToken
from turnkeeper.application.services.live import LiveDelivery
from turnkeeper.application.services.runs import AgentEventPage as ServiceAgentEventPage
from turnkeeper.application.services.runs import RunsService, RunView
from turnkeeper.domain.events import MAX_SEQ
from turnkeeper.domain.runs import RunState
from turnkeeper.domain.world import Principal

#: The body of a request without one (`OptionalBody`).
_NO_QUESTION = AwaitInputBody()


def _run(view: RunView) -> Response[Run]:
    return Response(
        Run.of(view),
        status_code=HTTP_200_OK,
        headers={"ETag": f'"{view.run.version}"'},
    )


@get("/runs/{run_id:str}", responses=problems())
async def get_run(
    run_id: FromPath[uuid.UUID],
    principal: NamedDependency[Principal],
    runs: NamedDependency[RunsService],
) -> Response[Run]:
    """The run document (``ETag`` is its version)."""
    return _run(await runs.get(principal, run_id))


#: What refuses every move of a run that goes on (docs/rights.md).
_MOVE_REFUSALS: tuple[ProblemName, ...] = (
    "not_run_agent",
    "channel_archived",
    "invalid_state_transition",
)
#: What refuses an invocation token that is not this run's (start and resume).
_TOKEN_REFUSALS: tuple[ProblemName, ...] = (
    "token_malformed",
    "token_expired",
    "token_run_mismatch",
)


@post(
    "/runs/{run_id:str}/cancel",
    status_code=HTTP_200_OK,
    responses=problems("level_insufficient", "channel_archived", "invalid_state_transition"),
)
async def cancel_run(
    run_id: FromPath[uuid.UUID],
    principal: NamedDependency[Principal],
    runs: NamedDependency[RunsService],
) -> Response[Run]:
    """A person with trigger on the thread stops the run."""
    return _run(await runs.cancel(principal, run_id))


@post(
    "/runs/{run_id:str}/start",
    status_code=HTTP_200_OK,
    responses=problems(*_MOVE_REFUSALS, *_TOKEN_REFUSALS),
)
async def start_run(
    run_id: FromPath[uuid.UUID],
    data: JSONBody[InvocationTokenBody],
    bearer: NamedDependency[BearerToken],
    runs: NamedDependency[RunsService],
) -> Response[Run]:
    """Queued -> running, with the token of the invocation's delivery."""
    return _run(await runs.start(bearer, run_id, data.invocation_token))


@post(
    "/runs/{run_id:str}/await-input",
    status_code=HTTP_200_OK,
    responses=problems(*_MOVE_REFUSALS),
)
async def await_input(
    run_id: FromPath[uuid.UUID],
    bearer: NamedDependency[BearerToken],
    runs: NamedDependency[RunsService],
    data: JSONBody[AwaitInputBody] = _NO_QUESTION,
) -> Response[Run]:
    """Running -> waiting_input (the question is shown by the agent, not stored)."""
    return _run(await runs.await_input(bearer, run_id))


@post(
    "/runs/{run_id:str}/resume",
    status_code=HTTP_200_OK,
    responses=problems(*_MOVE_REFUSALS, *_TOKEN_REFUSALS, "token_superseded"),
)
async def resume_run(
    run_id: FromPath[uuid.UUID],
    data: JSONBody[InvocationTokenBody],
    bearer: NamedDependency[BearerToken],
    runs: NamedDependency[RunsService],
) -> Response[Run]:
    """waiting_input -> running, only with the token of the latest delivery."""
    return _run(await runs.resume(bearer, run_id, data.invocation_token))


@post(
    "/runs/{run_id:str}/finish",
    status_code=HTTP_200_OK,
    responses=problems("not_run_agent", "invalid_state_transition"),
)
async def finish_run(
    run_id: FromPath[uuid.UUID],
    data: JSONBody[FinishBody],
    bearer: NamedDependency[BearerToken],
    runs: NamedDependency[RunsService],
) -> Response[Run]:
    """End the run (a repeated identical finish is a no-op)."""
    view = await runs.finish(bearer, run_id, RunState(data.state), given(data.reason))
    return _run(view)


@patch(
    "/runs/{run_id:str}",
    status_code=HTTP_200_OK,
    responses=problems(
        "patch_target_missing",
        "not_run_agent",
        "channel_archived",
        "base_version_conflict",
        "run_not_active",
        "invalid_state_transition",
    ),
)
async def patch_run(
    run_id: FromPath[uuid.UUID],
    data: JSONBody[RunPatch],
    bearer: NamedDependency[BearerToken],
    runs: NamedDependency[RunsService],
) -> Response[Run]:
    """Acknowledge follow-ups (delivered, absorbed): forward only, all or nothing."""
    return _run(await runs.patch(bearer, run_id, data.base_version, data.followup_ops()))


@get(
    "/agent/events",
    responses=problems("agents_only"),
    opt=agent_route(AuditAction.AGENT_EVENTS_CONSUME),
)
async def poll_agent_events(
    request: Request[Any, Any, Any],
    bearer: NamedDependency[BearerToken],
    live: NamedDependency[LiveDelivery],
    after: Annotated[
        int | None,
        QueryParameter(description="cursor; the acknowledged position if absent", le=MAX_SEQ),
    ] = None,
    limit: Annotated[int | None, QueryParameter(description="page size, page.max_limit")] = None,
    wait: Annotated[
        float | None,
        QueryParameter(
            description="long-poll: seconds to wait for one event, stream.max_wait_seconds"
        ),
    ] = None,
) -> AgentEventPage:
    """The agent's personal events, with a fresh invocation token per delivery.

    A long poll ends as soon as its client disconnects (`until_client_leaves`): nothing
    is delivered to a client that left. A HEAD delivers nothing: the request's checks,
    then the head of an empty page.
    """
    if answers_head(request.scope):
        await live.check_agent_feed(bearer, after=after, limit=limit, wait=wait)
        return AgentEventPage.of(ServiceAgentEventPage(deliveries=[], next_after=after or 0))
    waited = live.wait_agent_events(bearer, after=after, limit=limit, wait=wait)
    page = await (until_client_leaves(waited, request.receive) if wait else waited)
    return AgentEventPage.of(page)


@post(
    "/agent/events/ack",
    status_code=HTTP_204_NO_CONTENT,
    responses=problems("agents_only"),
    opt=agent_route(AuditAction.AGENT_EVENTS_CONSUME),
)
async def ack_agent_events(
    data: JSONBody[AckBody],
    bearer: NamedDependency[BearerToken],
    runs: NamedDependency[RunsService],
) -> None:
    """Acknowledge the feed through a seq."""
    await runs.ack(bearer, data.through_seq)


@put(
    "/agent/heartbeat",
    status_code=HTTP_204_NO_CONTENT,
    responses=problems("agents_only"),
    opt=agent_route(AuditAction.AGENT_HEARTBEAT),
)
async def heartbeat(
    data: JSONBody[HeartbeatBody],
    principal: NamedDependency[Principal],
    runs: NamedDependency[RunsService],
) -> None:
    """Store the capabilities the agent reports."""
    await runs.heartbeat(principal, given(data.capabilities.followups))


def runs_router() -> Router:
    """The runs and agent runtime routes, under ``/v1`` (`v1_router`).

    Returns:
        A new router (one per application).
    """
    return v1_router(
        "runs",
        [
            get_run,
            cancel_run,
            start_run,
            await_input,
            resume_run,
            finish_run,
            patch_run,
            poll_agent_events,
            ack_agent_events,
            heartbeat,
        ],
    )
