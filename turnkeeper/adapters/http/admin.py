"""Routes of the space owner (API.md, Administration): thin controllers.

Each handler gets its decoded body from Litestar (msgspec), calls the admin service and
answers the resource's struct; authorization is the service's concern.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from litestar import Response, Router, delete, get, post, put
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from turnkeeper.adapters.http.answers import (
    Agent,
    Channel,
    Grant,
    GrantList,
    PrincipalCreated,
    Space,
)
from turnkeeper.adapters.http.dependencies import owner_route, v1_router
from turnkeeper.adapters.http.openapi_problems import problems
from turnkeeper.adapters.http.requests import (
    AgentConfigUpdate,
    BehaviorUpdate,
    ChannelCreate,
    GrantCreate,
    OperatorUpdate,
    PrincipalCreate,
    SpaceCreate,
    given,
)
from turnkeeper.application.ports.audit import AuditAction
from turnkeeper.application.services.admin import AdminService
from turnkeeper.application.services.grants import GrantService
from turnkeeper.domain.world import (
    BillingMode,
    ChannelType,
    Level,
    OperatorMode,
    Principal,
    PrincipalKind,
    ResourceKind,
)

#: The bodies of requests without one (`OptionalBody`).
_NO_SWITCHES = BehaviorUpdate()
_NO_CONFIG = AgentConfigUpdate()


@post(
    "/principals",
    status_code=201,
    responses=problems("owner_required"),
    opt=owner_route(AuditAction.PRINCIPAL_CREATE),
)
async def create_principal(
    data: JSONBody[PrincipalCreate],
    principal: NamedDependency[Principal],
    admin: NamedDependency[AdminService],
) -> PrincipalCreated:
    """Create a person or agent; the answer shows its token once."""
    billing_mode = given(data.billing_mode)
    created = await admin.create_principal(
        principal,
        kind=PrincipalKind(data.kind),
        handle=data.handle,
        display_name=given(data.display_name) or "",
        billing_mode=BillingMode(billing_mode) if billing_mode else None,
        holder_id=given(data.holder_id),
        supports_followups=given(data.supports_followups),
    )
    return PrincipalCreated.created(created.principal, created.token)


@post(
    "/spaces",
    status_code=201,
    responses=problems("owner_required"),
    opt=owner_route(AuditAction.SPACE_CREATE),
)
async def create_space(
    data: JSONBody[SpaceCreate],
    principal: NamedDependency[Principal],
    admin: NamedDependency[AdminService],
) -> Space:
    """Create a space, optionally with a default operator agent."""
    space = await admin.create_space(
        principal, name=data.name, default_operator_id=given(data.default_operator_id)
    )
    return Space.of(space)


@post(
    "/spaces/{space_id:str}/channels",
    status_code=201,
    responses=problems("owner_required"),
    opt=owner_route(AuditAction.CHANNEL_CREATE),
)
async def create_channel(
    space_id: FromPath[uuid.UUID],
    data: JSONBody[ChannelCreate],
    principal: NamedDependency[Principal],
    admin: NamedDependency[AdminService],
) -> Channel:
    """Create a text channel (with its main thread) or a forum in a space."""
    mode = given(data.operator_mode)
    channel = await admin.create_channel(
        principal,
        space_id,
        name=data.name,
        type=ChannelType(data.type),
        operator_mode=OperatorMode(mode) if mode else OperatorMode.INHERIT,
        operator_id=given(data.operator_id),
    )
    return Channel.of(channel)


@put(
    "/channels/{channel_id:str}/behavior",
    responses=problems("owner_required"),
    opt=owner_route(AuditAction.CHANNEL_BEHAVIOR),
)
async def set_behavior(
    channel_id: FromPath[uuid.UUID],
    principal: NamedDependency[Principal],
    admin: NamedDependency[AdminService],
    data: JSONBody[BehaviorUpdate] = _NO_SWITCHES,
) -> Channel:
    """Change a channel's switches; absent switches stay as they are."""
    channel = await admin.set_behavior(
        principal,
        channel_id,
        free_response=given(data.free_response),
        allow_mentioned_agents=given(data.allow_mentioned_agents),
        thread_require_mention=given(data.thread_require_mention),
    )
    return Channel.of(channel)


