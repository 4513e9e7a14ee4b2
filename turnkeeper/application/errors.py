"""Errors of the application layer (on top of `turnkeeper.domain.errors`).

Adapters translate their own failures into these at their edge, so services never see
a driver exception.
"""

from __future__ import annotations

from turnkeeper.domain.errors import DomainError


class ApplicationError(DomainError):
    """Base of errors raised by services and ports (same code/reason contract)."""


class Unauthenticated(ApplicationError):
    """No token, or a token that belongs to nobody."""

    code = "unauthenticated"


class RetriableConflict(ApplicationError):
    """A deadlock, serialization failure or unique-key race: rerun the whole unit."""

    code = "internal"


class DuplicateKey(ApplicationError):
    """A unique constraint refused a row that is not an idempotency race.

    Args:
        constraint: the name of the violated constraint.
    """

    code = "conflict"

    def __init__(self, constraint: str) -> None:
        super().__init__(constraint, reason="duplicate")
        self.constraint = constraint


class StoreUnavailable(ApplicationError):
    """The database cannot be reached, or did not answer within ``database.request_timeout``.

    Answered 503 ``unavailable`` with ``Retry-After``; the outcome of a unit that was
    committing is unknown (a retry with the same client id settles it).

    Args:
        detail: what failed (for logs only, never shown to a client).
        retry_after: seconds after which a retry may succeed, None when the raiser
            does not know (the adapter that opened the unit fills it in).
    """

    code = "unavailable"

    def __init__(self, detail: str, *, retry_after: int | None = None) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


class InvalidToken(ApplicationError):
    """An invocation token that cannot be used (403 invocation_token_invalid).

    Args:
        reason: ``malformed``, ``expired``, ``run_mismatch`` or ``superseded``.
    """

    code = "invocation_token_invalid"

    def __init__(self, reason: str) -> None:
        super().__init__("invocation token invalid", reason=reason)


class BaseVersionConflict(ApplicationError):
    """A patch was based on an older version of the resource (409 with ``current``).

    Args:
        current: the current document of the resource.
    """

    code = "base_version_conflict"

    def __init__(self, current: dict[str, object]) -> None:
        super().__init__("base version conflict")
        self.current = current
