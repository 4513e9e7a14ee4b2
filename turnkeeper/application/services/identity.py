"""Who is calling: API tokens and their principals.

Tokens are random secrets shown once; only their SHA-256 hash is stored, so a database
read never yields a usable token.

Every request looks its token up in the store (one read that joins the principal):
there is no cache of resolved tokens, so a token revoked by any process is refused by
every process from the moment the revocation committed (ADR 0016). The last use of a
token is recorded at most once per ``auth.token_last_used_interval``, in a short unit
of its own, so that a client in steady use writes once per interval, not per request.
A hot use case may take the token itself (`BearerToken`) and resolve it in the first
round trip of its own unit instead (ADR 0026): the same read, the same rules.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

import attrs

from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.ports import Clock, ResolvedToken, UnitOfWork
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


@attrs.frozen(repr=False)
class BearerToken:
    """A request's bearer token, not resolved yet.

    A use case taking one resolves it with the first read of its unit
    (`ThreadRepository.token_post_facts`), so that authenticating costs no round trip
    of its own (ADR 0026).

    Attributes:
        digest: the token's stored form (`hash_token`); the secret itself is not kept.
    """

    digest: bytes

    @classmethod
    def of(cls, token: str) -> BearerToken:
        """The unresolved form of a token.

        Args:
            token: the secret of the ``Authorization`` header.

        Returns:
            Its digest, wrapped.
        """
        return cls(hash_token(token))

    def __repr__(self) -> str:
        return "BearerToken(...)"


async def record_use(
    tx: Transactor, found: ResolvedToken, clock: Clock, interval: timedelta
) -> None:
    """Record a token's use when its last recorded use is older than the interval.

    A short unit of its own, after the request's read, so that a client in steady use
    writes once per ``auth.token_last_used_interval``, not per request.

    Args:
        tx: the transactor.
        found: the token a request was authenticated with.
        clock: the time of the use.
        interval: ``auth.token_last_used_interval``.
    """
    now = clock.now()
    if not last_use_due(found.token.last_used_at, now, interval):
        return
    token_id = found.token.id

    async def touch(uow: UnitOfWork) -> None:
        await uow.tokens.touch(token_id, now, stale_before=now - interval)

    await tx.run(touch)


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
        return await self.authenticate_bearer(BearerToken.of(token))

    async def authenticate_bearer(self, bearer: BearerToken) -> Principal:
        """`authenticate` for a token already in its stored form.

        Args:
            bearer: the token's digest.

        Returns:
            The principal.

        Raises:
            Unauthenticated: for an unknown or revoked token.
        """
        digest = bearer.digest
        found = await self._tx.read(lambda uow: uow.tokens.resolve(digest))
        if found is None:
            raise Unauthenticated()
        await record_use(self._tx, found, self._clock, self._interval)
        return found.principal
