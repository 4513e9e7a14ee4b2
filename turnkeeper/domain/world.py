"""The world turnkeeper keeps turns in: principals, spaces, channels, threads, grants.

All values are frozen attrs classes; a change is made with `attrs.evolve`.
"""

from __future__ import annotations

import enum
import uuid
from datetime import datetime

import attrs


class PrincipalKind(enum.StrEnum):
    """Who acts: a person, an agent, or an app (reserved)."""

    PERSON = "person"
    AGENT = "agent"
    APP = "app"


class BillingMode(enum.StrEnum):
    """How an agent is paid for: by the organization or by one person (its holder)."""

    ORGANIZATION = "organization"
    PERSONAL = "personal"


class Level(enum.IntEnum):
    """Access levels, ordered: trigger includes write, write includes read."""

    NONE = 0
    READ = 1
    WRITE = 2
    TRIGGER = 3

    @property
    def label(self) -> str:
        """The lower-case wire name of the level (``read``, ``write``, ``trigger``)."""
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Level:
        """Parse a wire name into a level.

        Args:
            text: ``read``, ``write`` or ``trigger``.

        Returns:
            The matching level.

        Raises:
            ValueError: for any other text.
        """
        try:
            return cls[text.upper()]
        except KeyError:
            raise ValueError(text) from None


#: Agents never get more than this from grants: they write, they never trigger.
AGENT_GRANT_CAP = Level.WRITE


class ChannelType(enum.StrEnum):
    """A text channel has a main thread; a forum has only threads."""

    TEXT = "text"
    FORUM = "forum"


class OperatorMode(enum.StrEnum):
    """How a channel finds its operator agent."""

    INHERIT = "inherit"
    AGENT = "agent"
    NONE = "none"


class ThreadState(enum.StrEnum):
    """A thread is open, or done (closed) until the next message reopens it."""

    OPEN = "open"
    DONE = "done"


class TitleSource(enum.StrEnum):
    """Who gave a thread its title: a person, or an agent (auto)."""

    HUMAN = "human"
    AUTO = "auto"


class ResourceKind(enum.StrEnum):
    """What a grant is attached to."""

    SPACE = "space"
    CHANNEL = "channel"


@attrs.frozen(kw_only=True)
class Principal:
    """A person, agent or app that holds API tokens and acts.

    Attributes:
        id: UUIDv7 of the principal.
        kind: person, agent or app.
        handle: unique short name (``alex``, ``lotse``).
        display_name: free text shown to people.
        is_owner: the owner role administers every space.
        billing_mode: agents only: organization or personal.
        holder_id: personal agents only: the one person who may trigger it.
        supports_followups: agents only: the owner's configuration (None means allowed).
        enabled: a disabled agent is not reachable.
        reported_followups: agents only: the capability reported by heartbeat.
        created_at: creation time.
    """

    id: uuid.UUID
    kind: PrincipalKind
    handle: str
    display_name: str = ""
    is_owner: bool = False
    billing_mode: BillingMode | None = None
    holder_id: uuid.UUID | None = None
    supports_followups: bool | None = None
    enabled: bool = True
    reported_followups: str | None = None
    created_at: datetime

    @property
    def is_agent(self) -> bool:
        """True for agents."""
        return self.kind is PrincipalKind.AGENT


@attrs.frozen(kw_only=True)
class Space:
    """The top of the tree: channels live in a space.

    Attributes:
        id: UUIDv7.
        name: display name.
        default_operator_id: the agent channels in ``inherit`` mode take as operator.
        created_by: the principal that created the space.
        created_at: creation time.
    """

    id: uuid.UUID
    name: str
    default_operator_id: uuid.UUID | None = None
    created_by: uuid.UUID
    created_at: datetime


