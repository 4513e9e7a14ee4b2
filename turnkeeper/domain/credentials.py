"""API tokens as the owner sees them: ids, labels, origin, last use, revocation.

A token's secret is never part of these values: the store keeps only its hash, and a
token is named by its id. Rules here are pure functions of values.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

import attrs

from turnkeeper.domain.errors import FieldError, character_errors
from turnkeeper.domain.text import is_blank

#: The label of the token that ``TURNKEEPER_OWNER_TOKEN`` names.
OWNER_ENV_LABEL = "owner-env"


class TokenOrigin(enum.StrEnum):
    """Where a token came from.

    ``issued``: created by a use case (a new principal's first token, or one issued by
    the owner). ``owner_env``: named by ``TURNKEEPER_OWNER_TOKEN``; when the variable
    names another token, this one is revoked.
    """

    ISSUED = "issued"
    OWNER_ENV = "owner_env"


@attrs.frozen(kw_only=True)
class ApiToken:
    """One API token of a principal, without its secret.

    Attributes:
        id: UUIDv7, the name of the token in answers and routes.
        principal_id: whom the token authenticates.
        origin: issued, or named by the owner token variable.
        created_at: when it was stored.
        label: the owner's optional note on what the token is for.
        last_used_at: its last use, recorded at most once per
            ``auth.token_last_used_interval``; None before the first.
        revoked_at: when it was revoked; None while it works.
    """

    id: uuid.UUID
    principal_id: uuid.UUID
    origin: TokenOrigin
    created_at: datetime
    label: str | None = None
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None

    @property
    def revoked(self) -> bool:
        """True once the token was revoked."""
        return self.revoked_at is not None


def last_use_due(last_used_at: datetime | None, now: datetime, interval: timedelta) -> bool:
    """Whether a use of a token at `now` should be recorded.

    A token in steady use is written once per interval, not once per request.

    Args:
        last_used_at: the recorded last use, None when never used.
        now: the time of this use.
        interval: ``auth.token_last_used_interval`` (0: every use is recorded).

    Returns:
        True when nothing is recorded yet or the record is at least `interval` old.
    """
    return last_used_at is None or now - last_used_at >= interval


def owner_tokens_to_revoke(
    live: Sequence[ApiToken], configured_id: uuid.UUID | None
) -> list[uuid.UUID]:
    """The tokens a changed ``TURNKEEPER_OWNER_TOKEN`` retires.

    Args:
        live: the owner's live tokens.
        configured_id: the id of the token the variable names now (None when it names a
            token not stored yet).

    Returns:
        The ids of the live tokens that an earlier value of the variable named, in id
        order; issued tokens are never among them.
    """
    return sorted(
        token.id
        for token in live
        if token.origin is TokenOrigin.OWNER_ENV and token.id != configured_id
    )


def label_errors(label: str | None, *, max_chars: int) -> list[FieldError]:
    """What is wrong with the label of a new token.

    Args:
        label: the label, None when none was given.
        max_chars: ``auth.token_label_max_chars``.

    Returns:
        ``/label`` required for a blank label, invalid_character for a NUL, too_long
        beyond `max_chars`; else none.
    """
    if label is None:
        return []
    if is_blank(label):
        return [FieldError(pointer="/label", code="required")]
    if nul := character_errors({"/label": label}):
        return nul
    if len(label) > max_chars:
        return [FieldError(pointer="/label", code="too_long")]
    return []
