"""In-memory repositories of the world: principals, spaces, channels, threads and grants.

Units of the memory store run one at a time, so a "lock" is a plain read and a prefetch
has nothing to start; unique keys raise the same application errors as PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import attrs

from turnkeeper.adapters.memory.audit import MemoryRateLimitStore
from turnkeeper.adapters.memory.tables import Tables
from turnkeeper.adapters.memory.tokens import MemoryTokenRepository
from turnkeeper.application.errors import DuplicateKey, RetriableConflict
from turnkeeper.application.ports import BucketTake, HistoryFacts, PostFacts, TokenPostFacts
from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.messaging import Message, visible_to
from turnkeeper.domain.world import (
    Channel,
    Grant,
    Level,
    Principal,
    ResourceKind,
    Space,
    Thread,
    ThreadState,
)

__all__ = [
    "MemoryChannelRepository",
    "MemoryGrantRepository",
    "MemoryPrincipalRepository",
    "MemorySpaceRepository",
    "MemoryThreadRepository",
    "visible_page",
]


class MemoryPrincipalRepository:
    """Principals; satisfies `turnkeeper.application.ports.PrincipalRepository`.

    Args:
        tables: the tables of the unit of work.
    """

    def __init__(self, tables: Tables) -> None:
        self._t = tables

    async def add(self, principal: Principal) -> None:
        """Store a new principal (a taken handle raises `DuplicateKey`)."""
        if any(p.handle == principal.handle for p in self._t.principals.values()):
            raise DuplicateKey("principals_handle_key")
        self._t.principals[principal.id] = principal

    async def get(self, principal_id: uuid.UUID) -> Principal | None:
        """The principal, or None."""
        return self._t.principals.get(principal_id)

    async def lock(self, principal_id: uuid.UUID) -> Principal | None:
        """The principal, or None (memory units run one at a time)."""
        return self._t.principals.get(principal_id)

    async def prefetch(self, ids: Sequence[uuid.UUID]) -> None:
        """Nothing to start: every read is immediate."""

    async def get_many(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Principal]:
        """The principals among `ids` that exist, by id."""
        return {i: self._t.principals[i] for i in ids if i in self._t.principals}

    async def update(self, principal: Principal) -> None:
        """Store changed attributes of an existing principal."""
        self._t.principals[principal.id] = principal

    async def prefetch_owner(self) -> None:
        """Nothing to start: the owner is read when asked for."""

    async def owner(self) -> Principal | None:
        """The owner principal, if one exists."""
        owners = sorted((p for p in self._t.principals.values() if p.is_owner), key=lambda p: p.id)
        return owners[0] if owners else None


class MemorySpaceRepository:
    """Spaces; satisfies `turnkeeper.application.ports.SpaceRepository`.

    Args:
        tables: the tables of the unit of work.
    """

    def __init__(self, tables: Tables) -> None:
        self._t = tables

    async def add(self, space: Space) -> None:
        """Store a new space."""
        self._t.spaces[space.id] = space

    async def get(self, space_id: uuid.UUID) -> Space | None:
        """The space, or None."""
        return self._t.spaces.get(space_id)

    async def list_all(self) -> list[Space]:
        """Every space, by id."""
        return sorted(self._t.spaces.values(), key=lambda s: s.id)


class MemoryChannelRepository:
    """Channels; satisfies `turnkeeper.application.ports.ChannelRepository`.

    Args:
        tables: the tables of the unit of work.
    """

    def __init__(self, tables: Tables) -> None:
        self._t = tables

    async def add(self, channel: Channel) -> None:
        """Store a new channel."""
        self._t.channels[channel.id] = channel

    async def get(self, channel_id: uuid.UUID) -> Channel | None:
        """The channel, or None."""
        return self._t.channels.get(channel_id)

    async def lock(self, channel_id: uuid.UUID) -> Channel | None:
        """The channel, or None (memory units run one at a time)."""
        return self._t.channels.get(channel_id)

    async def update(self, channel: Channel) -> None:
        """Store changed attributes of a channel."""
        self._t.channels[channel.id] = channel

    async def list_all(self) -> list[Channel]:
        """Every channel, by id."""
        return sorted(self._t.channels.values(), key=lambda c: c.id)


def visible_page(
    t: Tables, thread_id: uuid.UUID, reader_id: uuid.UUID, after_seq: int, limit: int
) -> list[Message]:
    """Messages of a thread after a seq that the reader may see, oldest first, at most `limit`.

    Args:
        t: the tables of the unit of work.
        thread_id: the thread.
        reader_id: the reader (restricted messages: members and author).
        after_seq: exclusive lower bound of the page's thread_seq.
        limit: at most this many messages.

    Returns:
        The page.
    """
    found = sorted(
        (
            m
            for m in t.messages.values()
            if m.thread_id == thread_id
            and m.thread_seq > after_seq
            and m.deleted_at is None
            and visible_to(m, reader_id)
        ),
        key=lambda m: m.thread_seq,
    )
    return found[:limit]


class MemoryThreadRepository:
    """Threads; satisfies `turnkeeper.application.ports.ThreadRepository`.

    Args:
        tables: the tables of the unit of work.
    """

    def __init__(self, tables: Tables) -> None:
        self._t = tables

    async def add(self, thread: Thread) -> None:
        """Store a new thread."""
        self._t.threads[thread.id] = thread

    async def get(self, thread_id: uuid.UUID) -> Thread | None:
        """The thread, or None."""
        return self._t.threads.get(thread_id)

    async def allocate_seq(self, thread_id: uuid.UUID) -> int:
        """The thread's next thread_seq."""
        thread = self._t.threads[thread_id]
        self._t.threads[thread_id] = attrs.evolve(thread, latest_seq=thread.latest_seq + 1)
        return thread.latest_seq + 1

    async def lock_state(self, thread_id: uuid.UUID) -> ThreadState:
        """The thread's state."""
        # Units of the memory store run one at a time: the unit holds every lock.
        return self._t.threads[thread_id].state

    async def set_state(self, thread_id: uuid.UUID, state: ThreadState) -> Thread:
        """Open or close a thread; the thread as changed."""
        changed = attrs.evolve(self._t.threads[thread_id], state=state)
        self._t.threads[thread_id] = changed
        return changed

    async def reopen(self, thread_id: uuid.UUID) -> bool:
        """Open a done thread; True when it was done."""
        thread = self._t.threads[thread_id]
        if thread.state is not ThreadState.DONE:
            return False
        self._t.threads[thread_id] = attrs.evolve(thread, state=ThreadState.OPEN)
        return True

    async def mark_restricted(self, thread_id: uuid.UUID) -> None:
        """Remember that the thread holds a restricted message."""
        self._t.threads[thread_id] = attrs.evolve(self._t.threads[thread_id], has_restricted=True)

    async def operated_by(self, agent_id: uuid.UUID) -> list[uuid.UUID]:
        """Ids of the threads whose fixed operator is this agent, sorted."""
        return sorted(t.id for t in self._t.threads.values() if t.operator_agent_id == agent_id)

    async def target(self, thread_id: uuid.UUID) -> AccessTarget | None:
        """The thread with its channel and space, or None when unknown."""
        thread = self._t.threads.get(thread_id)
        if thread is None:
            return None
        channel = self._t.channels[thread.channel_id]
        space = self._t.spaces[channel.space_id]
        return AccessTarget(space=space, channel=channel, thread=thread)

    async def locked_target(self, thread_id: uuid.UUID) -> AccessTarget | None:
        """`target` (memory units run one at a time: the unit holds every lock)."""
        return await self.target(thread_id)

    async def post_facts(
        self,
        thread_id: uuid.UUID,
        author_id: uuid.UUID,
        client_msg_id: str,
        take: BucketTake | None = None,
    ) -> PostFacts | None:
        """Everything a message post decides on, or None for an unknown thread."""
        target = await self.target(thread_id)
        grants = await MemoryGrantRepository(self._t).for_principal(author_id)
        earlier_id = self._t.client_ids.get((author_id, client_msg_id))
        earlier = None if earlier_id is None else self._t.messages[earlier_id]
        if target is None:
            return None
        retry_after = None
        if take is not None and earlier is None:
            retry_after = await MemoryRateLimitStore(self._t).take_token(
                author_id, take.limit_class, take.now, burst=take.burst, per_minute=take.per_minute
            )
        return PostFacts(target=target, grants=grants, earlier=earlier, retry_after=retry_after)

    async def token_post_facts(
        self,
        thread_id: uuid.UUID,
        token_hash: bytes,
        client_msg_id: str,
        take: BucketTake | None = None,
    ) -> TokenPostFacts | None:
        """`post_facts` of a live token's principal, or None for an unknown or revoked token."""
        caller = await MemoryTokenRepository(self._t).resolve(token_hash)
        if caller is None:
            return None
        facts = await self.post_facts(thread_id, caller.principal.id, client_msg_id, take)
        return TokenPostFacts(caller=caller, facts=facts)

    async def history_facts(
        self, thread_id: uuid.UUID, reader_id: uuid.UUID, after_seq: int, limit: int
    ) -> HistoryFacts | None:
        """The thread, the reader's grants and a page of its history, or None when unknown."""
        target = await self.target(thread_id)
        if target is None:
            return None
        return HistoryFacts(
            target=target,
            grants=await MemoryGrantRepository(self._t).for_principal(reader_id),
            messages=visible_page(self._t, thread_id, reader_id, after_seq, limit),
        )


