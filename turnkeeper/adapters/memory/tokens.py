"""The in-memory API tokens; satisfies `turnkeeper.application.ports.TokenRepository`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import attrs

from turnkeeper.adapters.memory.tables import Tables
from turnkeeper.application.errors import DuplicateKey
from turnkeeper.application.ports import ResolvedToken
from turnkeeper.domain.credentials import ApiToken, TokenOrigin


class MemoryTokenRepository:
    """Tokens in the unit's tables: by id, with an index from hash to id.

    Args:
        t: the tables of the unit.
    """

    def __init__(self, t: Tables) -> None:
        self._t = t

    async def add(self, token: ApiToken, token_hash: bytes) -> None:
        """Store a new token (see the port).

        Raises:
            DuplicateKey: ``api_tokens_pkey`` for a hash that is stored already.
        """
        if token_hash in self._t.token_hashes:
            raise DuplicateKey("api_tokens_pkey")
        self._t.tokens[token.id] = token
        self._t.token_hashes[token_hash] = token.id

    async def resolve(self, token_hash: bytes) -> ResolvedToken | None:
        """The live token of a hash with its principal (see the port)."""
        token = await self.by_hash(token_hash)
        if token is None or token.revoked:
            return None
        return ResolvedToken(token=token, principal=self._t.principals[token.principal_id])

    async def by_hash(self, token_hash: bytes) -> ApiToken | None:
        """The token of a hash, live or revoked (see the port)."""
        token_id = self._t.token_hashes.get(token_hash)
        return None if token_id is None else self._t.tokens[token_id]

    async def get(self, token_id: uuid.UUID) -> ApiToken | None:
        """The token of an id, live or revoked (see the port)."""
        return self._t.tokens.get(token_id)

    async def list_live(self, principal_id: uuid.UUID) -> list[ApiToken]:
        """The live tokens of a principal by id (see the port)."""
        return sorted(
            (
                t
                for t in self._t.tokens.values()
                if t.principal_id == principal_id and not t.revoked
            ),
            key=lambda t: t.id,
        )

    async def touch(self, token_id: uuid.UUID, at: datetime, stale_before: datetime) -> None:
        """Record a use unless a recent one is recorded (see the port)."""
        token = self._t.tokens.get(token_id)
        if token is None or token.revoked:
            return
        if token.last_used_at is None or token.last_used_at <= stale_before:
            self._t.tokens[token_id] = attrs.evolve(token, last_used_at=at)

    async def revoke(self, token_ids: Sequence[uuid.UUID], at: datetime) -> int:
        """Revoke live tokens (see the port)."""
        revoked = 0
        for token_id in dict.fromkeys(token_ids):
            token = self._t.tokens.get(token_id)
            if token is not None and not token.revoked:
                self._t.tokens[token_id] = attrs.evolve(token, revoked_at=at)
                revoked += 1
        return revoked

    async def set_origin(self, token_id: uuid.UUID, origin: TokenOrigin, label: str | None) -> None:
        """Change a token's origin and label (see the port)."""
        self._t.tokens[token_id] = attrs.evolve(
            self._t.tokens[token_id], origin=origin, label=label
        )
