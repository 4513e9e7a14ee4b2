"""Grants administered by the owner: one level per principal and resource, audited.

A principal has at most one grant per space or channel: granting again changes the
level of that grant and keeps its id. Every change is recorded with the level before and
after (`turnkeeper.application.ports.AdminChange`). `AdminService` offers the same use
cases under its own name.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import attrs

from turnkeeper.application.ports import AdminChange, Clock, IdGenerator, UnitOfWork
from turnkeeper.application.ports.audit import AuditAction, ChangeAction
from turnkeeper.application.services.access import require_owner
from turnkeeper.application.transactions import Transactor
from turnkeeper.domain.errors import FieldError, NotFound, ValidationFailed
from turnkeeper.domain.world import Grant, Level, Principal, ResourceKind


@attrs.frozen(kw_only=True)
class GrantChange:
    """What a grant request did.

    Attributes:
        grant: the grant as stored now.
        created: True for a new grant, False when the pair's grant was kept or changed.
        before: the level before (None for a new grant).
    """

    grant: Grant
    created: bool
    before: Level | None


def _invalid(pointer: str, code: str) -> ValidationFailed:
    return ValidationFailed([FieldError(pointer=pointer, code=code)])


class GrantService:
    """The owner's use cases on grants.

    Args:
        tx: the transactor.
        clock: time of creation and of the audit records.
        ids: UUIDv7 source.
    """

    def __init__(self, tx: Transactor, clock: Clock, ids: IdGenerator) -> None:
        self._tx = tx
        self._clock = clock
        self._ids = ids

    async def _require_owner(self, actor: Principal, action: AuditAction) -> None:
        await require_owner(self._tx, actor, action)

    async def set_grant(
        self,
        actor: Principal,
        *,
        principal_id: uuid.UUID,
        resource_kind: ResourceKind,
        resource_id: uuid.UUID,
        level: Level,
    ) -> GrantChange:
        """Give a principal a level on a space or channel (agents are capped at write).

        A principal has at most one grant per resource: for a pair that has one, its
        level changes and its id stays (an unchanged level changes nothing). Every call
        is audited with the level before and after (``grant.created``,
        ``grant.level_changed``, ``grant.level_kept``).

        Args:
            actor: the owner.
            principal_id: who gets the level.
            resource_kind: space or channel.
            resource_id: the space or channel.
            level: read, write or trigger.

        Returns:
            The grant as stored, whether it was created, and the level before.

        Raises:
            AccessDenied: for a non-owner.
            ValidationFailed: for an unknown principal or resource, or level none.
        """
        await self._require_owner(actor, AuditAction.GRANT_CREATE)
        if level is Level.NONE:
            raise _invalid("/level", "invalid_enum")

        async def work(uow: UnitOfWork) -> GrantChange:
            if await uow.principals.get(principal_id) is None:
                raise _invalid("/principal_id", "unknown_principal")
            found = (
                await uow.spaces.get(resource_id)
                if resource_kind is ResourceKind.SPACE
                else await uow.channels.get(resource_id)
            )
            if found is None:
                raise _invalid("/resource_id", "unknown_resource")
            now = self._clock.now()
            existing = await uow.grants.lock_pair(principal_id, resource_kind, resource_id)
            if existing is None:
                grant = Grant(
                    id=self._ids.new_id(),
                    principal_id=principal_id,
                    resource_kind=resource_kind,
                    resource_id=resource_id,
                    level=level,
                    created_at=now,
                )
                await uow.grants.add(grant)
                await self._audit(
                    uow, actor, ChangeAction.GRANT_CREATED, grant.id, None, level, now
                )
                return GrantChange(grant=grant, created=True, before=None)
            if existing.level is not level:
                await uow.grants.set_level(existing.id, level)
            action = (
                ChangeAction.GRANT_LEVEL_KEPT
                if existing.level is level
                else ChangeAction.GRANT_LEVEL_CHANGED
            )
            await self._audit(uow, actor, action, existing.id, existing.level, level, now)
            grant = attrs.evolve(existing, level=level)
            return GrantChange(grant=grant, created=False, before=existing.level)

        return await self._tx.run(work)

    async def _audit(
        self,
        uow: UnitOfWork,
        actor: Principal,
        action: ChangeAction,
        grant_id: uuid.UUID,
        before: Level | None,
        after: Level | None,
        at: datetime,
    ) -> None:
        await uow.audit.record_change(
            AdminChange(
                id=self._ids.new_id(),
                actor_id=actor.id,
                action=action,
                subject_id=grant_id,
                at=at,
                before=None if before is None else before.label,
                after=None if after is None else after.label,
            )
        )

    async def list_grants(
        self,
        actor: Principal,
        *,
        principal_id: uuid.UUID | None = None,
        resource_id: uuid.UUID | None = None,
    ) -> list[Grant]:
        """The grants of a principal, on a resource, both, or all.

        Args:
            actor: the owner.
            principal_id: only this principal's grants (None: anyone's).
            resource_id: only grants on this space or channel (None: any).

        Returns:
            The grants, oldest first (an unknown id matches nothing).

        Raises:
            AccessDenied: for a non-owner.
        """
        await self._require_owner(actor, AuditAction.GRANT_LIST)
        return await self._tx.read(
            lambda uow: uow.grants.list(principal_id=principal_id, resource_id=resource_id)
        )

    async def delete_grant(self, actor: Principal, grant_id: uuid.UUID) -> None:
        """Revoke a grant.

        Raises:
            AccessDenied: for a non-owner.
            NotFound: for an unknown grant.
        """
        await self._require_owner(actor, AuditAction.GRANT_DELETE)

        async def work(uow: UnitOfWork) -> None:
            # Locked: of two revocations of one grant the second finds none (404).
            grant = await uow.grants.lock(grant_id)
            if grant is None:
                raise NotFound()
            await uow.grants.delete(grant_id)
            now = self._clock.now()
            await self._audit(
                uow, actor, ChangeAction.GRANT_DELETED, grant_id, grant.level, None, now
            )

        await self._tx.run(work)