class MemoryGrantRepository:
    """Grants; satisfies `turnkeeper.application.ports.GrantRepository`.

    Args:
        tables: the tables of the unit of work.
    """

    def __init__(self, tables: Tables) -> None:
        self._t = tables

    async def add(self, grant: Grant) -> None:
        """Store a grant (a second one of the same pair is a retriable race)."""
        for other in self._t.grants.values():
            if (other.principal_id, other.resource_kind, other.resource_id) == (
                grant.principal_id,
                grant.resource_kind,
                grant.resource_id,
            ):
                raise RetriableConflict("grants_principal_resource_key", reason="unique_race")
        self._t.grants[grant.id] = grant

    async def get(self, grant_id: uuid.UUID) -> Grant | None:
        """The grant, or None."""
        return self._t.grants.get(grant_id)

    async def lock(self, grant_id: uuid.UUID) -> Grant | None:
        """The grant, or None (memory units run one at a time)."""
        return self._t.grants.get(grant_id)

    async def delete(self, grant_id: uuid.UUID) -> None:
        """Remove a grant."""
        self._t.grants.pop(grant_id, None)

    async def for_principal(self, principal_id: uuid.UUID) -> list[Grant]:
        """Every grant of a principal, by id."""
        return await self.list(principal_id=principal_id)

    async def prefetch(self, principal_ids: Sequence[uuid.UUID]) -> None:
        """Nothing to start: every read is immediate."""

    async def lock_pair(
        self, principal_id: uuid.UUID, resource_kind: ResourceKind, resource_id: uuid.UUID
    ) -> Grant | None:
        """The grant of a principal on a resource, or None."""
        pair = (principal_id, resource_kind, resource_id)
        return next(
            (
                g
                for g in self._t.grants.values()
                if (g.principal_id, g.resource_kind, g.resource_id) == pair
            ),
            None,
        )

    async def set_level(self, grant_id: uuid.UUID, level: Level) -> None:
        """Change the level of an existing grant."""
        self._t.grants[grant_id] = attrs.evolve(self._t.grants[grant_id], level=level)

    async def list(
        self, *, principal_id: uuid.UUID | None = None, resource_id: uuid.UUID | None = None
    ) -> list[Grant]:
        """The grants matching both filters (None: any), by id."""
        return sorted(
            (
                g
                for g in self._t.grants.values()
                if principal_id in (None, g.principal_id) and resource_id in (None, g.resource_id)
            ),
            key=lambda g: g.id,
        )
