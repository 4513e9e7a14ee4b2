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

The hot routes, ``POST /v1/threads/{thread_id}/messages`` and ``POST /v1/agent/send``,
take the token unresolved (``bearer``, no read) and their use cases resolve it in the
first round trip of their unit (ADR 0026). A request of such a route that Litestar
cannot decode fails before the use case runs; `refuse_unknown_bearer` then resolves the
token, so that an unknown token still answers 401 before any 400, as on every other
route.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, cast

from litestar import Request
from litestar.di import NamedDependency, Provide
from litestar.exceptions import ValidationException
from litestar.routes import BaseRoute, HTTPRoute
from litestar.types import Scope

from turnkeeper.application.bootstrap import Services
from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.services.identity import BearerToken, IdentityService
from turnkeeper.domain.world import Principal

_BEARER = "bearer"
#: Scope state: the unresolved token of a ``bearer`` route, then what resolving it raised.
_UNRESOLVED_KEY = "turnkeeper.bearer"
_REFUSED_KEY = "turnkeeper.bearer_refused"


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
    return token_of_header(header) if header else None


def token_of_header(header: str) -> str | None:
    """The token of an ``Authorization`` header's value.

    Args:
        header: the value (``Bearer <token>``).

    Returns:
        The token, or None when the value names another scheme or no token.
    """
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


def provide_bearer(request: Request[Any, Any, Any]) -> BearerToken:
    """The caller's token, unresolved: the use case resolves it in its unit (ADR 0026).

    Args:
        request: the request.

    Returns:
        The token's digest.

    Raises:
        Unauthenticated: for a missing or malformed ``Authorization`` header.
    """
    token = bearer_token(request)
    if token is None:
        raise Unauthenticated()
    bearer = BearerToken.of(token)
    mark_unresolved(request.scope, bearer)
    return bearer


def mark_unresolved(scope: Scope, bearer: BearerToken) -> None:
    """Note the unresolved token of a ``bearer`` route's exchange (for `refuse_unknown_bearer`).

    Args:
        scope: the exchange's ASGI scope.
        bearer: the token, as the route passes it to its use case.
    """
    _state(scope)[_UNRESOLVED_KEY] = bearer


def _state(scope: Scope) -> dict[str, Any]:
    state: dict[str, Any] = cast("dict[str, Any]", scope).setdefault("state", {})
    return state


def refuse_unknown_bearer(
    identity: IdentityService,
) -> Callable[[Exception, Scope], Awaitable[None]]:
    """The ``after_exception`` hook that keeps 401 before 400 on ``bearer`` routes.

    Args:
        identity: the token authentication.

    Returns:
        The hook: when a request of a ``bearer`` route failed to decode, it resolves the
        token (as `provide_principal` would have before the decoding) and keeps what
        that raised for `bearer_failure`.
    """

    async def hook(exc: Exception, scope: Scope) -> None:
        state = _state(scope)
        bearer = state.get(_UNRESOLVED_KEY)
        if not isinstance(exc, ValidationException) or not isinstance(bearer, BearerToken):
            return
        try:
            await identity.authenticate_bearer(bearer)
        # What authenticating first would have answered: 401, or 503 without a store.
        except Exception as failure:
            state[_REFUSED_KEY] = failure

    return hook


def bearer_failure(scope: Scope) -> Exception | None:
    """What `refuse_unknown_bearer` found for the token of a failed exchange.

    Args:
        scope: the exchange's ASGI scope.

    Returns:
        The error to answer instead of the decoding error (`Unauthenticated`, or the
        store's), or None when the token was resolved or never looked at.
    """
    found = _state(scope).get(_REFUSED_KEY)
    return found if isinstance(found, Exception) else None
