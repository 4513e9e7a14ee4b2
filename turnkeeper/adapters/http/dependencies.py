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
first round trip of their unit (ADR 0026). A request of any authenticated route that is
refused for its input before its caller is known (a hostile body refused by the body
guard, a body of another media type, malformed JSON, a member that does not decode, a
body rule checked before the unit) gets its token resolved by `refuse_unknown_bearer`
then, so that a missing or unknown token always answers 401 before any 400 or 415.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, cast

import attrs
from litestar import Request, Router
from litestar.datastructures import Headers
from litestar.di import NamedDependency, Provide
from litestar.exceptions import HTTPException, ValidationException
from litestar.routes import BaseRoute, HTTPRoute
from litestar.types import ControllerRouterHandler, Scope

from turnkeeper.application.bootstrap import Services
from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.ports.audit import AuditAction
from turnkeeper.application.services.access import require_owner
from turnkeeper.application.services.identity import BearerToken, IdentityService
from turnkeeper.application.services.runs.guards import refuse_non_agent
from turnkeeper.domain.errors import ValidationFailed
from turnkeeper.domain.world import Principal

_BEARER = "bearer"
#: Scope state: the unresolved token of a ``bearer`` route, then what resolving it raised.
_UNRESOLVED_KEY = "turnkeeper.bearer"
#: Set once an exchange's use case is called (`mark_reached`).
_REACHED_KEY = "turnkeeper.reached"
_REFUSED_KEY = "turnkeeper.bearer_refused"
#: Scope state: the caller of a ``principal`` route, once authenticated.
_AUTHENTICATED_KEY = "turnkeeper.authenticated"
#: The handler parameters that make a route an authenticated one.
_CALLER_PARAMETERS = ("principal", "bearer")
#: Statuses of the framework's refusals of a request's input (malformed JSON, a body of
#: another media type), answered only once the caller is known.
_INPUT_REFUSALS = frozenset({400, 415})
#: The ``opt`` key of a route for one kind of caller: its `CallerRule`, which
#: `refuse_unknown_bearer` checks before the route's input is refused.
CALLER_RULE = "turnkeeper.caller_rule"


@attrs.frozen
class CallerRule:
    """Who may call a route at all, checked before its input (`owner_route`, `agent_route`).

    Attributes:
        owner: the owner only (else agents only).
        action: the audited action of a refusal.
    """

    owner: bool
    action: AuditAction


#: Refuses a caller a `CallerRule` does not admit (403, audited); None for one it admits.
CallerCheck = Callable[[Principal, CallerRule], Awaitable[None]]


def owner_route(action: AuditAction) -> dict[str, Any]:
    """The ``opt`` of an administrative route: a non-owner is refused before its input.

    Args:
        action: the audited action of the route (``grant.create``).

    Returns:
        The route's ``opt`` mapping.
    """
    return {CALLER_RULE: CallerRule(owner=True, action=action)}


def caller_check(services: Services) -> CallerCheck:
    """The check of `CallerRule`: the use cases' own owner and agent refusals, audited alike.

    Args:
        services: the services (their transactor records the denial).

    Returns:
        A check that raises `AccessDenied` (``owner_required`` or ``agents_only``, the
        denial recorded) for a caller the rule does not admit.
    """

    async def check(caller: Principal, rule: CallerRule) -> None:
        if rule.owner:
            await require_owner(services.tx, caller, rule.action)
        else:
            await refuse_non_agent(services.tx, caller, rule.action)

    return check


def agent_route(action: AuditAction) -> dict[str, Any]:
    """The ``opt`` of a route of the agent runtime: anyone else is refused before its input.

    Args:
        action: the audited action of the route (``agent.send``).

    Returns:
        The route's ``opt`` mapping.
    """
    return {CALLER_RULE: CallerRule(owner=False, action=action)}


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
    return scope_token(request.scope)


def scope_token(scope: Scope) -> str | None:
    """The token of an exchange's ``Authorization: Bearer <token>`` header.

    Args:
        scope: the exchange's ASGI scope (its headers are parsed once per exchange).

    Returns:
        The token, or None when the header is missing, of another scheme, or given more
        than once (RFC 9110, section 5.3: which of two the client meant cannot be known).
    """
    headers = Headers.from_scope(scope).getall("authorization", [])
    return token_of_header(headers[0]) if len(headers) == 1 and headers[0] else None


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
    principal = await identity.authenticate(token)
    _state(request.scope)[_AUTHENTICATED_KEY] = principal
    return principal


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


#: The path of the contract's routes (API.md).
V1_PATH = "/v1"
#: Name of the bearer security scheme in the OpenAPI document.
BEARER_SCHEME = "bearer"


