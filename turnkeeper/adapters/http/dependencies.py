"""Dependencies of the HTTP handlers: the services and the authenticated caller."""

from __future__ import annotations

import uuid
from typing import Any

from litestar import Request
from litestar.di import NamedDependency

from turnkeeper.application.bootstrap import Services
from turnkeeper.application.errors import Unauthenticated
from turnkeeper.domain.errors import NotFound
from turnkeeper.domain.world import Principal

_BEARER = "bearer"


def bearer_token(request: Request[Any, Any, Any]) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header.

    Args:
        request: the request.

    Returns:
        The token, or None when the header is missing or of another scheme.
    """
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != _BEARER or not token.strip():
        return None
    return token.strip()


async def provide_principal(
    request: Request[Any, Any, Any], services: NamedDependency[Services]
) -> Principal:
    """The authenticated caller.

    Args:
        request: the request.
        services: the application services.

    Returns:
        The principal owning the bearer token.

    Raises:
        Unauthenticated: for a missing, malformed or unknown token.
    """
    token = bearer_token(request)
    if token is None:
        raise Unauthenticated()
    return await services.identity.authenticate(token)


def parse_id(raw: str) -> uuid.UUID:
    """An id from a path segment.

    A malformed id answers like an unknown one: there is nothing behind it either.

    Args:
        raw: the path segment.

    Returns:
        The UUID.

    Raises:
        NotFound: when the segment is not a UUID.
    """
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise NotFound() from None
