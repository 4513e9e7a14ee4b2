"""The sources of time and ids, and the signer of invocation tokens."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Protocol

import attrs

from turnkeeper.domain.runs import TriggerKind


class Clock(Protocol):
    """The only source of time."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class IdGenerator(Protocol):
    """The only source of ids."""

    def new_id(self) -> uuid.UUID:
        """A fresh UUIDv7."""
        ...


@attrs.frozen(kw_only=True)
class InvocationClaims:
    """The claims of an invocation token.

    Attributes:
        run_id: the run the token is for.
        message_id: the message it was delivered for.
        trigger_kind: message or followup.
        sub: the author the run acts for.
        jti: unique id of this token.
        exp: expiry.
    """

    run_id: uuid.UUID
    message_id: uuid.UUID
    trigger_kind: TriggerKind
    sub: uuid.UUID
    jti: str
    exp: datetime


class TokenSigner(Protocol):
    """Signs and verifies invocation tokens."""

    def sign(self, claims: InvocationClaims) -> str:
        """A signed token carrying the claims."""
        ...

    def verify(self, token: str, now: datetime) -> InvocationClaims:
        """The claims of a valid token.

        Raises:
            InvalidToken: malformed, wrong signature, or expired at `now`.
        """
        ...
