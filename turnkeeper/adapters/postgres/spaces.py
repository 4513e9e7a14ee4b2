"""PostgreSQL repositories of spaces and channels (threads: `postgres.threads`)."""

from __future__ import annotations

import uuid

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.base import (
    MissingRow,
    PostgresRepository,
    members_by_value,
)
from turnkeeper.domain.world import (
    Channel,
    ChannelBehavior,
    ChannelType,
    OperatorMode,
    Space,
)

_CHANNEL_TYPE_OF = members_by_value(ChannelType)
_OPERATOR_MODE_OF = members_by_value(OperatorMode)


def space_of(row: q.SpaceRow) -> Space:
    """A ``spaces`` row as the domain's `Space`."""
    return Space(
        id=row.id,
        name=row.name,
        default_operator_id=row.default_operator_id,
        created_by=row.created_by,
        created_at=row.created_at,
    )


def channel_of(row: q.ChannelRow) -> Channel:
    """A ``channels`` row as the domain's `Channel`."""
    return Channel(
        id=row.id,
        space_id=row.space_id,
        name=row.name,
        type=_CHANNEL_TYPE_OF[row.type],
        operator_mode=_OPERATOR_MODE_OF[row.operator_mode],
        operator_id=row.operator_id,
        behavior=ChannelBehavior(
            free_response=row.free_response,
            allow_mentioned_agents=row.allow_mentioned_agents,
            thread_require_mention=row.thread_require_mention,
        ),
        archived=row.archived,
        main_thread_id=row.main_thread_id,
        created_at=row.created_at,
    )


class PostgresSpaceRepository(PostgresRepository):
    """Spaces; satisfies `SpaceRepository`."""

    async def add(self, space: Space) -> None:
        """Store a new space.

        Args:
            space: the space.
        """
        await q.insert_space(
            self._conn,
            id=space.id,
            name=space.name,
            default_operator_id=space.default_operator_id,
            created_by=space.created_by,
            created_at=space.created_at,
        )

    async def get(self, space_id: uuid.UUID) -> Space | None:
        """The space, or None.

        Args:
            space_id: the id.

        Returns:
            The space, or None.
        """
        row = await q.get_space(self._conn, id=space_id)
        return None if row is None else space_of(row)

    async def list_all(self) -> list[Space]:
        """Every space, by id.

        Returns:
            The spaces.
        """
        return [space_of(row) for row in await q.list_spaces(self._conn)]


class PostgresChannelRepository(PostgresRepository):
    """Channels; satisfies `ChannelRepository`."""

    async def add(self, channel: Channel) -> None:
        """Store a new channel.

        Args:
            channel: the channel (its main thread may be stored later in the same unit).
        """
        await q.insert_channel(
            self._conn,
            id=channel.id,
            space_id=channel.space_id,
            name=channel.name,
            type=channel.type.value,
            operator_mode=channel.operator_mode.value,
            operator_id=channel.operator_id,
            free_response=channel.behavior.free_response,
            allow_mentioned_agents=channel.behavior.allow_mentioned_agents,
            thread_require_mention=channel.behavior.thread_require_mention,
            archived=channel.archived,
            main_thread_id=channel.main_thread_id,
            created_at=channel.created_at,
        )

    async def get(self, channel_id: uuid.UUID) -> Channel | None:
        """The channel, or None.

        Args:
            channel_id: the id.

        Returns:
            The channel, or None.
        """
        row = await q.get_channel(self._conn, id=channel_id)
        return None if row is None else channel_of(row)

    async def lock(self, channel_id: uuid.UUID) -> Channel | None:
        """The channel under an update lock (``LockChannel``), or None.

        Args:
            channel_id: the id.

        Returns:
            The channel as committed when the lock was granted, or None.
        """
        row = await q.lock_channel(self._conn, id=channel_id)
        return None if row is None else channel_of(row)

    async def update(self, channel: Channel) -> None:
        """Store the changed attributes of a channel.

        Args:
            channel: the new value.

        Raises:
            MissingRow: when no channel has this id.
        """
        changed = await q.update_channel(
            self._conn,
            id=channel.id,
            name=channel.name,
            operator_mode=channel.operator_mode.value,
            operator_id=channel.operator_id,
            free_response=channel.behavior.free_response,
            allow_mentioned_agents=channel.behavior.allow_mentioned_agents,
            thread_require_mention=channel.behavior.thread_require_mention,
            archived=channel.archived,
            main_thread_id=channel.main_thread_id,
        )
        if changed != 1:
            raise MissingRow(f"channel {channel.id}")

    async def list_all(self) -> list[Channel]:
        """Every channel, by id.

        Returns:
            The channels.
        """
        return [channel_of(row) for row in await q.list_channels(self._conn)]
