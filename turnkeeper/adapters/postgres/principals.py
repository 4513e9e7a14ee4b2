"""PostgreSQL repositories of principals and grants (tokens: `.tokens`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import attrs

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.base import Conn, MissingRow, PostgresRepository, members_by_value
from turnkeeper.adapters.postgres.pipelining import PendingMany, PendingOne
from turnkeeper.domain.world import (
    BillingMode,
    Grant,
    Level,
    Principal,
    PrincipalKind,
    ResourceKind,
)

_PRINCIPAL_KIND_OF = members_by_value(PrincipalKind)
_BILLING_MODE_OF = members_by_value(BillingMode)
_RESOURCE_KIND_OF = members_by_value(ResourceKind)


def principal_of(row: q.PrincipalRow) -> Principal:
    """The principal of a ``principals`` row."""
    return Principal(
        id=row.id,
        kind=_PRINCIPAL_KIND_OF[row.kind],
        handle=row.handle,
        display_name=row.display_name,
        is_owner=row.is_owner,
        billing_mode=None if row.billing_mode is None else _BILLING_MODE_OF[row.billing_mode],
        holder_id=row.holder_id,
        supports_followups=row.supports_followups,
        enabled=row.enabled,
        reported_followups=row.reported_followups,
        created_at=row.created_at,
    )


def grant_of(row: q.GrantRow) -> Grant:
    """A grant row as the domain's `Grant`."""
    return Grant(
        id=row.id,
        principal_id=row.principal_id,
        resource_kind=_RESOURCE_KIND_OF[row.resource_kind],
        resource_id=row.resource_id,
        level=Level.parse(row.level),
        created_at=row.created_at,
    )


