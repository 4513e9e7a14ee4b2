"""Errors raised by domain rules.

Every error carries a stable `code` (the problem code of the HTTP contract) and an
optional `reason`; adapters map them to their own answers in one place.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import attrs


@attrs.frozen(kw_only=True)
class FieldError:
    """One offending member of a request.

    Attributes:
        pointer: JSON pointer of the member, for example ``/run_id``.
        code: machine-readable code, for example ``run_mismatch``.
    """

    pointer: str
    code: str


class DomainError(Exception):
    """Base of every error a domain rule raises.

    Attributes:
        code: stable problem code (``validation_failed``, ``forbidden`` ...).

    Args:
        message: a human readable summary (never content or tokens).
        reason: optional finer reason (``level_insufficient`` ...).
    """

    code: str = "internal"

    def __init__(self, message: str = "", *, reason: str | None = None) -> None:
        super().__init__(message or self.code)
        self.reason = reason


class ValidationFailed(DomainError):
    """A request breaks a body rule; nothing was changed.

    Args:
        errors: the offending members with their codes.
        message: a human readable summary.
    """

    code = "validation_failed"

    def __init__(self, errors: Sequence[FieldError], message: str = "") -> None:
        super().__init__(message or "the request is not valid")
        self.errors = tuple(errors)

    def under(self, prefix: str) -> ValidationFailed:
        """The same refusal of a body that sits at `prefix` of its request.

        A pointer written relative to that body (``/content`` of a thread's first
        message) goes under the prefix; one already under it is kept.

        Args:
            prefix: the body's pointer in the request, for example ``/first_message``.

        Returns:
            A new error with the pointers of the request.

        Example:
            >>> refusal = ValidationFailed([FieldError(pointer="/content", code="shouting")])
            >>> refusal.under("/first_message").errors[0].pointer
            '/first_message/content'
        """
        return ValidationFailed(
            [
                error
                if error.pointer == prefix or error.pointer.startswith(f"{prefix}/")
                else attrs.evolve(error, pointer=f"{prefix}{error.pointer}")
                for error in self.errors
            ],
            str(self),
        )


#: The one character PostgreSQL's ``text`` cannot hold. Refused in every text member by
#: the domain rules, so that both stores answer 400 ``invalid_character`` (as the HTTP
#: body guard does) instead of the memory store keeping it and PostgreSQL failing.
NUL = "\x00"
#: What no text member may hold: a NUL, or a lone surrogate (U+D800 to U+DFFF), which a
#: Python string can carry but UTF-8, and so PostgreSQL, cannot (the memory store kept
#: it, PostgreSQL's driver raised UnicodeEncodeError; over HTTP the JSON is refused).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def character_errors(members: Mapping[str, str | None]) -> list[FieldError]:
    """``invalid_character`` for every text member that holds a NUL or a lone surrogate.

    Args:
        members: JSON pointer to text (None: absent, nothing to check).

    Returns:
        One error per offending member, in the members' order.
    """
    return [
        FieldError(pointer=pointer, code="invalid_character")
        for pointer, text in members.items()
        if text is not None and _UNSTORABLE.search(text) is not None
    ]


def reject_invalid(errors: Sequence[FieldError]) -> None:
    """Raise the one `ValidationFailed` of a request when a validator found errors.

    Validators return their field errors (pointers relative to what they were given,
    prefixed by the caller); a use case collects them and calls this once.

    Args:
        errors: every offending member found.

    Raises:
        ValidationFailed: when `errors` is not empty.
    """
    if errors:
        raise ValidationFailed(errors)


class NotFound(DomainError):
    """The resource does not exist or the caller may not read it (indistinguishable)."""

    code = "not_found"


class Forbidden(DomainError):
    """The caller may read the resource but not perform the action.

    Args:
        reason: why, for example ``level_insufficient``.
        code: ``forbidden`` or ``channel_read_only``.
    """

    def __init__(self, reason: str, *, code: str = "forbidden") -> None:
        super().__init__(code, reason=reason)
        self.code = code


class Conflict(DomainError):
    """The action conflicts with the current state (``reason`` says which)."""

    code = "conflict"


class IdempotencyConflict(DomainError):
    """A client id was reused with a different payload."""

    code = "idempotency_conflict"


class InvalidStateTransition(DomainError):
    """A state machine was asked for a transition it does not have."""

    code = "invalid_state_transition"


class RateLimited(DomainError):
    """The principal's bucket for a rate-limit class is empty.

    Args:
        retry_after: whole seconds until one token is available again.
    """

    code = "rate_limited"

    def __init__(self, retry_after: int) -> None:
        super().__init__("rate limited")
        self.retry_after = retry_after
