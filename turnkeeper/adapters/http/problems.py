"""The one mapping from turnkeeper's errors to ``application/problem+json`` answers.

Domain and application errors carry a stable ``code``; `STATUS_BY_CODE` gives its HTTP
status. Litestar's own exceptions (unknown route, wrong method, body too large, a request
that does not decode, read by `turnkeeper.adapters.http.decoding`) are mapped here too,
so every error a client sees has one shape:
``{type, title, status, code, reason?, errors?, correlation_id}``. A ``not_found`` never
carries a reason, so that an id the caller may not read answers exactly like an id that
does not exist.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import attrs
import msgspec
from litestar import Request, Response
from litestar.exceptions import (
    HTTPException,
    MethodNotAllowedException,
    NotFoundException,
    ValidationException,
)
from litestar.status_codes import (
    HTTP_400_BAD_REQUEST,
    HTTP_401_UNAUTHORIZED,
    HTTP_403_FORBIDDEN,
    HTTP_404_NOT_FOUND,
    HTTP_405_METHOD_NOT_ALLOWED,
    HTTP_408_REQUEST_TIMEOUT,
    HTTP_409_CONFLICT,
    HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    HTTP_415_UNSUPPORTED_MEDIA_TYPE,
    HTTP_429_TOO_MANY_REQUESTS,
    HTTP_431_REQUEST_HEADER_FIELDS_TOO_LARGE,
    HTTP_500_INTERNAL_SERVER_ERROR,
    HTTP_503_SERVICE_UNAVAILABLE,
)
from litestar.types import Message, Scope, Send

from turnkeeper.adapters.http.answers import FieldErrorOut, Problem
from turnkeeper.adapters.http.correlation import allowed_methods, correlation_id_of
from turnkeeper.adapters.http.decoding import (
    decode_failure,
    defaulted_parameters,
    malformed_body,
)
from turnkeeper.adapters.http.dependencies import bearer_failure
from turnkeeper.adapters.logging import exception_outline
from turnkeeper.application.errors import StoreUnavailable
from turnkeeper.application.logs import get_logger
from turnkeeper.domain.errors import DomainError, RateLimited, ValidationFailed

#: Media type of every error answer.
PROBLEM_MEDIA_TYPE = "application/problem+json"

#: Problem code -> HTTP status. The codes are those of API.md; ``method_not_allowed``,
#: ``request_timeout``, ``headers_too_large``, ``unsupported_media_type`` and
#: ``unavailable`` cover the answers of the framework, of the server to a body too slow
#: or headers too long, of a body that is no JSON and of /readyz that the contract's
#: list does not name.
STATUS_BY_CODE: dict[str, int] = {
    "validation_failed": HTTP_400_BAD_REQUEST,
    "unauthenticated": HTTP_401_UNAUTHORIZED,
    "forbidden": HTTP_403_FORBIDDEN,
    "channel_read_only": HTTP_403_FORBIDDEN,
    "invocation_token_invalid": HTTP_403_FORBIDDEN,
    "not_found": HTTP_404_NOT_FOUND,
    "method_not_allowed": HTTP_405_METHOD_NOT_ALLOWED,
    "request_timeout": HTTP_408_REQUEST_TIMEOUT,
    "conflict": HTTP_409_CONFLICT,
    "idempotency_conflict": HTTP_409_CONFLICT,
    "invalid_state_transition": HTTP_409_CONFLICT,
    "base_version_conflict": HTTP_409_CONFLICT,
    "payload_too_large": HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    "headers_too_large": HTTP_431_REQUEST_HEADER_FIELDS_TOO_LARGE,
    "unsupported_media_type": HTTP_415_UNSUPPORTED_MEDIA_TYPE,
    "rate_limited": HTTP_429_TOO_MANY_REQUESTS,
    "internal": HTTP_500_INTERNAL_SERVER_ERROR,
    "unavailable": HTTP_503_SERVICE_UNAVAILABLE,
}

_TITLES: dict[str, str] = {
    "validation_failed": "The request is not valid",
    "unauthenticated": "Authentication required",
    "forbidden": "Forbidden",
    "channel_read_only": "The channel is read-only",
    "invocation_token_invalid": "The invocation token is not valid",
    "not_found": "Not found",
    "method_not_allowed": "Method not allowed",
    "request_timeout": "The request body did not arrive in time",
    "conflict": "Conflict",
    "idempotency_conflict": "The client id was used with another payload",
    "invalid_state_transition": "Invalid state transition",
    "base_version_conflict": "The base version is not current",
    "payload_too_large": "Payload too large",
    "headers_too_large": "The request headers are too large",
    "unsupported_media_type": "Unsupported media type: the body must be JSON",
    "rate_limited": "Too many requests",
    "internal": "Internal error",
    "unavailable": "Service unavailable",
}

#: ``Retry-After`` of a 503 whose cause named no time: the shortest wait that is one.
MIN_RETRY_AFTER_SECONDS = 1

#: Only these statuses show a ``reason``: a 403 or 409 names why (API.md conventions).
_REASON_STATUSES = frozenset({HTTP_403_FORBIDDEN, HTTP_409_CONFLICT, HTTP_503_SERVICE_UNAVAILABLE})

_log = get_logger("turnkeeper.http")


class ClientGone(Exception):
    """The client left before its request's body arrived.

    For example cut off after ``http.body_timeout``: nobody reads the answer, and it is
    no server error. Answered (and logged) ``408 request_timeout``, or ``400
    validation_failed`` (``malformed_request``) when the server ended the request
    because its body could not be read.

    Args:
        unreadable: the body could not be read
            (`turnkeeper.adapters.http.correlation.UNREADABLE_BODY`).
    """

    def __init__(self, *, unreadable: bool = False) -> None:
        super().__init__("unreadable body" if unreadable else "client gone")
        self.unreadable = unreadable


class NotReady(Exception):
    """The process cannot serve yet (answered 503 ``unavailable`` with ``Retry-After``).

    Args:
        reason: why, for example ``database_unreachable``.
        retry_after: seconds after which asking again may succeed.
    """

    def __init__(self, reason: str, *, retry_after: int = MIN_RETRY_AFTER_SECONDS) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


@attrs.frozen(kw_only=True)
class ProblemAnswer:
    """A problem before the correlation id is known.

    Attributes:
        code: the problem code.
        status: the HTTP status.
        reason: the finer reason (shown for 403, 409 and 503 only).
        errors: offending members (400).
        current: the current resource of a base_version_conflict.
        headers: extra headers (Retry-After, Allow, WWW-Authenticate).
    """

    code: str
    status: int
    reason: str | None = None
    errors: tuple[FieldErrorOut, ...] = ()
    current: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)


#: The problem of a request the HTTP parser could not read.
MALFORMED_REQUEST = ProblemAnswer(
    code="validation_failed",
    status=HTTP_400_BAD_REQUEST,
    errors=(FieldErrorOut(pointer="", code="malformed_request"),),
)


def not_found_as_problem(scope: Scope, send: Send) -> Send:
    """`send` with a 404 answered as the ``not_found`` problem, whatever its own shape.

    Litestar's documentation router answers an unknown page below its path with an HTML
    page of its own; API.md wants every error as problem+json, and a 404 identical to
    that of any unknown path.

    Args:
        scope: the exchange's ASGI scope (for its correlation id).
        send: the ASGI send callable.

    Returns:
        The send to give the application.
    """
    replaced = False

    async def send_problem(message: Message) -> None:
        nonlocal replaced
        if message["type"] == "http.response.start" and message["status"] == HTTP_404_NOT_FOUND:
            replaced = True
            answer = problem_of(
                ProblemAnswer(code="not_found", status=HTTP_404_NOT_FOUND), correlation_id_of(scope)
            )
            body = msgspec.json.encode(answer)
            await send(
                {
                    "type": "http.response.start",
                    "status": HTTP_404_NOT_FOUND,
                    "headers": [
                        (b"content-type", PROBLEM_MEDIA_TYPE.encode("latin-1")),
                        (b"content-length", str(len(body)).encode("latin-1")),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body, "more_body": False})
        elif not replaced:
            await send(message)

    return send_problem


def status_for(code: str) -> int:
    """The HTTP status of a problem code.

    Args:
        code: a problem code; unknown codes are internal errors.

    Returns:
        The status.
    """
    return STATUS_BY_CODE.get(code, HTTP_500_INTERNAL_SERVER_ERROR)


def problem_for(exc: BaseException, defaulted: Collection[str] = frozenset()) -> ProblemAnswer:
    """Map any exception to the problem a client sees.

    Args:
        exc: a turnkeeper error, a Litestar HTTP exception, or anything else (internal).
        defaulted: the route's parameters with a default
            (`turnkeeper.adapters.http.decoding.defaulted_parameters`), for a decoding
            error.

    Returns:
        The problem; nothing from an unexpected exception (message, stack, token,
        content) reaches the client.
    """
    if isinstance(exc, DomainError):
        return _domain_problem(exc)
    if isinstance(exc, NotReady):
        return ProblemAnswer(
            code="unavailable",
            status=HTTP_503_SERVICE_UNAVAILABLE,
            reason=exc.reason,
            headers={"Retry-After": str(exc.retry_after)},
        )
    if isinstance(exc, ValidationException):
        return _domain_problem(decode_failure(exc, defaulted))
    if isinstance(exc, ClientGone):
        if exc.unreadable:
            return MALFORMED_REQUEST
        return ProblemAnswer(code="request_timeout", status=HTTP_408_REQUEST_TIMEOUT)
    if isinstance(exc, NotFoundException):
        return ProblemAnswer(code="not_found", status=HTTP_404_NOT_FOUND)
    if isinstance(exc, MethodNotAllowedException):
        headers = {
            name: allowed_methods(m.strip() for m in value.split(","))
            if name.lower() == "allow"
            else value
            for name, value in (exc.headers or {}).items()
        }
        return ProblemAnswer(
            code="method_not_allowed",
            status=HTTP_405_METHOD_NOT_ALLOWED,
            headers=headers,
        )
    if isinstance(exc, HTTPException):
        return _framework_problem(exc)
    return ProblemAnswer(code="internal", status=HTTP_500_INTERNAL_SERVER_ERROR)


def _domain_problem(exc: DomainError) -> ProblemAnswer:
    status = status_for(exc.code)
    code = exc.code if exc.code in STATUS_BY_CODE else "internal"
    headers: dict[str, str] = {}
    if isinstance(exc, RateLimited):
        headers["Retry-After"] = str(exc.retry_after)
    if isinstance(exc, StoreUnavailable):
        wait = MIN_RETRY_AFTER_SECONDS if exc.retry_after is None else exc.retry_after
        headers["Retry-After"] = str(wait)
    if code == "unauthenticated":
        headers["WWW-Authenticate"] = "Bearer"
    errors: tuple[FieldErrorOut, ...] = ()
    if isinstance(exc, ValidationFailed):
        errors = tuple(FieldErrorOut(pointer=e.pointer, code=e.code) for e in exc.errors)
    current = getattr(exc, "current", None)
    return ProblemAnswer(
        code=code,
        status=status,
        reason=exc.reason if status in _REASON_STATUSES else None,
        errors=errors,
        current=current if isinstance(current, Mapping) else None,
        headers=headers,
    )


def _framework_problem(exc: HTTPException) -> ProblemAnswer:
    status = exc.status_code
    if status == HTTP_413_REQUEST_ENTITY_TOO_LARGE:
        return ProblemAnswer(code="payload_too_large", status=status)
    if status == HTTP_400_BAD_REQUEST:
        # Litestar raises a plain 400 when the body is not JSON at all.
        return _domain_problem(malformed_body())
    if status == HTTP_401_UNAUTHORIZED:
        return ProblemAnswer(
            code="unauthenticated", status=status, headers={"WWW-Authenticate": "Bearer"}
        )
    if status < HTTP_500_INTERNAL_SERVER_ERROR and status in STATUS_BY_CODE.values():
        code = next(c for c, s in STATUS_BY_CODE.items() if s == status)
        return ProblemAnswer(code=code, status=status)
    return ProblemAnswer(code="internal", status=HTTP_500_INTERNAL_SERVER_ERROR)


def problem_of(answer: ProblemAnswer, correlation_id: str) -> Problem:
    """The body of a problem answer.

    Args:
        answer: the mapped problem.
        correlation_id: the id of the request.

    Returns:
        The ``application/problem+json`` document (also what the OpenAPI examples show).
    """
    return Problem(
        type=f"urn:turnkeeper:problem:{answer.code}",
        title=_TITLES.get(answer.code, _TITLES["internal"]),
        status=answer.status,
        code=answer.code,
        correlation_id=correlation_id,
        reason=answer.reason or msgspec.UNSET,
        errors=list(answer.errors) or msgspec.UNSET,
        current=dict(answer.current) if answer.current is not None else msgspec.UNSET,
    )


def problem_response(answer: ProblemAnswer, correlation_id: str) -> Response[bytes]:
    """Render a problem.

    Args:
        answer: the mapped problem.
        correlation_id: the id of the request, also in ``X-Correlation-Id``.

    Returns:
        The ``application/problem+json`` response.
    """
    return Response(
        content=msgspec.json.encode(problem_of(answer, correlation_id)),
        status_code=answer.status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=dict(answer.headers),
    )


def handle_exception(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    """Litestar exception handler for every exception.

    Only unexpected errors are logged with their stack (which never reaches the client),
    as its outline: the classes and frames, never a message, which may quote data (a
    database error quotes the failing row); a 503 ``unavailable`` is one warning line.

    Args:
        request: the failed request.
        exc: what was raised.

    Returns:
        The problem answer.
    """
    # A bearer route's unknown token answers 401 before its decoding error does.
    exc = bearer_failure(request.scope) or exc
    defaulted = defaulted_parameters(request.scope) if isinstance(exc, ValidationException) else ()
    answer = problem_for(exc, defaulted)
    if answer.code == "unavailable":
        # Expected while the database is down: one line each, no stack.
        _log.warning("unavailable", error_type=type(exc).__name__)
    elif answer.status >= HTTP_500_INTERNAL_SERVER_ERROR:
        # The outline itself rather than the exception: a logger configured by the host
        # program (no structlog set-up) would write the exception's text.
        _log.error(
            "unhandled_error", error_type=type(exc).__name__, exception=exception_outline(exc)
        )
    return problem_response(answer, correlation_id_of(request.scope))
