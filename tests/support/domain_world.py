"""The test world of DESIGN section 11, built as plain domain values (no I/O).

People Alex, Sam and Robin (Robin is the owner); agents Lotse (organization, default
operator of Support), Texter (organization, operator of Marketing) and Assistent
(personal, holder Robin, operator of Research). Support has text channels Allgemein and
Eskalation and forums Reports (operator mode none, write grant for Lotse) and Bulletin
(inherits Lotse); Marketing has Kampagnen and forum Ideas; Research has Notizen.

Every id is fixed and every time is `T0`, so that tests can name values and compare them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import attrs

from turnkeeper.domain.authorization import AccessTarget
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

#: The one time every value of the test world was created at.
T0 = datetime(2025, 3, 1, 9, 0, 0, tzinfo=UTC)


def fixed_id(group: int, number: int) -> uuid.UUID:
    """A readable, fixed UUIDv7-shaped id: group 1 principals, 2 spaces, 3 channels ..."""
    return uuid.UUID(f"00000000-0000-7{group:03x}-8000-{number:012x}")


def _person(number: int, handle: str, *, owner: bool = False) -> Principal:
    return Principal(
        id=fixed_id(1, number),
        kind=PrincipalKind.PERSON,
        handle=handle,
        display_name=f"{handle.capitalize()} <{handle}@example.com>",
        is_owner=owner,
        created_at=T0,
    )


def _agent(
    number: int, handle: str, billing: BillingMode, holder: uuid.UUID | None = None
) -> Principal:
    return Principal(
        id=fixed_id(1, number),
        kind=PrincipalKind.AGENT,
        handle=handle,
        display_name=handle.capitalize(),
        billing_mode=billing,
        holder_id=holder,
        created_at=T0,
    )


@attrs.frozen(kw_only=True)
class World:
    """The test world: every value by its name, and the grants.

    Attributes:
        principals: by handle (``alex``, ``sam``, ``robin``, ``lotse``, ``texter``,
            ``assistent``).
        spaces: by name.
        channels: by name.
        threads: by key ``<Channel>/<name>``; text channels have ``<Channel>/main``.
        grants: every grant of the world.
    """

    principals: Mapping[str, Principal]
    spaces: Mapping[str, Space]
    channels: Mapping[str, Channel]
    threads: Mapping[str, Thread]
    grants: tuple[Grant, ...]

    def principal(self, handle: str) -> Principal:
        """The principal with this handle."""
        return self.principals[handle]

    def channel(self, name: str) -> Channel:
        """The channel with this name."""
        return self.channels[name]

    def thread(self, key: str) -> Thread:
        """The thread with key ``<Channel>/<name>``."""
        return self.threads[key]

    def space_of(self, channel: Channel) -> Space:
        """The space a channel lives in."""
        return next(s for s in self.spaces.values() if s.id == channel.space_id)

    def target(self, where: str) -> AccessTarget:
        """The access target for ``<Channel>`` or ``<Channel>/<thread>``."""
        channel_name, _, thread_name = where.partition("/")
        channel = self.channels[channel_name]
        thread = self.threads[where] if thread_name else None
        return AccessTarget(space=self.space_of(channel), channel=channel, thread=thread)

    def grants_of(self, handle: str) -> tuple[Grant, ...]:
        """The grants held by one principal."""
        principal_id = self.principals[handle].id
        return tuple(g for g in self.grants if g.principal_id == principal_id)

    def with_channel(self, name: str, **changes: Any) -> World:
        """The world with one channel changed through `attrs.evolve`."""
        channels = dict(self.channels)
        channels[name] = attrs.evolve(channels[name], **changes)
        return attrs.evolve(self, channels=channels)

    def with_grants(self, grants: Iterable[Grant]) -> World:
        """The world with more grants."""
        return attrs.evolve(self, grants=(*self.grants, *grants))

    def without_grants_of(self, handle: str) -> World:
        """The world where one principal holds no grant at all."""
        principal_id = self.principals[handle].id
        return attrs.evolve(
            self, grants=tuple(g for g in self.grants if g.principal_id != principal_id)
        )

    def grant(self, handle: str, resource: str, level: Level, number: int = 99) -> Grant:
        """A new grant of `level` to `handle` on the space or channel named `resource`."""
        if resource in self.spaces:
            kind, resource_id = ResourceKind.SPACE, self.spaces[resource].id
        else:
            kind, resource_id = ResourceKind.CHANNEL, self.channels[resource].id
        return Grant(
            id=fixed_id(6, number),
            principal_id=self.principals[handle].id,
            resource_kind=kind,
            resource_id=resource_id,
            level=level,
            created_at=T0,
        )


def build_world() -> World:
    """Build the DESIGN section 11 test world.

    Returns:
        The world; every call returns equal values.
    """
    robin = _person(1, "robin", owner=True)
    alex = _person(2, "alex")
    sam = _person(3, "sam")
    lotse = _agent(4, "lotse", BillingMode.ORGANIZATION)
    texter = _agent(5, "texter", BillingMode.ORGANIZATION)
    assistent = _agent(6, "assistent", BillingMode.PERSONAL, holder=robin.id)
    principals = {p.handle: p for p in (robin, alex, sam, lotse, texter, assistent)}

    def space(number: int, name: str, operator: Principal) -> Space:
        return Space(
            id=fixed_id(2, number),
            name=name,
            default_operator_id=operator.id,
            created_by=robin.id,
            created_at=T0,
        )

    support = space(1, "Support", lotse)
    marketing = space(2, "Marketing", texter)
    research = space(3, "Research", assistent)
    spaces = {s.name: s for s in (support, marketing, research)}

    def channel(
        number: int,
        in_space: Space,
        name: str,
        kind: ChannelType,
        *,
        mode: OperatorMode = OperatorMode.INHERIT,
        behavior: ChannelBehavior | None = None,
    ) -> Channel:
        return Channel(
            id=fixed_id(3, number),
            space_id=in_space.id,
            name=name,
            type=kind,
            operator_mode=mode,
            behavior=behavior or ChannelBehavior(),
            main_thread_id=fixed_id(4, number) if kind is ChannelType.TEXT else None,
            created_at=T0,
        )

    text, forum = ChannelType.TEXT, ChannelType.FORUM
    channel_list = [
        channel(
            1,
            support,
            "Allgemein",
            text,
            behavior=ChannelBehavior(free_response=True, allow_mentioned_agents=True),
        ),
        channel(
            2,
            support,
            "Eskalation",
            text,
            behavior=ChannelBehavior(thread_require_mention=True, allow_mentioned_agents=True),
        ),
        channel(3, support, "Reports", forum, mode=OperatorMode.NONE),
        channel(4, support, "Bulletin", forum),
        channel(5, marketing, "Kampagnen", text),
        channel(6, marketing, "Ideas", forum),
        channel(7, research, "Notizen", text),
    ]
    channels = {c.name: c for c in channel_list}

    threads: dict[str, Thread] = {}
    for c in channel_list:
        if c.main_thread_id is not None:
            threads[f"{c.name}/main"] = Thread(
                id=c.main_thread_id,
                channel_id=c.id,
                is_main=True,
                created_by=robin.id,
                created_at=T0,
            )

    def thread(number: int, key: str, creator: Principal, operator: Principal | None) -> None:
        channel_name = key.partition("/")[0]
        threads[key] = Thread(
            id=fixed_id(5, number),
            channel_id=channels[channel_name].id,
            title=key.partition("/")[2],
            operator_agent_id=operator.id if operator else None,
            created_by=creator.id,
            created_at=T0,
        )

    # Threads take the channel's effective operator at creation as their fixed operator.
    thread(1, "Allgemein/side", alex, lotse)
    thread(2, "Eskalation/case", alex, lotse)
    thread(3, "Reports/weekly", lotse, None)
    thread(4, "Bulletin/post", robin, lotse)
    thread(5, "Ideas/idea", sam, texter)
    # Created while Kampagnen was operated by Lotse (operator mode agent), since changed.
    thread(6, "Kampagnen/legacy", robin, lotse)
    thread(7, "Notizen/todo", robin, assistent)

    def grant(number: int, who: Principal, kind: ResourceKind, rid: uuid.UUID, lvl: Level) -> Grant:
        return Grant(
            id=fixed_id(6, number),
            principal_id=who.id,
            resource_kind=kind,
            resource_id=rid,
            level=lvl,
            created_at=T0,
        )

    space_kind, channel_kind = ResourceKind.SPACE, ResourceKind.CHANNEL
    grants = (
        grant(1, alex, space_kind, support.id, Level.TRIGGER),
        grant(2, sam, space_kind, marketing.id, Level.TRIGGER),
        grant(3, sam, channel_kind, channels["Allgemein"].id, Level.READ),
        grant(4, texter, channel_kind, channels["Allgemein"].id, Level.WRITE),
        grant(5, lotse, channel_kind, channels["Reports"].id, Level.WRITE),
    )
    return World(
        principals=principals, spaces=spaces, channels=channels, threads=threads, grants=grants
    )
