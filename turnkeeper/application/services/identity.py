"""Who is calling: API tokens and their principals.

Tokens are random secrets shown once; only their SHA-256 hash is stored, so a database
read never yields a usable token.

A resolved token is remembered per process for ``auth.token_cache_seconds`` (keyed by
its hash, at most ``auth.token_cache_size`` entries, least recently used evicted first),
so that a client sending many requests costs one lookup per window instead of one per
request. This is safe because the services use only the caller's identity (id, kind,
owner role), which never changes, and read every changeable fact (an agent's status,
its follow-up mode, grants) again inside their own unit of work. Unknown tokens are
never remembered: a token created a moment ago works at once.
"""

from __future__ import annotations

import collections
import hashlib
import secrets
from datetime import datetime

from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.ports import Clock
from turnkeeper.application.settings import Settings
from turnkeeper.application.transactions import Transactor
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
        clock: the time source (for the cache window).
        settings: ``auth.token_cache_seconds`` and ``auth.token_cache_size``.
    """

    def __init__(self, tx: Transactor, clock: Clock, settings: Settings) -> None:
        self._tx = tx
        self._clock = clock
        self._ttl = settings.token_cache_ttl
        self._size = settings.token_cache_size
        self._cache: collections.OrderedDict[bytes, tuple[Principal, datetime]] = (
            collections.OrderedDict()
        )

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
        now = self._clock.now()
        cached = self._cache.get(digest)
        if cached is not None:
            principal, expires_at = cached
            if now < expires_at:
                self._cache.move_to_end(digest)
                return principal
            del self._cache[digest]
        found = await self._tx.read(lambda uow: uow.principals.by_token_hash(digest))
        if found is None:
            raise Unauthenticated()
        if self._ttl:
            self._cache[digest] = (found, now + self._ttl)
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return found