def v1_router(tag: str, route_handlers: Sequence[ControllerRouterHandler]) -> Router:
    """A group of the contract's routes under ``/v1``, mounted on the application itself.

    Each group carries the ``principal`` and ``bearer`` dependencies and the bearer
    security scheme. Litestar copies a router deeply each time it is registered; a
    ``/v1`` router holding the groups copied every handler twice for each application
    (ADR 0039).

    Args:
        tag: the OpenAPI tag of the group's operations.
        route_handlers: the group's handlers.

    Returns:
        A new router (one per application).
    """
    return Router(
        path=V1_PATH,
        tags=[tag],
        route_handlers=route_handlers,
        dependencies={
            "principal": Provide(provide_principal),
            "bearer": Provide(provide_bearer, sync_to_thread=False),
        },
        security=[{BEARER_SCHEME: []}],
    )


def mark_unresolved(scope: Scope, bearer: BearerToken) -> None:
    """Note the unresolved token of a ``bearer`` route's exchange (for `refuse_unknown_bearer`).

    Args:
        scope: the exchange's ASGI scope.
        bearer: the token, as the route passes it to its use case.
    """
    _state(scope)[_UNRESOLVED_KEY] = bearer


def mark_reached(scope: Scope) -> None:
    """Note that an exchange's input decoded and its use case was called.

    What the use case refuses, it records itself (an agent's refused send, for one);
    `reached` tells a hook of the refusals before it apart.

    Args:
        scope: the exchange's ASGI scope.
    """
    _state(scope)[_REACHED_KEY] = True


def reached(scope: Scope) -> bool:
    """Whether `mark_reached` was called for the exchange.

    Args:
        scope: the exchange's ASGI scope.

    Returns:
        True once the exchange's use case was called.
    """
    return bool(_state(scope).get(_REACHED_KEY))


def _state(scope: Scope) -> dict[str, Any]:
    state: dict[str, Any] = cast("dict[str, Any]", scope).setdefault("state", {})
    return state


#: Told of a request refused for its input whose caller the route admits (see
#: `refuse_unknown_bearer`): the caller, the error and the exchange's scope.
RefusedInput = Callable[[Principal, Exception, Scope], None]


def refuse_unknown_bearer(
    identity: IdentityService,
    check_caller: CallerCheck | None = None,
    refused_input: RefusedInput | None = None,
) -> Callable[[Exception, Scope], Awaitable[None]]:
    """The ``after_exception`` hook that keeps 401 before 400 and 415 on every route.

    On a route for one kind of caller (`owner_route`, `agent_route`) it keeps that 403
    (``owner_required``, ``agents_only``) before them too: a caller the route never
    admits learns nothing of how it reads its input.

    Args:
        identity: the token authentication.
        check_caller: the check of a route's `CallerRule` (None: not made here).
        refused_input: told of a refusal whose caller is authenticated and admitted by
            the route (None: nobody).

    Returns:
        The hook: when a request of an authenticated route (one whose handler takes
        ``principal`` or ``bearer``) was refused for its input before its caller was
        known, it resolves the token (as `provide_principal` would have first) and keeps
        what that raised for `bearer_failure`: `Unauthenticated` for a missing,
        malformed or unknown token, the store's error without a store.
    """

    async def hook(exc: Exception, scope: Scope) -> None:
        if not _refuses_input(exc):
            return
        state = _state(scope)
        try:
            caller = await _caller(identity, scope)
            rule = _caller_rule(scope)
            if rule is not None and check_caller is not None:
                await check_caller(caller, rule)
        except _NoCaller:
            return
        # What authenticating (and the caller's rule) first would have answered: 401, 403
        # owner_required or agents_only, or 503 without a store.
        except Exception as failure:
            state[_REFUSED_KEY] = failure
            return
        if refused_input is not None:
            refused_input(caller, exc, scope)

    return hook


async def _caller(identity: IdentityService, scope: Scope) -> Principal:
    """The caller of a refused exchange: as authenticated already, or authenticated now.

    Returns:
        The principal the token belongs to.

    Raises:
        Unauthenticated: for a missing, malformed or unknown token.
        _NoCaller: for a route without a caller.
    """
    state = _state(scope)
    known = state.get(_AUTHENTICATED_KEY)
    if isinstance(known, Principal):
        return known
    bearer = state.get(_UNRESOLVED_KEY)
    if isinstance(bearer, BearerToken):
        return await identity.authenticate_bearer(bearer)
    if not _takes_a_caller(scope):
        raise _NoCaller
    token = scope_token(scope)
    if token is None:
        raise Unauthenticated()
    return await identity.authenticate(token)


class _NoCaller(Exception):
    """The route has no caller to check (its input refusal stands)."""


def _caller_rule(scope: Scope) -> CallerRule | None:
    handler = scope.get("route_handler")
    rule = handler.opt.get(CALLER_RULE) if handler is not None else None
    return rule if isinstance(rule, CallerRule) else None


def _refuses_input(exc: Exception) -> bool:
    """Whether an error refuses the request's input (and so may precede authentication)."""
    if isinstance(exc, ValidationException | ValidationFailed):
        return True
    return isinstance(exc, HTTPException) and exc.status_code in _INPUT_REFUSALS


def _takes_a_caller(scope: Scope) -> bool:
    handler = scope.get("route_handler")
    if handler is None:
        return False
    parameters = handler.parsed_fn_signature.parameters
    return any(name in parameters for name in _CALLER_PARAMETERS)


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
