"""API tokens of principals: stored as hashes, named by ids, revoked for good."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

import attrs

from turnkeeper.domain.credentials import ApiToken, TokenOrigin
from turnkeeper.domain.world import Principal


@attrs.frozen(kw_only=True)
class ResolvedToken:
    """A live token and the principal it authenticates.

    Attributes:
        token: the token (without its secret).
        principal: its principal.
    """

    token: ApiToken
    principal: Principal


class TokenRepository(Protocol):
    """API tokens: the hash finds a token, the id names it.

    A revoked token stays stored (so that the owner token variable naming it again is
    recognized), but no lookup of a live token returns it from the moment the revoking
    unit committed: there is no cache in front of this port.
    """

    async def add(self, token: ApiToken, token_hash: bytes) -> None:
        """Store a new token.

        Args:
            token: the token (its id, principal, origin, label, creation time).
            token_hash: the SHA-256 of its secret (never the secret).
        """
        ...

    async def resolve(self, token_hash: bytes) -> ResolvedToken | None:
        """The live token of a hash with its principal (one read).

        Args:
            token_hash: the hash of a presented secret.

        Returns:
            The token and principal, or None for an unknown or revoked token.
        """
        ...

    async def by_hash(self, token_hash: bytes) -> ApiToken | None:
        """The token of a hash, live or revoked, or None."""
        ...

    async def get(self, token_id: uuid.UUID) -> ApiToken | None:
        """The token of an id, live or revoked, or None."""
        ...

    async def list_live(self, principal_id: uuid.UUID) -> list[ApiToken]:
        """The live tokens of a principal, by id (oldest first)."""
        ...

    async def touch(self, token_id: uuid.UUID, at: datetime, stale_before: datetime) -> None:
        """Record a use, unless a use at or after `stale_before` is recorded already.

        Concurrent requests of one token write at most one of them.

        Args:
            token_id: the token.
            at: the time of the use.
            stale_before: a record this recent or newer is kept as it is.
        """
        ...

    async def revoke(self, token_ids: Sequence[uuid.UUID], at: datetime) -> int:
        """Revoke live tokens.

        Args:
            token_ids: the tokens (revoked or unknown ids are skipped).
            at: the time of revocation.

        Returns:
            How many tokens this revoked.
        """
        ...

    async def set_origin(self, token_id: uuid.UUID, origin: TokenOrigin, label: str | None) -> None:
        """Change where a stored token is said to come from, and its label.

        Args:
            token_id: the token.
            origin: the new origin.
            label: the new label (None: none).
        """
        ...
