"""Dependencies of the HTTP handlers: one per application service, and the caller.

Each handler names the one service it calls (``conversation``, ``runs`` ...), never the
whole `Services` bag; `service_dependencies` provides them all from the bag once per
application.

Ids in paths are typed `uuid.UUID` in the handlers and parsed by Litestar with the rest
of the request, after these dependencies: the path templates declare them ``str``, so
that routing never refuses a malformed id before the bearer token is checked, and
`turnkeeper.adapters.http.decoding.decode_failure` answers one like an unknown id.

Litestar resolves the independent dependencies of a handler concurrently, in a task
group of their own (every ``/v1`` handler has two: the service and the token's
``identity``); `resolve_one_by_one` has them resolved one after the other instead. None
of them waits on anything but the principal's one read, which is alone in its batch
anyway, so the task group bought nothing and cost about 0.09 ms of CPU per request
(ADR 0025; docs/performance.md, "Adapter CPU per request").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from litestar import Request
from litestar.di import NamedDependency, Provide
from litestar.routes import BaseRoute, HTTPRoute

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


def resolve_one_by_one(routes: Iterable[BaseRoute]) -> None:
    """Have the dependencies of every HTTP handler resolved one after the other.

    Litestar orders a handler's dependencies in batches (a batch needs only the earlier
    ones) and resolves a batch of several in an anyio task group. Splitting every batch
    into batches of one keeps that order and drops the task group.

    Args:
        routes: the application's routes (``app.routes``), their handlers registered.
    """
    for route in routes:
        if not isinstance(route, HTTPRoute):
            continue
        for _handler, model in route.route_handler_map.values():
            model.dependency_batches = [
                {dependency}
                for batch in model.dependency_batches
                for dependency in sorted(batch, key=lambda d: d.key)
            ]


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