@put(
    "/channels/{channel_id:str}/operator",
    responses=problems("owner_required"),
    opt=owner_route(AuditAction.CHANNEL_OPERATOR),
)
async def set_operator(
    channel_id: FromPath[uuid.UUID],
    data: JSONBody[OperatorUpdate],
    principal: NamedDependency[Principal],
    admin: NamedDependency[AdminService],
) -> Channel:
    """Change how a channel finds its operator agent."""
    channel = await admin.set_operator(
        principal,
        channel_id,
        mode=OperatorMode(data.mode),
        operator_id=given(data.operator_id),
    )
    return Channel.of(channel)


@post(
    "/channels/{channel_id:str}/archive",
    status_code=200,
    responses=problems("owner_required"),
    opt=owner_route(AuditAction.CHANNEL_ARCHIVE),
)
async def archive_channel(
    channel_id: FromPath[uuid.UUID],
    principal: NamedDependency[Principal],
    admin: NamedDependency[AdminService],
) -> Channel:
    """Make a channel read-only for everyone."""
    channel = await admin.archive_channel(principal, channel_id)
    return Channel.of(channel)


@post(
    "/grants",
    status_code=HTTP_201_CREATED,
    opt=owner_route(AuditAction.GRANT_CREATE),
    responses={
        **problems("owner_required"),
        HTTP_200_OK: ResponseSpec(
            data_container=Grant,
            description="the pair had a grant: its level is now the one asked for (same id)",
        ),
    },
)
async def create_grant(
    data: JSONBody[GrantCreate],
    principal: NamedDependency[Principal],
    grants: NamedDependency[GrantService],
) -> Response[Grant]:
    """Grant a level on a space or channel; for a pair that has a grant, change its level."""
    change = await grants.set_grant(
        principal,
        principal_id=data.principal_id,
        resource_kind=ResourceKind(data.resource_kind),
        resource_id=data.resource_id,
        level=Level.parse(data.level),
    )
    status = HTTP_201_CREATED if change.created else HTTP_200_OK
    return Response(Grant.of(change.grant), status_code=status)


@get("/grants", responses=problems("owner_required"), opt=owner_route(AuditAction.GRANT_LIST))
async def list_grants(
    principal: NamedDependency[Principal],
    grants: NamedDependency[GrantService],
    principal_id: Annotated[
        uuid.UUID | None, QueryParameter(description="only this principal's grants")
    ] = None,
    resource_id: Annotated[
        uuid.UUID | None, QueryParameter(description="only grants on this space or channel")
    ] = None,
) -> GrantList:
    """The grants, filtered by principal, resource, or both."""
    found = await grants.list_grants(principal, principal_id=principal_id, resource_id=resource_id)
    return GrantList(grants=[Grant.of(g) for g in found])


@delete(
    "/grants/{grant_id:str}",
    status_code=204,
    responses=problems("owner_required"),
    opt=owner_route(AuditAction.GRANT_DELETE),
)
async def delete_grant(
    grant_id: FromPath[uuid.UUID],
    principal: NamedDependency[Principal],
    admin: NamedDependency[AdminService],
) -> None:
    """Revoke a grant."""
    await admin.delete_grant(principal, grant_id)


@put(
    "/agents/{agent_id:str}/config",
    responses=problems("owner_required"),
    opt=owner_route(AuditAction.AGENT_CONFIG),
)
async def set_agent_config(
    agent_id: FromPath[uuid.UUID],
    principal: NamedDependency[Principal],
    admin: NamedDependency[AdminService],
    data: JSONBody[AgentConfigUpdate] = _NO_CONFIG,
) -> Agent:
    """Change an agent's owner configuration (follow-ups, enabled)."""
    agent = await admin.set_agent_config(
        principal,
        agent_id,
        supports_followups=given(data.supports_followups),
        enabled=given(data.enabled),
    )
    return Agent.of(agent)


def admin_router() -> Router:
    """The administration routes, under ``/v1`` (`v1_router`).

    Returns:
        A new router (one per application).
    """
    return v1_router(
        "administration",
        [
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
