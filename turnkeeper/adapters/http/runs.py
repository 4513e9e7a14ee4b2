"""Routes of runs and of the agent runtime (API.md, sections Runs and Agent runtime).

Thin controllers: decode, call the runs service, encode. Invocation tokens appear only in
the agent feed's answers, never in logs or problems.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated

from litestar import Response, Router, get, patch, post, put
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_204_NO_CONTENT

from turnkeeper.adapters.http.dependencies import parse_id
from turnkeeper.adapters.http.openapi import problems
from turnkeeper.adapters.http.schemas import (
    AckBody,
    AgentEventPage,
    AwaitInputBody,
    FinishBody,
    HeartbeatBody,
    InvocationTokenBody,
    Run,
    RunPatch,
    answer,
    given,
)
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.documents import Document, event_document
from turnkeeper.application.services.runs import Delivery, FollowupOp, RunView, run_document
from turnkeeper.domain.followups import FollowupState
from turnkeeper.domain.runs import RunState
from turnkeeper.domain.world import Principal


def _run(view: RunView) -> Response[Run]:
    return Response(
        answer(run_document(view), Run),
        status_code=HTTP_200_OK,
        headers={"ETag": f'"{view.run.version}"'},
    )


@get("/runs/{run_id:str}", responses=problems())
async def get_run(
    run_id: FromPath[str],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Response[Run]:
    """The run document (``ETag`` is its version)."""
    return _run(await services.runs.get(principal, parse_id(run_id)))


@post("/runs/{run_id:str}/cancel", status_code=HTTP_200_OK, responses=problems(403, 409))
async def cancel_run(
    run_id: FromPath[str],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Response[Run]:
    """A person with trigger on the thread stops the run."""
    return _run(await services.runs.cancel(principal, parse_id(run_id)))


@post("/runs/{run_id:str}/start", status_code=HTTP_200_OK, responses=problems(403, 409))
async def start_run(
    run_id: FromPath[str],
    data: JSONBody[InvocationTokenBody],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Response[Run]:
    """Queued -> running, with the token of the invocation's delivery."""
    return _run(await services.runs.start(principal, parse_id(run_id), data.invocation_token))


@post("/runs/{run_id:str}/await-input", status_code=HTTP_200_OK, responses=problems(403, 409))
async def await_input(
    run_id: FromPath[str],
    data: JSONBody[AwaitInputBody],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Response[Run]:
    """Running -> waiting_input (the question is shown by the agent, not stored)."""
    return _run(await services.runs.await_input(principal, parse_id(run_id)))


@post("/runs/{run_id:str}/resume", status_code=HTTP_200_OK, responses=problems(403, 409))
async def resume_run(
    run_id: FromPath[str],
    data: JSONBody[InvocationTokenBody],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Response[Run]:
    """waiting_input -> running, only with the token of the latest delivery."""
    return _run(await services.runs.resume(principal, parse_id(run_id), data.invocation_token))


@post("/runs/{run_id:str}/finish", status_code=HTTP_200_OK, responses=problems(403, 409))
async def finish_run(
    run_id: FromPath[str],
    data: JSONBody[FinishBody],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Response[Run]:
    """End the run (a repeated identical finish is a no-op)."""
    view = await services.runs.finish(
        principal, parse_id(run_id), RunState(data.state), given(data.reason)
    )
    return _run(view)


_FOLLOWUP_PATH = re.compile(r"^/followups/(?P<message_id>[^/]+)/state$")


def _followup_target(path: str) -> uuid.UUID | None:
    """The message id a patch path names, or None for a path that names no follow-up."""
    match = _FOLLOWUP_PATH.match(path)
    if match is None:
        return None
    try:
        return uuid.UUID(match["message_id"])
    except ValueError:
        return None


@patch("/runs/{run_id:str}", status_code=HTTP_200_OK, responses=problems(403, 409))
async def patch_run(
    run_id: FromPath[str],
    data: JSONBody[RunPatch],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Response[Run]:
    """Acknowledge follow-ups (delivered, absorbed): forward only, all or nothing."""
    ops = [
        FollowupOp(message_id=_followup_target(op.path), value=FollowupState(op.value))
        for op in data.ops
    ]
    view = await services.runs.patch(principal, parse_id(run_id), data.base_version, ops)
    return _run(view)


def delivery_document(delivery: Delivery) -> Document:
    """The AgentEvent document of one delivery (the page's and the stream's)."""
    document = event_document(delivery.event)
    if delivery.invocation_token is not None:
        document["invocation_token"] = delivery.invocation_token
    if delivery.redelivered:
        document["redelivered"] = True
    return document


@get("/agent/events", responses=problems(403))
async def poll_agent_events(
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
    after: Annotated[
        int | None, QueryParameter(description="cursor; the acknowledged position if absent")
    ] = None,
    limit: Annotated[int | None, QueryParameter(description="page size, page.max_limit")] = None,
    wait: Annotated[
        float | None,
        QueryParameter(
            description="long-poll: seconds to wait for one event, stream.max_wait_seconds"
        ),
    ] = None,
) -> AgentEventPage:
    """The agent's personal events, with a fresh invocation token per delivery."""
    page = await services.live.wait_agent_events(principal, after=after, limit=limit, wait=wait)
    events = [delivery_document(delivery) for delivery in page.deliveries]
    return answer({"events": events, "next_after": page.next_after}, AgentEventPage)


@post("/agent/events/ack", status_code=HTTP_204_NO_CONTENT, responses=problems(403))
async def ack_agent_events(
    data: JSONBody[AckBody],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> None:
    """Acknowledge the feed through a seq."""
    await services.runs.ack(principal, data.through_seq)


@put("/agent/heartbeat", status_code=HTTP_204_NO_CONTENT, responses=problems(403))
async def heartbeat(
    data: JSONBody[HeartbeatBody],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> None:
    """Store the capabilities the agent reports."""
    await services.runs.heartbeat(principal, given(data.capabilities.followups))


def runs_router() -> Router:
    """The runs and agent runtime routes, to be mounted under ``/v1``.

    Returns:
        A new router (one per application).
    """
    return Router(
        path="/",
        tags=["runs"],
        route_handlers=[
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