class PostgresPrincipalRepository(PostgresRepository):
    """Principals; satisfies `PrincipalRepository`.

    A principal read once is remembered for the rest of the unit (the repository lives
    as long as its unit): opening a run, accepting a follow-up or delivering an
    invocation needs the same author and agent several times, and each read would be a
    round trip. Principal rows are never locked, so a second read in the same READ
    COMMITTED unit could return a newer version; answering with the first read is the
    outcome of running both reads at that first moment, which is equally valid. The
    unit's own writes replace what it remembers.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        super().__init__(conn)
        self._seen: dict[uuid.UUID, Principal] = {}
        self._queued: list[PendingMany[q.PrincipalRow]] = []
        self._owner_queued: PendingOne[q.PrincipalRow] | None = None
        # Changed by the unit after a read was queued: that read's row is older.
        self._stale: set[uuid.UUID] = set()

    def _remember(self, principal: Principal) -> Principal:
        self._seen[principal.id] = principal
        return principal

    def _written(self, principal: Principal) -> None:
        if self._queued:
            self._stale.add(principal.id)
        # A queued owner read may be older than this write (the owner, or a new one).
        self._owner_queued = None
        self._remember(principal)

    def forget(self, principal_id: uuid.UUID) -> None:
        """Drop what the unit remembers of a principal whose row changed elsewhere.

        Args:
            principal_id: the principal.
        """
        self._seen.pop(principal_id, None)
        self._owner_queued = None
        if self._queued:
            self._stale.add(principal_id)

    async def add(self, principal: Principal) -> None:
        """Store a new principal.

        Args:
            principal: the principal.

        Raises:
            DuplicateKey: ``principals_handle_key`` when the handle is taken.
        """
        await q.insert_principal(
            self._conn,
            id=principal.id,
            kind=principal.kind.value,
            handle=principal.handle,
            display_name=principal.display_name,
            is_owner=principal.is_owner,
            billing_mode=None if principal.billing_mode is None else principal.billing_mode.value,
            holder_id=principal.holder_id,
            supports_followups=principal.supports_followups,
            enabled=principal.enabled,
            reported_followups=principal.reported_followups,
            created_at=principal.created_at,
        )
        self._written(principal)

    async def prefetch(self, ids: Sequence[uuid.UUID]) -> None:
        """Queue the read of principals the unit is about to need (see the port).

        Args:
            ids: the principals.
        """
        missing = [i for i in dict.fromkeys(ids) if i not in self._seen]
        if missing:
            self._queued.append(await q.start_get_principals(self._conn, ids=missing))

    async def _arrived(self) -> None:
        queued, self._queued = self._queued, []
        stale, self._stale = self._stale, set()
        for pending in queued:
            for row in await pending.result():
                if row.id not in stale and row.id not in self._seen:
                    self._remember(principal_of(row))

    async def get(self, principal_id: uuid.UUID) -> Principal | None:
        """The principal, or None.

        Args:
            principal_id: the id.

        Returns:
            The principal, or None.
        """
        await self._arrived()
        seen = self._seen.get(principal_id)
        if seen is not None:
            return seen
        row = await q.get_principal(self._conn, id=principal_id)
        return None if row is None else self._remember(principal_of(row))

    async def lock(self, principal_id: uuid.UUID) -> Principal | None:
        """The principal under an update lock (``LockPrincipal``), or None.

        Args:
            principal_id: the id.

        Returns:
            The principal as committed when the lock was granted, or None.
        """
        await self._arrived()
        row = await q.lock_principal(self._conn, id=principal_id)
        if row is None:
            self._seen.pop(principal_id, None)
            return None
        return self._remember(principal_of(row))

    async def get_many(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Principal]:
        """The principals among `ids` that exist.

        Args:
            ids: the ids (duplicates and unknown ids are fine).

        Returns:
            The principals by id.
        """
        await self._arrived()
        found = {i: self._seen[i] for i in ids if i in self._seen}
        missing = [i for i in dict.fromkeys(ids) if i not in found]
        if missing:
            for row in await q.get_principals(self._conn, ids=missing):
                found[row.id] = self._remember(principal_of(row))
        return found

    async def update(self, principal: Principal) -> None:
        """Store the changed attributes of an existing principal.

        Args:
            principal: the new value.

        Raises:
            MissingRow: when no principal has this id.
        """
        changed = await q.update_principal(
            self._conn,
            id=principal.id,
            kind=principal.kind.value,
            handle=principal.handle,
            display_name=principal.display_name,
            is_owner=principal.is_owner,
            billing_mode=None if principal.billing_mode is None else principal.billing_mode.value,
            holder_id=principal.holder_id,
            supports_followups=principal.supports_followups,
            enabled=principal.enabled,
            reported_followups=principal.reported_followups,
        )
        if changed != 1:
            raise MissingRow(f"principal {principal.id}")
        self._written(principal)

    async def prefetch_owner(self) -> None:
        """Queue the read of the owner (see the port)."""
        if self._owner_queued is None:
            self._owner_queued = await q.start_get_owner(self._conn)

    async def owner(self) -> Principal | None:
        """The owner principal (the first by id should there be several).

        Returns:
            The owner, or None before the first start.
        """
        queued, self._owner_queued = self._owner_queued, None
        row = await q.get_owner(self._conn) if queued is None else await queued.result()
        return None if row is None else principal_of(row)


@attrs.frozen
class _QueuedGrants:
    """One queued read of the grants of some principals, and who they are."""

    principal_ids: list[uuid.UUID]
    pending: PendingMany[q.GrantRow]


class PostgresGrantRepository(PostgresRepository):
    """Grants; satisfies `GrantRepository`.

    A principal's grants read in a unit are remembered for the rest of it (grant rows
    are never locked by readers, so reading once is as valid as reading twice, as for
    principals in ADR 0009); any grant write of the unit forgets them all, and the reads
    `prefetch` queued before it.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        super().__init__(conn)
        self._of: dict[uuid.UUID, list[Grant]] = {}
        # Each queued principal to the read that holds its grants (shared by a batch).
        self._queued: dict[uuid.UUID, _QueuedGrants] = {}

    def _forget(self) -> None:
        # A write of the unit: what was read or queued before it may be older.
        self._of.clear()
        self._queued.clear()

    async def prefetch(self, principal_ids: Sequence[uuid.UUID]) -> None:
        """Queue one read of the grants of principals (see the port).

        Args:
            principal_ids: the principals.
        """
        missing = [
            i for i in dict.fromkeys(principal_ids) if i not in self._of and i not in self._queued
        ]
        if not missing:
            return
        if len(missing) == 1:
            pending = await q.start_list_grants_for_principal(self._conn, principal_id=missing[0])
        else:
            pending = await q.start_list_grants_for_principals(self._conn, principal_ids=missing)
        queued = _QueuedGrants(missing, pending)
        self._queued |= dict.fromkeys(missing, queued)

    def remember(self, principal_id: uuid.UUID, grants: list[Grant]) -> None:
        """Note a principal's grants read by another statement of the unit (a post's facts).

        Args:
            principal_id: the principal.
            grants: all its grants, by id.
        """
        self._of[principal_id] = grants

    async def add(self, grant: Grant) -> None:
        """Store a grant.

        Args:
            grant: the grant.

        Raises:
            RetriableConflict: ``grants_principal_resource_key`` for a second grant of the
                same principal on the same resource (a concurrent unit's).
        """
        self._forget()
        await q.insert_grant(
            self._conn,
            id=grant.id,
            principal_id=grant.principal_id,
            resource_kind=grant.resource_kind.value,
            resource_id=grant.resource_id,
            level=grant.level.label,
            created_at=grant.created_at,
        )

    async def get(self, grant_id: uuid.UUID) -> Grant | None:
        """The grant, or None.

        Args:
            grant_id: the id.

        Returns:
            The grant, or None.
        """
        row = await q.get_grant(self._conn, id=grant_id)
        return None if row is None else grant_of(row)

    async def lock(self, grant_id: uuid.UUID) -> Grant | None:
        """The grant under an update lock (``LockGrant``), or None.

        Args:
            grant_id: the id.

        Returns:
            The grant, or None when there is none (or it was revoked while this waited).
        """
        row = await q.lock_grant(self._conn, id=grant_id)
        return None if row is None else grant_of(row)

    async def delete(self, grant_id: uuid.UUID) -> None:
        """Remove a grant (no-op for an unknown id).

        Args:
            grant_id: the id.
        """
        self._forget()
        await q.delete_grant(self._conn, id=grant_id)

    async def for_principal(self, principal_id: uuid.UUID) -> list[Grant]:
        """Every grant of a principal, by id.

        Args:
            principal_id: the principal.

        Returns:
            The grants.
        """
        known = self._of.get(principal_id)
        if known is not None:
            return list(known)
        if principal_id not in self._queued:
            await self.prefetch([principal_id])
        queued = self._queued[principal_id]
        # The whole batch arrived: every principal of it is known from now on.
        of: dict[uuid.UUID, list[Grant]] = {i: [] for i in queued.principal_ids}
        for row in await queued.pending.result():
            of[row.principal_id].append(grant_of(row))
        for i, grants in of.items():
            self._queued.pop(i, None)
            # What the unit read since (`remember`) is not older than the batch.
            self._of.setdefault(i, grants)
        return list(of[principal_id])

    async def lock_pair(
        self, principal_id: uuid.UUID, resource_kind: ResourceKind, resource_id: uuid.UUID
    ) -> Grant | None:
        """The grant of a pair, ``FOR UPDATE`` (see the port).

        Args:
            principal_id: the principal.
            resource_kind: space or channel.
            resource_id: the space or channel.

        Returns:
            The locked grant, or None.
        """
        row = await q.lock_grant_of_pair(
            self._conn,
            principal_id=principal_id,
            resource_kind=resource_kind.value,
            resource_id=resource_id,
        )
        return None if row is None else grant_of(row)

    async def set_level(self, grant_id: uuid.UUID, level: Level) -> None:
        """Change a grant's level.

        Args:
            grant_id: the grant.
            level: the new level.

        Raises:
            MissingRow: when no grant has this id.
        """
        self._forget()
        if await q.update_grant_level(self._conn, id=grant_id, level=level.label) != 1:
            raise MissingRow(f"grant {grant_id}")

    async def list(
        self, *, principal_id: uuid.UUID | None = None, resource_id: uuid.UUID | None = None
    ) -> list[Grant]:
        """The grants matching both filters, by id (see the port).

        Args:
            principal_id: only this principal's (None: any).
            resource_id: only on this space or channel (None: any).

        Returns:
            The grants.
        """
        rows = await q.list_grants(self._conn, principal_id=principal_id, resource_id=resource_id)
        return [grant_of(row) for row in rows]
