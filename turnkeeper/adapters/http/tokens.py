"""Routes of API tokens (API.md, Administration): issue, list, revoke; the owner only.

A token's secret appears once, in the answer that issues it; listings show ids, labels
and times only. A revoked token is refused by every server process at once (no cache).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from litestar import Router, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT
from msgspec import UNSET, UnsetType

from turnkeeper.adapters.http.answers import Answer
from turnkeeper.adapters.http.dependencies import owner_route, v1_router
from turnkeeper.adapters.http.openapi_problems import problems
from turnkeeper.adapters.http.requests import OptionalBody, given
from turnkeeper.application.ports.audit import AuditAction
from turnkeeper.application.services.tokens import TokenService
from turnkeeper.domain.credentials import ApiToken
from turnkeeper.domain.world import Principal


class TokenCreate(OptionalBody, frozen=True):
    """Body of POST /v1/principals/{principal_id}/tokens."""

    label: str | UnsetType = UNSET


#: The body of a request without one (`OptionalBody`).
_NO_LABEL = TokenCreate()


class TokenIssued(Answer):
    """Answer of POST /v1/principals/{principal_id}/tokens: the secret, shown once."""

    id: uuid.UUID
    principal_id: uuid.UUID
    token: str
    created_at: datetime
    label: str | UnsetType = UNSET


class TokenInfo(Answer):
    """A token as listings show it (never its secret)."""

    id: uuid.UUID
    principal_id: uuid.UUID
    created_at: datetime
    label: str | UnsetType = UNSET
    last_used_at: datetime | UnsetType = UNSET


class TokenList(Answer):
    """Answer of GET /v1/principals/{principal_id}/tokens."""

    tokens: list[TokenInfo]


def _info(token: ApiToken) -> TokenInfo:
    return TokenInfo(
        id=token.id,
        principal_id=token.principal_id,
        created_at=token.created_at,
        label=token.label if token.label is not None else UNSET,
        last_used_at=token.last_used_at if token.last_used_at is not None else UNSET,
    )


@post(
    "/principals/{principal_id:str}/tokens",
    status_code=HTTP_201_CREATED,
    responses=problems("owner_required"),
    opt=owner_route(AuditAction.TOKEN_CREATE),
)
async def create_token(
    principal_id: FromPath[uuid.UUID],
    principal: NamedDependency[Principal],
    tokens: NamedDependency[TokenService],
    data: JSONBody[TokenCreate] = _NO_LABEL,
) -> TokenIssued:
    """Issue one more token for a principal; the answer shows it once."""
    issued = await tokens.issue_token(principal, principal_id, label=given(data.label))
    token = issued.token
    return TokenIssued(
        id=token.id,
        principal_id=token.principal_id,
        token=issued.secret,
        created_at=token.created_at,
        label=token.label if token.label is not None else UNSET,
    )


@get(
    "/principals/{principal_id:str}/tokens",
    responses=problems("owner_required"),
    opt=owner_route(AuditAction.TOKEN_LIST),
)
async def list_tokens(
    principal_id: FromPath[uuid.UUID],
    principal: NamedDependency[Principal],
    tokens: NamedDependency[TokenService],
) -> TokenList:
    """The live tokens of a principal: ids, labels, times; never a token."""
    found = await tokens.list_tokens(principal, principal_id)
    return TokenList(tokens=[_info(token) for token in found])


@delete(
    "/principals/{principal_id:str}/tokens/{token_id:str}",
    status_code=HTTP_204_NO_CONTENT,
    responses=problems("owner_required"),
    opt=owner_route(AuditAction.TOKEN_REVOKE),
)
async def revoke_token(
    principal_id: FromPath[uuid.UUID],
    token_id: FromPath[uuid.UUID],
    principal: NamedDependency[Principal],
    tokens: NamedDependency[TokenService],
) -> None:
    """Revoke a token: from now on every server process answers 401 for it."""
    await tokens.revoke_token(principal, principal_id, token_id)


def tokens_router() -> Router:
    """The token routes, under ``/v1`` (`v1_router`).

    Returns:
        A new router (one per application).
    """
    return v1_router("administration", [create_token, list_tokens, revoke_token])
