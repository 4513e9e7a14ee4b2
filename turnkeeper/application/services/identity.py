"""Who is calling: API tokens and their principals.

Tokens are random secrets shown once; only their SHA-256 hash is stored, so a database
read never yields a usable token.

Every request looks its token up in the store (one read that joins the principal):
there is no cache of resolved tokens, so a token revoked by any process is refused by
every process from the moment the revocation committed (ADR 0016). The last use of a
token is recorded at most once per ``auth.token_last_used_interval``, in a short unit
of its own, so that a client in steady use writes once per interval, not per request.
"""

from __future__ import annotations

import hashlib
import secrets

from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.ports import Clock, UnitOfWork
from turnkeeper.application.settings import Settings
from turnkeeper.application.transactions import Transactor
from turnkeeper.domain.credentials import last_use_due
from turnkeeper.domain.world import Principal

#: Bytes of randomness in a new API token (a property of the token format).
TOKEN_BYTES = 32


def new_token() -> str:
    """A fresh random API token (URL-safe text)."""
    return "tk_" + secrets.token_urlsafe(TOKEN_BYTES)


def hash_token(token: str) -> bytes:
    """The stored form of a token.

    Args:
        token: the secret.

    Returns:
        Its SHA-256 digest.
    """
    return hashlib.sha256(token.encode("utf-8")).digest()


class IdentityService:
    """Resolves bearer tokens to principals.

    Args:
        tx: the transactor.
        clock: the time of a token's use.
        settings: ``auth.token_last_used_interval``.
    """

    def __init__(self, tx: Transactor, clock: Clock, settings: Settings) -> None:
        self._tx = tx
        self._clock = clock
        self._interval = settings.token_last_used_interval

    async def authenticate(self, token: str | None) -> Principal:
        """The principal a live token belongs to.

        Args:
            token: the bearer token (None when the header was missing).

        Returns:
            The principal.

        Raises:
            Unauthenticated: for a missing, unknown or revoked token.
        """
        if not token:
            raise Unauthenticated()
        digest = hash_token(token)
        found = await self._tx.read(lambda uow: uow.tokens.resolve(digest))
        if found is None:
            raise Unauthenticated()
        now = self._clock.now()
        if last_use_due(found.token.last_used_at, now, self._interval):
            token_id = found.token.id

            async def touch(uow: UnitOfWork) -> None:
                await uow.tokens.touch(token_id, now, stale_before=now - self._interval)

            await self._tx.run(touch)
        return found.principal
