"""Routes of the space owner (API.md, Administration): thin controllers.

Each handler gets its decoded body from Litestar (msgspec), calls one service and
encodes the document of the answer; authorization is the services' concern.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from litestar import Response, Router, delete, get, post, put
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from turnkeeper.adapters.http.dependencies import parse_id
from turnkeeper.adapters.http.openapi import problems
from turnkeeper.adapters.http.schemas import (
    Agent,
    AgentConfigUpdate,
    BehaviorUpdate,
    Channel,
    ChannelCreate,
    Grant,
    GrantCreate,
    GrantList,
    OperatorUpdate,
    PrincipalCreate,
    PrincipalCreated,
    Space,
    SpaceCreate,
    answer,
    given,
)
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.documents import (
    channel_document,
    grant_document,
    principal_document,
    space_document,
)
from turnkeeper.domain.world import (
    BillingMode,
    ChannelType,
    Level,
    OperatorMode,
    Principal,
    PrincipalKind,
    ResourceKind,
)


@post("/principals", status_code=201, responses=problems(403))
async def create_principal(
    data: JSONBody[PrincipalCreate],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> PrincipalCreated:
    """Create a person or agent; the answer shows its token once."""
    billing_mode = given(data.billing_mode)
    created = await services.admin.create_principal(
        principal,
        kind=PrincipalKind(data.kind),
        handle=data.handle,
        display_name=given(data.display_name) or "",
        billing_mode=BillingMode(billing_mode) if billing_mode else None,
        holder_id=given(data.holder_id),
        supports_followups=given(data.supports_followups),
    )
    document = {**principal_document(created.principal), "token": created.token}
    return answer(document, PrincipalCreated)


@post("/spaces", status_code=201, responses=problems(403))
async def create_space(
    data: JSONBody[SpaceCreate],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Space:
    """Create a space, optionally with a default operator agent."""
    space = await services.admin.create_space(
        principal, name=data.name, default_operator_id=given(data.default_operator_id)
    )
    return answer(space_document(space), Space)


@post("/spaces/{space_id:str}/channels", status_code=201, responses=problems(403))
async def create_channel(
    space_id: FromPath[str],
    data: JSONBody[ChannelCreate],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Channel:
    """Create a text channel (with its main thread) or a forum in a space."""
    mode = given(data.operator_mode)
    channel = await services.admin.create_channel(
        principal,
        parse_id(space_id),
        name=data.name,
        type=ChannelType(data.type),
        operator_mode=OperatorMode(mode) if mode else OperatorMode.INHERIT,
        operator_id=given(data.operator_id),
    )
    return answer(channel_document(channel), Channel)


@put("/channels/{channel_id:str}/behavior", responses=problems(403))
async def set_behavior(
    channel_id: FromPath[str],
    data: JSONBody[BehaviorUpdate],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Channel:
    """Change a channel's switches; absent switches stay as they are."""
    channel = await services.admin.set_behavior(
        principal,
        parse_id(channel_id),
        free_response=given(data.free_response),
        allow_mentioned_agents=given(data.allow_mentioned_agents),
        thread_require_mention=given(data.thread_require_mention),
    )
    return answer(channel_document(channel), Channel)


@put("/channels/{channel_id:str}/operator", responses=problems(403))
async def set_operator(
    channel_id: FromPath[str],
    data: JSONBody[OperatorUpdate],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Channel:
    """Change how a channel finds its operator agent."""
    channel = await services.admin.set_operator(
        principal,
        parse_id(channel_id),
        mode=OperatorMode(data.mode),
        operator_id=given(data.operator_id),
    )
    return answer(channel_document(channel), Channel)


@post("/channels/{channel_id:str}/archive", status_code=200, responses=problems(403))
async def archive_channel(
    channel_id: FromPath[str],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Channel:
    """Make a channel read-only for everyone."""
    channel = await services.admin.archive_channel(principal, parse_id(channel_id))
    return answer(channel_document(channel), Channel)


@post(
    "/grants",
    status_code=HTTP_201_CREATED,
    responses={
        **problems(403),
        HTTP_200_OK: ResponseSpec(
            data_container=Grant,
            description="the pair had a grant: its level is now the one asked for (same id)",
        ),
    },
)
async def create_grant(
    data: JSONBody[GrantCreate],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Response[Grant]:
    """Grant a level on a space or channel; for a pair that has a grant, change its level."""
    change = await services.grants.set_grant(
        principal,
        principal_id=data.principal_id,
        resource_kind=ResourceKind(data.resource_kind),
        resource_id=data.resource_id,
        level=Level.parse(data.level),
    )
    status = HTTP_201_CREATED if change.created else HTTP_200_OK
    return Response(answer(grant_document(change.grant), Grant), status_code=status)


@get("/grants", responses=problems(403))
async def list_grants(
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
    principal_id: Annotated[
        uuid.UUID | None, QueryParameter(description="only this principal's grants")
    ] = None,
    resource_id: Annotated[
        uuid.UUID | None, QueryParameter(description="only grants on this space or channel")
    ] = None,
) -> GrantList:
    """The grants, filtered by principal, resource, or both."""
    grants = await services.grants.list_grants(
        principal, principal_id=principal_id, resource_id=resource_id
    )
    return answer({"grants": [grant_document(g) for g in grants]}, GrantList)


@delete("/grants/{grant_id:str}", status_code=204, responses=problems(403))
async def delete_grant(
    grant_id: FromPath[str],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> None:
    """Revoke a grant."""
    await services.admin.delete_grant(principal, parse_id(grant_id))


@put("/agents/{agent_id:str}/config", responses=problems(403))
async def set_agent_config(
    agent_id: FromPath[str],
    data: JSONBody[AgentConfigUpdate],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Agent:
    """Change an agent's owner configuration (follow-ups, enabled)."""
    agent = await services.admin.set_agent_config(
        principal,
        parse_id(agent_id),
        supports_followups=given(data.supports_followups),
        enabled=given(data.enabled),
    )
    return answer(principal_document(agent), Agent)


def admin_router() -> Router:
    """The administration routes, to be mounted under ``/v1``.

    Returns:
        A new router (one per application).
    """
    return Router(
        path="/",
        tags=["administration"],
        route_handlers=[
            create_principal,
            create_space,
            create_channel,
            set_behavior,
            set_operator,
            archive_channel,
            create_grant,
            list_grants,
            delete_grant,
            set_agent_config,
        ],
    )
