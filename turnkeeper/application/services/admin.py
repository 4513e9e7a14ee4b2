"""Administration by the owner: principals, spaces, channels, behaviour, operators, grants.

Tokens are administered by `turnkeeper.application.services.tokens`.

Every use case here needs the owner role; anyone else gets 403 forbidden with reason
``owner_required`` (audited like every denial).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import attrs

from turnkeeper.application.errors import DuplicateKey
from turnkeeper.application.ports import Clock, IdGenerator, UnitOfWork
from turnkeeper.application.ports.audit import AuditAction
from turnkeeper.application.services.access import require_owner
from turnkeeper.application.services.grants import GrantService
from turnkeeper.application.services.tokens import (
    add_token,
    audit_token_issued,
    settle_owner_env_token,
)
from turnkeeper.application.settings import Settings
from turnkeeper.application.transactions import Transactor
from turnkeeper.domain.admin_rules import name_errors, operator_errors, principal_errors
from turnkeeper.domain.credentials import OWNER_ENV_LABEL, TokenOrigin
from turnkeeper.domain.errors import (
    FieldError,
    NotFound,
    ValidationFailed,
    character_errors,
    reject_invalid,
)
from turnkeeper.domain.world import (
    BillingMode,
    Channel,
    ChannelBehavior,
    ChannelType,
    Grant,
    Level,
    OperatorMode,
    Principal,
    PrincipalKind,
    ResourceKind,
    Space,
    Thread,
)

_ChannelChange = Callable[[UnitOfWork, Channel], Awaitable[Channel]]


@attrs.frozen(kw_only=True)
class NewPrincipal:
    """A created principal with its token (shown once).

    Attributes:
        principal: the stored principal.
        token: the API token in clear text.
    """

    principal: Principal
    token: str


def _invalid(pointer: str, code: str) -> ValidationFailed:
    return ValidationFailed([FieldError(pointer=pointer, code=code)])


#: The unique constraint of principal handles, as every store names it (`PrincipalRepository`).
HANDLE_CONSTRAINT = "principals_handle_key"


def _handle_taken(duplicate: DuplicateKey) -> Exception:
    """400 ``/handle taken`` for a taken handle; any other duplicate stays what it is."""
    if duplicate.constraint == HANDLE_CONSTRAINT:
        return _invalid("/handle", "taken")
    return duplicate


class AdminService:
    """Use cases of the owner.

    Args:
        tx: the transactor.
        clock: time of creation.
        ids: UUIDv7 source.
        settings: for ``principal.max_handle_length`` (None: the defaults).
    """

    def __init__(
        self, tx: Transactor, clock: Clock, ids: IdGenerator, settings: Settings | None = None
    ) -> None:
        self._tx = tx
        self._clock = clock
        self._ids = ids
        self._settings = settings or Settings()
        self._grants = GrantService(tx, clock, ids)

    async def _require_owner(self, actor: Principal, action: AuditAction) -> None:
        await require_owner(self._tx, actor, action)

    async def _agent(self, uow: UnitOfWork, agent_id: uuid.UUID, pointer: str) -> Principal:
        agent = await uow.principals.get(agent_id)
        if agent is None or not agent.is_agent:
            raise _invalid(pointer, "not_an_agent")
        return agent

    async def ensure_owner(self, handle: str, token: str | None) -> NewPrincipal | None:
        """Create the owner principal unless one exists.

        Args:
            handle: the owner's handle.
            token: a fixed token (``TURNKEEPER_OWNER_TOKEN``) or None to generate one.

        Returns:
            The new owner and its token, or None when an owner already existed. A fixed
            token then becomes the owner's, and the token an earlier value of the
            variable named is revoked (`settle_owner_env_token`).

        Raises:
            OwnerTokenRefused: when the fixed token was revoked before or belongs to
                another principal.
        """

        async def work(uow: UnitOfWork) -> NewPrincipal | None:
            now = self._clock.now()
            owner = await uow.principals.owner()
            if owner is not None:
                if token is not None:
                    await settle_owner_env_token(uow, self._ids, owner, token, now)
                return None
            principal = Principal(
                id=self._ids.new_id(),
                kind=PrincipalKind.PERSON,
                handle=handle,
                display_name=handle,
                is_owner=True,
                created_at=now,
            )
            await uow.principals.add(principal)
            if token is not None:
                issued = await add_token(
                    uow,
                    self._ids,
                    principal.id,
                    now,
                    secret=token,
                    label=OWNER_ENV_LABEL,
                    origin=TokenOrigin.OWNER_ENV,
                )
            else:
                issued = await add_token(uow, self._ids, principal.id, now)
            await audit_token_issued(uow, self._ids, principal.id, issued.token.id, now)
            return NewPrincipal(principal=principal, token=issued.secret)

        return await self._tx.run(work)

    async def create_principal(
        self,
        actor: Principal,
        *,
        kind: PrincipalKind,
        handle: str,
        display_name: str = "",
        billing_mode: BillingMode | None = None,
        holder_id: uuid.UUID | None = None,
        supports_followups: bool | None = None,
        is_owner: bool = False,
    ) -> NewPrincipal:
        """Create a person or agent with a first API token.

        Args:
            actor: the owner.
            kind: person or agent (app is reserved).
            handle: unique handle.
            display_name: optional display name.
            billing_mode: agents: organization (default) or personal.
            holder_id: personal agents: the holding person.
            supports_followups: agents: owner configuration of follow-ups.
            is_owner: give the owner role (library use; not reachable over HTTP).

        Returns:
            The principal and its token.

        Raises:
            AccessDenied: for a non-owner.
            ValidationFailed: for inconsistent members or a taken handle.
        """
        await self._require_owner(actor, AuditAction.PRINCIPAL_CREATE)
        reject_invalid(
            [
                *principal_errors(
                    kind=kind,
                    handle=handle,
                    billing_mode=billing_mode,
                    holder_id=holder_id,
                    supports_followups=supports_followups,
                    max_handle_length=self._settings.max_handle_length,
                ),
                *character_errors({"/display_name": display_name}),
            ]
        )
        if kind is PrincipalKind.AGENT:
            billing_mode = billing_mode or BillingMode.ORGANIZATION

        async def work(uow: UnitOfWork) -> NewPrincipal:
            if holder_id is not None:
                holder = await uow.principals.get(holder_id)
                if holder is None or holder.kind is not PrincipalKind.PERSON:
                    raise _invalid("/holder_id", "not_a_person")
            now = self._clock.now()
            principal = Principal(
                id=self._ids.new_id(),
                kind=kind,
                handle=handle,
                display_name=display_name,
                is_owner=is_owner,
                billing_mode=billing_mode,
                holder_id=holder_id,
                supports_followups=supports_followups,
                created_at=now,
            )
            await uow.principals.add(principal)
            issued = await add_token(uow, self._ids, principal.id, now)
            await audit_token_issued(uow, self._ids, actor.id, issued.token.id, now)
            return NewPrincipal(principal=principal, token=issued.secret)

        try:
            return await self._tx.run(work)
        except DuplicateKey as taken:
            # Out of the unit: a store that pipelines its writes reports the taken handle
            # at COMMIT, after `add` returned, the memory store at `add` itself.
            raise _handle_taken(taken) from None

    async def create_space(
        self, actor: Principal, *, name: str, default_operator_id: uuid.UUID | None = None
    ) -> Space:
        """Create a space, optionally with a default operator agent.

        Raises:
            AccessDenied: for a non-owner.
            ValidationFailed: when the operator is not an agent.
        """
        await self._require_owner(actor, AuditAction.SPACE_CREATE)
        reject_invalid(name_errors(name))

        async def work(uow: UnitOfWork) -> Space:
            if default_operator_id is not None:
                await self._agent(uow, default_operator_id, "/default_operator_id")
            space = Space(
                id=self._ids.new_id(),
                name=name,
                default_operator_id=default_operator_id,
                created_by=actor.id,
                created_at=self._clock.now(),
            )
            await uow.spaces.add(space)
            return space

        return await self._tx.run(work)

    async def create_channel(
        self,
        actor: Principal,
        space_id: uuid.UUID,
        *,
        name: str,
        type: ChannelType,
        operator_mode: OperatorMode = OperatorMode.INHERIT,
        operator_id: uuid.UUID | None = None,
    ) -> Channel:
        """Create a channel; a text channel gets its main thread at once.

        Raises:
            AccessDenied: for a non-owner.
            NotFound: for an unknown space.
            ValidationFailed: for an operator that does not fit the mode.
        """
        await self._require_owner(actor, AuditAction.CHANNEL_CREATE)
        reject_invalid([*name_errors(name), *operator_errors(operator_mode, operator_id)])

        async def work(uow: UnitOfWork) -> Channel:
            if await uow.spaces.get(space_id) is None:
                raise NotFound()
            if operator_id is not None:
                await self._agent(uow, operator_id, "/operator_id")
            now = self._clock.now()
            channel_id = self._ids.new_id()
            main_thread_id = self._ids.new_id() if type is ChannelType.TEXT else None
            channel = Channel(
                id=channel_id,
                space_id=space_id,
                name=name,
                type=type,
                operator_mode=operator_mode,
                operator_id=operator_id,
                main_thread_id=main_thread_id,
                created_at=now,
            )
            await uow.channels.add(channel)
            if main_thread_id is not None:
                await uow.threads.add(
                    Thread(
                        id=main_thread_id,
                        channel_id=channel_id,
                        is_main=True,
                        title=name,
                        created_by=actor.id,
                        created_at=now,
                    )
                )
            return channel

        return await self._tx.run(work)

    async def _change_channel(
        self, actor: Principal, channel_id: uuid.UUID, action: AuditAction, change: _ChannelChange
    ) -> Channel:
        await self._require_owner(actor, action)

        async def work(uow: UnitOfWork) -> Channel:
            # Locked: the change is written back whole, over any committed meanwhile.
            channel = await uow.channels.lock(channel_id)
            if channel is None:
                raise NotFound()
            changed = await change(uow, channel)
            await uow.channels.update(changed)
            return changed

        return await self._tx.run(work)

    async def set_behavior(
        self,
        actor: Principal,
        channel_id: uuid.UUID,
        *,
        free_response: bool | None = None,
        allow_mentioned_agents: bool | None = None,
        thread_require_mention: bool | None = None,
    ) -> Channel:
        """Change the switches of a channel (absent switches stay as they are).

        Raises:
            AccessDenied: for a non-owner.
            NotFound: for an unknown channel.
        """

        async def change(uow: UnitOfWork, channel: Channel) -> Channel:
            old = channel.behavior
            behavior = ChannelBehavior(
                free_response=old.free_response if free_response is None else free_response,
                allow_mentioned_agents=old.allow_mentioned_agents
                if allow_mentioned_agents is None
                else allow_mentioned_agents,
                thread_require_mention=old.thread_require_mention
                if thread_require_mention is None
                else thread_require_mention,
            )
            return attrs.evolve(channel, behavior=behavior)

        return await self._change_channel(actor, channel_id, AuditAction.CHANNEL_BEHAVIOR, change)

    async def set_operator(
        self,
        actor: Principal,
        channel_id: uuid.UUID,
        *,
        mode: OperatorMode,
        operator_id: uuid.UUID | None = None,
    ) -> Channel:
        """Change how a channel finds its operator (threads keep their fixed operator).

        Raises:
            AccessDenied: for a non-owner.
            NotFound: for an unknown channel.
            ValidationFailed: for an operator that does not fit the mode.
        """

        async def change(uow: UnitOfWork, channel: Channel) -> Channel:
            # Checked after the owner check (in `_change_channel`): a non-owner is told
            # 403 owner_required, and audited, whatever the body holds.
            reject_invalid(operator_errors(mode, operator_id))
            if operator_id is not None:
                await self._agent(uow, operator_id, "/operator_id")
            return attrs.evolve(channel, operator_mode=mode, operator_id=operator_id)

        return await self._change_channel(actor, channel_id, AuditAction.CHANNEL_OPERATOR, change)

    async def archive_channel(self, actor: Principal, channel_id: uuid.UUID) -> Channel:
        """Make a channel read-only for everyone.

        Raises:
            AccessDenied: for a non-owner.
            NotFound: for an unknown channel.
        """

        async def change(uow: UnitOfWork, channel: Channel) -> Channel:
            return attrs.evolve(channel, archived=True)

        return await self._change_channel(actor, channel_id, AuditAction.CHANNEL_ARCHIVE, change)

    async def create_grant(
        self,
        actor: Principal,
        *,
        principal_id: uuid.UUID,
        resource_kind: ResourceKind,
        resource_id: uuid.UUID,
        level: Level,
    ) -> Grant:
        """Grant a level on a space or channel, or change the level of the pair's grant.

        `GrantService.set_grant`, answering only the grant.

        Raises:
            AccessDenied: for a non-owner.
            ValidationFailed: for an unknown principal or resource, or level none.
        """
        change = await self._grants.set_grant(
            actor,
            principal_id=principal_id,
            resource_kind=resource_kind,
            resource_id=resource_id,
            level=level,
        )
        return change.grant

    async def delete_grant(self, actor: Principal, grant_id: uuid.UUID) -> None:
        """Revoke a grant (`GrantService.delete_grant`).

        Raises:
            AccessDenied: for a non-owner.
            NotFound: for an unknown grant.
        """
        await self._grants.delete_grant(actor, grant_id)

    async def set_agent_config(
        self,
        actor: Principal,
        agent_id: uuid.UUID,
        *,
        supports_followups: bool | None = None,
        enabled: bool | None = None,
    ) -> Principal:
        """Change an agent's owner configuration.

        Raises:
            AccessDenied: for a non-owner.
            NotFound: for an unknown id or a principal that is not an agent.
        """
        await self._require_owner(actor, AuditAction.AGENT_CONFIG)

        async def work(uow: UnitOfWork) -> Principal:
            # Locked: the row is written back whole, over a heartbeat committed meanwhile.
            agent = await uow.principals.lock(agent_id)
            if agent is None or not agent.is_agent:
                raise NotFound()
            changed = attrs.evolve(
                agent,
                supports_followups=agent.supports_followups
                if supports_followups is None
                else supports_followups,
                enabled=agent.enabled if enabled is None else enabled,
            )
            await uow.principals.update(changed)
            return changed

        return await self._tx.run(work)
