"""Dependencies of the HTTP handlers: one per application service, and the caller.

Each handler names the one service it calls (``conversation``, ``runs`` ...), never the
whole `Services` bag; `service_dependencies` provides them all from the bag once per
application.

Ids in paths are typed `uuid.UUID` in the handlers and parsed by Litestar with the rest
of the request, after these dependencies: the path templates declare them ``str``, so
that routing never refuses a malformed id before the bearer token is checked, and
`turnkeeper.adapters.http.decoding.decode_failure` answers one like an unknown id.
"""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.di import NamedDependency, Provide

from turnkeeper.application.bootstrap import Services
from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.services.identity import IdentityService
from turnkeeper.domain.world import Principal

_BEARER = "bearer"


def _constant(value: object) -> Provide:
    def provide() -> object:
        return value

    return Provide(provide, use_cache=True, sync_to_thread=False)


def service_dependencies(services: Services) -> dict[str, Provide]:
    """The application-wide dependencies: each service under its own name.

    Args:
        services: the services (memory or PostgreSQL underneath).

    Returns:
        ``identity``, ``admin``, ``conversation``, ``runs``, ``agent_send``, ``live``,
        ``grants`` and ``tokens``.
    """
    return {
        "identity": _constant(services.identity),
        "admin": _constant(services.admin),
        "conversation": _constant(services.conversation),
        "runs": _constant(services.runs),
        "agent_send": _constant(services.agent_send),
        "live": _constant(services.live),
        "grants": _constant(services.grants),
        "tokens": _constant(services.tokens),
    }


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
    request: Request[Any, Any, Any], identity: NamedDependency[IdentityService]
) -> Principal:
    """The authenticated caller.

    Args:
        request: the request.
        identity: the token authentication.

    Returns:
        The principal owning the bearer token.

    Raises:
        Unauthenticated: for a missing, malformed or unknown token.
    """
    token = bearer_token(request)
    if token is None:
        raise Unauthenticated()
    return await identity.authenticate(token)
