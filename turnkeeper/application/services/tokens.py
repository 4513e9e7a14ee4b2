"""API tokens administered by the owner: issue, list, revoke, and the owner's own token.

A principal may hold several tokens; each is shown once when issued and named by its id
afterwards. A revoked token is refused by every process from the moment the revoking
unit committed (the identity service has no cache, ADR 0016). Every issue and
revocation is audited (`turnkeeper.application.ports.AdminChange`).

The token that ``TURNKEEPER_OWNER_TOKEN`` names is stored with origin ``owner_env``:
when the variable names another token at the next start, `settle_owner_env_token`
revokes the one it named before, so that changing the variable is how a leaked owner
token is rotated out.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import attrs

from turnkeeper.application.errors import ApplicationError
from turnkeeper.application.ports import AdminChange, Clock, IdGenerator, UnitOfWork
from turnkeeper.application.ports.audit import AuditAction, ChangeAction
from turnkeeper.application.services.access import require_owner
from turnkeeper.application.services.identity import hash_token, new_token
from turnkeeper.application.settings import Settings
from turnkeeper.application.transactions import Transactor
from turnkeeper.domain.credentials import (
    OWNER_ENV_LABEL,
    ApiToken,
    TokenOrigin,
    label_errors,
    owner_tokens_to_revoke,
)
from turnkeeper.domain.errors import NotFound, ValidationFailed
from turnkeeper.domain.world import Principal


@attrs.frozen(kw_only=True)
class IssuedToken:
    """A new token with its secret (shown once).

    Attributes:
        token: the stored token.
        secret: the bearer token in clear text.
    """

    token: ApiToken
    secret: str


#: The one-line message of each `OwnerTokenRefused` reason (the command line prints it).
_REFUSALS = {
    "revoked": "TURNKEEPER_OWNER_TOKEN names a revoked token; set a new token",
    "other_principal": "TURNKEEPER_OWNER_TOKEN names the token of another principal",
}


class OwnerTokenRefused(ApplicationError):
    """``TURNKEEPER_OWNER_TOKEN`` names a token that must not become the owner's.

    Args:
        reason: ``revoked`` (it was revoked before: choose a new one) or
            ``other_principal`` (it authenticates someone else).
    """

    code = "internal"

    def __init__(self, reason: str) -> None:
        super().__init__(_REFUSALS[reason], reason=reason)


async def add_token(
    uow: UnitOfWork,
    ids: IdGenerator,
    principal_id: uuid.UUID,
    at: datetime,
    *,
    secret: str | None = None,
    label: str | None = None,
    origin: TokenOrigin = TokenOrigin.ISSUED,
) -> IssuedToken:
    """Store a new token of a principal in a unit.

    Args:
        uow: the unit of work.
        ids: the id source.
        principal_id: whom the token authenticates.
        at: creation time.
        secret: the secret (None: a new random one).
        label: the optional label.
        origin: where the token comes from.

    Returns:
        The stored token and its secret.
    """
    token = ApiToken(
        id=ids.new_id(), principal_id=principal_id, origin=origin, created_at=at, label=label
    )
    secret = secret or new_token()
    await uow.tokens.add(token, hash_token(secret))
    return IssuedToken(token=token, secret=secret)


async def settle_owner_env_token(
    uow: UnitOfWork, ids: IdGenerator, owner: Principal, secret: str, at: datetime
) -> None:
    """Make the token of ``TURNKEEPER_OWNER_TOKEN`` the owner's, retiring the one before.

    A token not stored yet is added (origin ``owner_env``); a stored token of the owner
    is adopted: marked ``owner_env`` and labelled ``owner-env`` (a token the owner got
    before it was configured, through the API or before tokens had an origin). Then
    every other live ``owner_env`` token of the owner is revoked and audited. Run inside
    the unit that ensures the owner.

    Args:
        uow: the unit of work.
        ids: the id source.
        owner: the owner principal.
        secret: the configured token.
        at: the time of the start.

    Raises:
        OwnerTokenRefused: when the token was revoked before or belongs to another
            principal (the process must not start with it).
    """
    stored = await uow.tokens.by_hash(hash_token(secret))
    if stored is None:
        added = await add_token(
            uow,
            ids,
            owner.id,
            at,
            secret=secret,
            label=OWNER_ENV_LABEL,
            origin=TokenOrigin.OWNER_ENV,
        )
        configured = added.token.id
        await _audit(uow, ids, owner.id, ChangeAction.TOKEN_ISSUED, configured, at)
    elif stored.revoked:
        raise OwnerTokenRefused("revoked")
    elif stored.principal_id != owner.id:
        raise OwnerTokenRefused("other_principal")
    else:
        configured = stored.id
        if stored.origin is not TokenOrigin.OWNER_ENV:
            # Adopted, it is listed as the environment's token (the rotation that
            # retires it must not look like a revocation of an API-issued token).
            await uow.tokens.set_origin(stored.id, TokenOrigin.OWNER_ENV, OWNER_ENV_LABEL)
    retired = owner_tokens_to_revoke(await uow.tokens.list_live(owner.id), configured)
    await uow.tokens.revoke(retired, at)
    for token_id in retired:
        await _audit(uow, ids, owner.id, ChangeAction.TOKEN_REVOKED, token_id, at)


async def audit_token_issued(
    uow: UnitOfWork, ids: IdGenerator, actor_id: uuid.UUID, token_id: uuid.UUID, at: datetime
) -> None:
    """Record the issue of a token as an administrative change (``token.issued``).

    Args:
        uow: the unit of work that stored the token.
        ids: the id source.
        actor_id: who issued it (the owner; for the owner's own first token, the owner).
        token_id: the token.
        at: when.
    """
    await _audit(uow, ids, actor_id, ChangeAction.TOKEN_ISSUED, token_id, at)


async def _audit(
    uow: UnitOfWork,
    ids: IdGenerator,
    actor_id: uuid.UUID,
    action: ChangeAction,
    token_id: uuid.UUID,
    at: datetime,
) -> None:
    await uow.audit.record_change(
        AdminChange(id=ids.new_id(), actor_id=actor_id, action=action, subject_id=token_id, at=at)
    )


class TokenService:
    """The owner's use cases on API tokens.

    Args:
        tx: the transactor.
        clock: time of issue and revocation.
        ids: UUIDv7 source.
        settings: ``auth.token_label_max_chars``.
    """

    def __init__(self, tx: Transactor, clock: Clock, ids: IdGenerator, settings: Settings) -> None:
        self._tx = tx
        self._clock = clock
        self._ids = ids
        self._settings = settings

    @staticmethod
    async def _principal(uow: UnitOfWork, principal_id: uuid.UUID) -> Principal:
        principal = await uow.principals.get(principal_id)
        if principal is None:
            raise NotFound()
        return principal

    async def issue_token(
        self, actor: Principal, principal_id: uuid.UUID, *, label: str | None = None
    ) -> IssuedToken:
        """Issue one more token for a principal.

        Args:
            actor: the owner.
            principal_id: whom the token authenticates.
            label: an optional note on what the token is for.

        Returns:
            The token with its secret (shown once).

        Raises:
            AccessDenied: for a non-owner.
            ValidationFailed: ``/label`` required or too_long.
            NotFound: for an unknown principal.
        """
        await require_owner(self._tx, actor, AuditAction.TOKEN_CREATE)
        errors = label_errors(label, max_chars=self._settings.token_label_max_chars)
        if errors:
            raise ValidationFailed(errors)

        async def work(uow: UnitOfWork) -> IssuedToken:
            await self._principal(uow, principal_id)
            now = self._clock.now()
            issued = await add_token(uow, self._ids, principal_id, now, label=label)
            await _audit(uow, self._ids, actor.id, ChangeAction.TOKEN_ISSUED, issued.token.id, now)
            return issued

        return await self._tx.run(work)

    async def list_tokens(self, actor: Principal, principal_id: uuid.UUID) -> list[ApiToken]:
        """The live tokens of a principal (never their secrets).

        Args:
            actor: the owner.
            principal_id: the principal.

        Returns:
            The tokens, oldest first.

        Raises:
            AccessDenied: for a non-owner.
            NotFound: for an unknown principal.
        """
        await require_owner(self._tx, actor, AuditAction.TOKEN_LIST)

        async def work(uow: UnitOfWork) -> list[ApiToken]:
            await self._principal(uow, principal_id)
            return await uow.tokens.list_live(principal_id)

        return await self._tx.read(work)

    async def revoke_token(
        self, actor: Principal, principal_id: uuid.UUID, token_id: uuid.UUID
    ) -> None:
        """Revoke a token: from the commit on, every process refuses it.

        Args:
            actor: the owner.
            principal_id: the token's principal.
            token_id: the token.

        Raises:
            AccessDenied: for a non-owner.
            NotFound: for an unknown principal, a token of another principal, or a
                token that is revoked already.
        """
        await require_owner(self._tx, actor, AuditAction.TOKEN_REVOKE)

        async def work(uow: UnitOfWork) -> None:
            token = await uow.tokens.get(token_id)
            if token is None or token.principal_id != principal_id or token.revoked:
                raise NotFound()
            now = self._clock.now()
            if await uow.tokens.revoke([token_id], now) != 1:
                # A concurrent unit revoked it first: it is gone for this caller too.
                raise NotFound()
            await _audit(uow, self._ids, actor.id, ChangeAction.TOKEN_REVOKED, token_id, now)

        await self._tx.run(work)
