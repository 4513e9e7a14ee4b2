"""PostgreSQL API tokens; satisfies `turnkeeper.application.ports.TokenRepository`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, tzinfo

import msgspec

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.base import Conn, MissingRow, members_by_value, unprefixed
from turnkeeper.adapters.postgres.principals import principal_of
from turnkeeper.application.ports import ResolvedToken
from turnkeeper.domain.credentials import ApiToken, TokenOrigin

_TOKEN_ORIGIN_OF = members_by_value(TokenOrigin)

#: The three queries that read a token row share its columns (sqlc names each shape).
_TokenRow = q.GetApiTokenRow | q.GetApiTokenByHashRow | q.ListLiveApiTokensRow

#: The caller column's members with their types (`caller_of`): msgspec reads the ids and
#: times in the same pass as the JSON, a third of the time of ``json.loads`` and a
#: conversion per member, on every request that posts by a token.
_CALLER_COLUMN = msgspec.json.Decoder(
    tuple[
        uuid.UUID,  # principal id
        str,  # kind
        str,  # handle
        str,  # display_name
        bool,  # is_owner
        str | None,  # billing_mode
        uuid.UUID | None,  # holder_id
        bool | None,  # supports_followups
        bool,  # enabled
        str | None,  # reported_followups
        datetime,  # created_at
        uuid.UUID,  # token id
        str | None,  # label
        str,  # origin
        datetime,  # token created_at
        datetime | None,  # last_used_at
    ]
)


def _token(row: _TokenRow) -> ApiToken:
    return ApiToken(
        id=row.id,
        principal_id=row.principal_id,
        origin=_TOKEN_ORIGIN_OF[row.origin],
        created_at=row.created_at,
        label=row.label,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
    )


def live_token(
    principal_id: uuid.UUID,
    *,
    token_id: uuid.UUID,
    label: str | None,
    origin: str,
    created_at: datetime,
    last_used_at: datetime | None,
) -> ApiToken:
    """A live token of a principal from the columns a resolving read returns.

    Args:
        principal_id: its principal.
        token_id: its id.
        label: its label.
        origin: its `TokenOrigin` value.
        created_at: when it was issued.
        last_used_at: its last recorded use.

    Returns:
        The token (not revoked).
    """
    return ApiToken(
        id=token_id,
        principal_id=principal_id,
        origin=TokenOrigin(origin),
        created_at=created_at,
        label=label,
        last_used_at=last_used_at,
    )


def _resolved(row: q.ResolveApiTokenRow) -> ResolvedToken:
    token = live_token(
        row.id,
        token_id=row.token_id,
        label=row.label,
        origin=row.origin,
        created_at=row.token_created_at,
        last_used_at=row.last_used_at,
    )
    principal = principal_of(unprefixed(row, "", q.PrincipalRow))
    return ResolvedToken(token=token, principal=principal)


def caller_of(text: str, zone: tzinfo) -> ResolvedToken:
    """The caller of `GetPostFacts`' JSON column: the principal's columns, then the token's.

    Args:
        text: the column, ``[id, kind, handle, display_name, is_owner, billing_mode,
            holder_id, supports_followups, enabled, reported_followups, created_at,
            token id, label, origin, token created_at, last_used_at]``.
        zone: the session's time zone (psycopg loads a ``timestamptz`` column in it).

    Returns:
        The live token and its principal.
    """
    (
        principal_id,
        kind,
        handle,
        display_name,
        is_owner,
        billing_mode,
        holder_id,
        supports_followups,
        enabled,
        reported_followups,
        created_at,
        token_id,
        label,
        origin,
        token_created_at,
        last_used_at,
    ) = _CALLER_COLUMN.decode(text)
    principal = principal_of(
        q.PrincipalRow(
            id=principal_id,
            kind=kind,
            handle=handle,
            display_name=display_name,
            is_owner=is_owner,
            billing_mode=billing_mode,
            holder_id=holder_id,
            supports_followups=supports_followups,
            enabled=enabled,
            reported_followups=reported_followups,
            created_at=created_at.astimezone(zone),
        )
    )
    token = ApiToken(
        id=token_id,
        principal_id=principal_id,
        origin=_TOKEN_ORIGIN_OF[origin],
        created_at=token_created_at.astimezone(zone),
        label=label,
        last_used_at=None if last_used_at is None else last_used_at.astimezone(zone),
    )
    return ResolvedToken(token=token, principal=principal)


class PostgresTokenRepository:
    """API tokens in ``api_tokens`` (hash as primary key, id unique).

    `resolve` is one statement that joins the principal, so that authenticating a
    request costs one round trip; it reads committed rows only, so a revocation
    committed by any process is seen by the next request of every process.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def add(self, token: ApiToken, token_hash: bytes) -> None:
        """Store a new token (see the port).

        Raises:
            DuplicateKey: ``api_tokens_pkey`` for a hash that is stored already.
        """
        await q.insert_api_token(
            self._conn,
            id=token.id,
            token_hash=token_hash,
            principal_id=token.principal_id,
            label=token.label,
            origin=token.origin.value,
            created_at=token.created_at,
        )

    async def resolve(self, token_hash: bytes) -> ResolvedToken | None:
        """The live token of a hash with its principal (see the port)."""
        row = await q.resolve_api_token(self._conn, token_hash=token_hash)
        return None if row is None else _resolved(row)

    async def by_hash(self, token_hash: bytes) -> ApiToken | None:
        """The token of a hash, live or revoked (see the port)."""
        row = await q.get_api_token_by_hash(self._conn, token_hash=token_hash)
        return None if row is None else _token(row)

    async def get(self, token_id: uuid.UUID) -> ApiToken | None:
        """The token of an id, live or revoked (see the port)."""
        row = await q.get_api_token(self._conn, id=token_id)
        return None if row is None else _token(row)

    async def list_live(self, principal_id: uuid.UUID) -> list[ApiToken]:
        """The live tokens of a principal by id (see the port)."""
        rows = await q.list_live_api_tokens(self._conn, principal_id=principal_id)
        return [_token(row) for row in rows]

    async def touch(self, token_id: uuid.UUID, at: datetime, stale_before: datetime) -> None:
        """Record a use unless a recent one is recorded (one conditional UPDATE)."""
        await q.touch_api_token(self._conn, id=token_id, at=at, stale_before=stale_before)

    async def revoke(self, token_ids: Sequence[uuid.UUID], at: datetime) -> int:
        """Revoke live tokens (see the port)."""
        if not token_ids:
            return 0
        return await q.revoke_api_tokens(self._conn, ids=list(token_ids), at=at)

    async def set_origin(self, token_id: uuid.UUID, origin: TokenOrigin, label: str | None) -> None:
        """Change a token's origin and label (see the port).

        Raises:
            MissingRow: when no token has this id.
        """
        changed = await q.set_api_token_origin(
            self._conn, id=token_id, origin=origin.value, label=label
        )
        if changed != 1:
            raise MissingRow(f"api token {token_id}")
