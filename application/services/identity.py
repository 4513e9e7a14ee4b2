"""Who is calling: API tokens and their principals.

Tokens are random secrets shown once; only their SHA-256 hash is stored, so a database
read never yields a usable token.
"""

from __future__ import annotations

import hashlib
import secrets

from application.errors import Unauthenticated
from application.transactions import Transactor
from domain.world import Principal

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
    """

    def __init__(self, tx: Transactor) -> None:
        self._tx = tx

    async def authenticate(self, token: str | None) -> Principal:
        """The principal a token belongs to.

        Args:
            token: the bearer token (None when the header was missing).

        Returns:
            The principal.

        Raises:
            Unauthenticated: for a missing or unknown token.
        """
        if not token:
            raise Unauthenticated()
        digest = hash_token(token)

        principal = await self._tx.read(lambda uow: uow.principals.by_token_hash(digest))
        if principal is None:
            raise Unauthenticated()
        return principal