@attrs.frozen(kw_only=True)
class ChannelBehavior:
    """Switches of a channel; all false on a new channel.

    Attributes:
        free_response: the operator answers every human message in the main thread.
        allow_mentioned_agents: guest agents with write may be triggered by mention.
        thread_require_mention: in threads the operator answers only when mentioned.
    """

    free_response: bool = False
    allow_mentioned_agents: bool = False
    thread_require_mention: bool = False


@attrs.frozen(kw_only=True)
class Channel:
    """A text channel or forum in a space.

    Attributes:
        id: UUIDv7.
        space_id: the owning space.
        name: display name.
        type: text or forum.
        operator_mode: inherit, agent or none.
        operator_id: the explicit operator for mode ``agent``.
        behavior: the channel's switches.
        archived: read-only for everyone, operators included.
        main_thread_id: text channels only.
        created_at: creation time.
    """

    id: uuid.UUID
    space_id: uuid.UUID
    name: str
    type: ChannelType
    operator_mode: OperatorMode = OperatorMode.INHERIT
    operator_id: uuid.UUID | None = None
    behavior: ChannelBehavior = attrs.field(factory=ChannelBehavior)
    archived: bool = False
    main_thread_id: uuid.UUID | None = None
    created_at: datetime


def effective_operator(channel: Channel, space: Space) -> uuid.UUID | None:
    """The agent that operates a channel right now.

    Args:
        channel: the channel.
        space: its space (for ``inherit``).

    Returns:
        The operator's id, or None when the channel has none.
    """
    if channel.operator_mode is OperatorMode.AGENT:
        return channel.operator_id
    if channel.operator_mode is OperatorMode.INHERIT:
        return space.default_operator_id
    return None


def thread_operator(thread: Thread, channel: Channel, space: Space) -> uuid.UUID | None:
    """The agent that operates a thread right now.

    A main thread follows its channel's current operator; any other thread keeps the
    operator it was created with.

    Args:
        thread: the thread.
        channel: its channel.
        space: the channel's space.

    Returns:
        The operator's id, or None when the thread has none.
    """
    return effective_operator(channel, space) if thread.is_main else thread.operator_agent_id


@attrs.frozen(kw_only=True)
class Thread:
    """A thread of messages in a channel.

    Attributes:
        id: UUIDv7.
        channel_id: the owning channel.
        is_main: the main thread of a text channel (follows the channel's operator).
        title: optional title.
        title_source: human, or auto when an agent set it.
        operator_agent_id: fixed operator at creation (never set on a main thread).
        state: open or done.
        latest_seq: the raw frontier: thread_seq of the newest message.
        has_restricted: true once a message with ``restricted_to`` was stored.
        created_by: the creating principal.
        created_at: creation time.
    """

    id: uuid.UUID
    channel_id: uuid.UUID
    is_main: bool = False
    title: str | None = None
    title_source: TitleSource = TitleSource.HUMAN
    operator_agent_id: uuid.UUID | None = None
    state: ThreadState = ThreadState.OPEN
    latest_seq: int = 0
    has_restricted: bool = False
    created_by: uuid.UUID
    created_at: datetime

    @property
    def target_key(self) -> str:
        """The canonical key of the thread, the scope of the freshness gate."""
        return thread_target_key(self.id)


def thread_target_key(thread_id: uuid.UUID) -> str:
    """The canonical target key of a thread.

    Args:
        thread_id: the thread.

    Returns:
        ``thread:<uuid>`` in lower case.
    """
    return f"thread:{thread_id}"


@attrs.frozen(kw_only=True)
class Grant:
    """A level granted to a principal on a space (inherited by channels) or a channel.

    Attributes:
        id: UUIDv7.
        principal_id: who receives the level.
        resource_kind: space or channel.
        resource_id: the space or channel.
        level: read, write or trigger (agents are capped at write when evaluated).
        created_at: creation time.
    """

    id: uuid.UUID
    principal_id: uuid.UUID
    resource_kind: ResourceKind
    resource_id: uuid.UUID
    level: Level
    created_at: datetime
