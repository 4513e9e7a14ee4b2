"""Errors of the agent runtime client, translated at its edge from HTTP and httpx.

Import them from ``turnkeeper.adapters.client``: `ClientError` is the base; `ClientProblem` is an
``application/problem+json`` answer of the server; `ClientUnavailable` wraps transport
failures (the outcome of a send is then unknown: retry it with the same client message
id, which the server replays); `AnswerInvalid` is a success answer that breaks the
contract.
"""

from __future__ import annotations

from collections.abc import Sequence

from turnkeeper.domain.errors import FieldError

#: The code of a `ClientProblem` whose error answer was not problem+json.
UNEXPECTED_ANSWER = "unexpected_answer"


class ClientError(Exception):
    """Base of every error the agent runtime client raises."""


class ClientProblem(ClientError):
    """An error answer of the server (``application/problem+json``).

    Args:
        status: the HTTP status.
        code: the problem ``code`` (``validation_failed``, ``idempotency_conflict`` ...),
            or ``unexpected_answer`` when the error answer was not problem+json.
        reason: the problem ``reason``, for 403 and 409 answers.
        errors: the offending members of a 400 (``/freshness`` freshness_required ...).
        title: the problem ``title``.
        correlation_id: the answer's correlation id, for support.
        retry_after: whole seconds of ``Retry-After`` (rate_limited), when given.

    Example:
        >>> problem = ClientProblem(409, "idempotency_conflict")
        >>> (problem.status, problem.code, problem.errors)
        (409, 'idempotency_conflict', ())
    """

    def __init__(
        self,
        status: int,
        code: str,
        reason: str | None = None,
        errors: Sequence[FieldError] = (),
        *,
        title: str | None = None,
        correlation_id: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        detail = f" ({reason})" if reason else ""
        super().__init__(f"{status} {code}{detail}")
        self.status = status
        self.code = code
        self.reason = reason
        self.errors = tuple(errors)
        self.title = title
        self.correlation_id = correlation_id
        self.retry_after = retry_after

    def has_error(self, pointer: str, code: str | None = None) -> bool:
        """Whether the problem names a member (and, when given, with that code).

        Args:
            pointer: JSON pointer, for example ``/freshness/target_key``.
            code: the member's code, for example ``target_key_mismatch``.

        Returns:
            True when one of `errors` matches.
        """
        return any(e.pointer == pointer and code in (None, e.code) for e in self.errors)


class ClientUnavailable(ClientError):
    """The server could not be reached or did not answer (a transport failure)."""


class AnswerInvalid(ClientError):
    """A success answer does not match the HTTP contract."""
