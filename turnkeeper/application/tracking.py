"""The unit of work a use case runs on: it remembers what it wrote.

It remembers for two readers. Answers: a use case answers with the rows it stored, but
the in-transaction subscribers may change them before commit (the trigger subscriber sets
the new message's trigger_state, version + 1, and may append a run anchor, the thread's
latest_seq + 1). Every message the unit writes and every thread seq it allocates is
remembered in `WrittenRows` (cosmicpython's tracking repository), and the use case answers
with `WrittenRows.message` and `WrittenRows.thread`, the rows exactly as the commit stores
them. Telemetry: the events, runs, follow-ups and denials it wrote are noted in
`ChangeRecords` (`turnkeeper.application.recording`), which the `Transactor` reports only
after the commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import attrs

from turnkeeper.application.ports import (
    AgentFeedRepository,
    AuditLog,
    BucketTake,
    ChannelRepository,
    EventLog,
    FollowupRepository,
    FreshnessRepository,
    GrantRepository,
    HistoryFacts,
    MessageRepository,
    PostFacts,
    PrincipalRepository,
    RateLimitStore,
    RunRepository,
    SpaceRepository,
    ThreadFrontier,
    ThreadRepository,
    TokenPostFacts,
    TokenRepository,
    UnitOfWork,
    VisibleWindow,
)
from turnkeeper.application.recording import (
    ChangeRecords,
    RecordingAudit,
    RecordingEvents,
    RecordingFollowups,
    RecordingRuns,
)
from turnkeeper.application.telemetry import CommittedChanges
from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.events import NewEvent
from turnkeeper.domain.messaging import Message, TriggerState
from turnkeeper.domain.trigger_report import TriggerLinks
from turnkeeper.domain.world import Thread, ThreadState


class WrittenRows:
    """The messages and thread frontiers one unit of work wrote, each as last written."""

    def __init__(self) -> None:
        self._messages: dict[uuid.UUID, Message] = {}
        self._latest_seq: dict[uuid.UUID, int] = {}

    def note_message(self, message: Message) -> Message:
        """Remember a message as the unit stored it.

        Args:
            message: the stored message.

        Returns:
            The same message.
        """
        self._messages[message.id] = message
        return message

    def note_seq(self, thread_id: uuid.UUID, seq: int) -> int:
        """Remember a thread_seq the unit allocated.

        Args:
            thread_id: the thread.
            seq: the allocated seq.

        Returns:
            The same seq.
        """
        self._latest_seq[thread_id] = max(seq, self._latest_seq.get(thread_id, 0))
        return seq

    def wrote(self, message_id: uuid.UUID) -> bool:
        """Whether this unit wrote the message.

        Args:
            message_id: the message.

        Returns:
            True when the unit added or changed it.
        """
        return message_id in self._messages

    def message(self, message: Message) -> Message:
        """A message as this unit last wrote it.

        Args:
            message: the message as the caller holds it.

        Returns:
            The unit's last write of it (itself when the unit did not write it).
        """
        return self._messages.get(message.id, message)

    def thread(self, thread: Thread) -> Thread:
        """A thread with the latest_seq this unit allocated in it.

        Args:
            thread: the thread as the caller holds it.

        Returns:
            The thread with its frontier after the unit's appends (itself when the unit
            appended nothing to it).
        """
        seq = self._latest_seq.get(thread.id)
        if seq is None or seq <= thread.latest_seq:
            return thread
        return attrs.evolve(thread, latest_seq=seq)


class TrackedUnit:
    """An adapter's unit of work that remembers its writes (satisfies `UnitOfWork`).

    Args:
        inner: the adapter's unit.

    Attributes:
        written: the messages and thread frontiers the unit wrote so far.
    """

    def __init__(self, inner: UnitOfWork) -> None:
        self._inner = inner
        self.written = WrittenRows()
        self._records = ChangeRecords()
        self._messages = _TrackedMessages(inner.messages, self.written, self._records)
        self._threads = _TrackedThreads(inner.threads, self.written)
        self._freshness = _TrackedFreshness(inner.freshness, self.written)
        self._events = RecordingEvents(inner.events, self._records)
        self._followups = RecordingFollowups(inner.followups, self._records)
        self._audit = RecordingAudit(inner.audit, self._records)
        self._runs: RecordingRuns | None = None

    def trigger_links(self, message_id: uuid.UUID) -> TriggerLinks | None:
        """The trigger links of a message this unit wrote, without reading the store.

        Args:
            message_id: the message.

        Returns:
            The run it opened and its follow-up acceptance as this unit stored them, or
            None when the unit did not write the message (then the store answers).
        """
        if not self.written.wrote(message_id):
            return None
        return self._records.links_written(message_id)

    @property
    def changes(self) -> CommittedChanges:
        """The events, runs, follow-ups and denials written so far (read after commit)."""
        return self._records.changes

    @property
    def tokens(self) -> TokenRepository:
        """The adapter's API tokens."""
        return self._inner.tokens

    @property
    def principals(self) -> PrincipalRepository:
        """The adapter's principals."""
        return self._inner.principals

    @property
    def spaces(self) -> SpaceRepository:
        """The adapter's spaces."""
        return self._inner.spaces

    @property
    def channels(self) -> ChannelRepository:
        """The adapter's channels."""
        return self._inner.channels

    @property
    def threads(self) -> ThreadRepository:
        """The threads, remembering every seq allocated."""
        return self._threads

    @property
    def grants(self) -> GrantRepository:
        """The adapter's grants."""
        return self._inner.grants

    @property
    def messages(self) -> MessageRepository:
        """The messages, remembering every message written."""
        return self._messages

    @property
    def events(self) -> EventLog:
        """The event log, noting appends."""
        return self._events

    @property
    def audit(self) -> AuditLog:
        """The audit log, noting denials."""
        return self._audit

    @property
    def buckets(self) -> RateLimitStore:
        """The adapter's rate-limit buckets."""
        return self._inner.buckets

    @property
    def runs(self) -> RunRepository:
        """The runs, noting adds and updates."""
        # Built on first use: a unit whose adapter has no runs repository wired fails
        # only when a use case needs one, as the unit itself would.
        if self._runs is None:
            self._runs = RecordingRuns(self._inner.runs, self._records)
        return self._runs

    @property
    def agent_feed(self) -> AgentFeedRepository:
        """The adapter's agent feeds."""
        return self._inner.agent_feed

    @property
    def followups(self) -> FollowupRepository:
        """The follow-ups, noting outcomes."""
        return self._followups

    @property
    def freshness(self) -> FreshnessRepository:
        """The freshness gate, remembering every seq its compare-and-set allocated."""
        return self._freshness

    async def commit(self) -> None:
        """Commit the adapter's unit."""
        await self._inner.commit()


class _TrackedMessages:
    def __init__(
        self, inner: MessageRepository, written: WrittenRows, records: ChangeRecords
    ) -> None:
        self._inner = inner
        self._written = written
        self._records = records

    async def add(self, message: Message, created: NewEvent | None = None) -> None:
        await self._inner.add(message, created)
        self._written.note_message(message)
        if created is not None:
            # Appended with the message: noted as `RecordingEvents` notes an append.
            self._records.events.append(created)

    async def get(self, message_id: uuid.UUID) -> Message | None:
        return await self._inner.get(message_id)

    async def prefetch(self, message_id: uuid.UUID) -> None:
        await self._inner.prefetch(message_id)

    async def by_client_id(self, author_id: uuid.UUID, client_msg_id: str) -> Message | None:
        return await self._inner.by_client_id(author_id, client_msg_id)

    async def list_visible(
        self, thread_id: uuid.UUID, reader_id: uuid.UUID, after_seq: int, limit: int
    ) -> list[Message]:
        return await self._inner.list_visible(thread_id, reader_id, after_seq, limit)

    async def set_trigger_state(
        self, message_id: uuid.UUID, state: TriggerState, reason: str | None
    ) -> Message:
        changed = await self._inner.set_trigger_state(message_id, state, reason)
        return self._written.note_message(changed)

    async def set_trigger_states(
        self, message_ids: Sequence[uuid.UUID], state: TriggerState, reason: str | None
    ) -> list[Message]:
        changed = await self._inner.set_trigger_states(message_ids, state, reason)
        return [self._written.note_message(m) for m in changed]


class _TrackedThreads:
    def __init__(self, inner: ThreadRepository, written: WrittenRows) -> None:
        self._inner = inner
        self._written = written

    async def add(self, thread: Thread) -> None:
        await self._inner.add(thread)

    async def get(self, thread_id: uuid.UUID) -> Thread | None:
        return await self._inner.get(thread_id)

    async def allocate_seq(self, thread_id: uuid.UUID) -> int:
        return self._written.note_seq(thread_id, await self._inner.allocate_seq(thread_id))

    async def lock_state(self, thread_id: uuid.UUID) -> ThreadState:
        return await self._inner.lock_state(thread_id)

    async def set_state(self, thread_id: uuid.UUID, state: ThreadState) -> Thread:
        return await self._inner.set_state(thread_id, state)

    async def reopen(self, thread_id: uuid.UUID) -> bool:
        return await self._inner.reopen(thread_id)

    async def mark_restricted(self, thread_id: uuid.UUID) -> None:
        await self._inner.mark_restricted(thread_id)

    async def operated_by(self, agent_id: uuid.UUID) -> list[uuid.UUID]:
        return await self._inner.operated_by(agent_id)

    async def target(self, thread_id: uuid.UUID) -> AccessTarget | None:
        return await self._inner.target(thread_id)

    async def locked_target(self, thread_id: uuid.UUID) -> AccessTarget | None:
        return await self._inner.locked_target(thread_id)

    async def post_facts(
        self,
        thread_id: uuid.UUID,
        author_id: uuid.UUID,
        client_msg_id: str,
        take: BucketTake | None = None,
    ) -> PostFacts | None:
        return await self._inner.post_facts(thread_id, author_id, client_msg_id, take)

    async def token_post_facts(
        self,
        thread_id: uuid.UUID,
        token_hash: bytes,
        client_msg_id: str,
        take: BucketTake | None = None,
    ) -> TokenPostFacts | None:
        return await self._inner.token_post_facts(thread_id, token_hash, client_msg_id, take)

    async def history_facts(
        self, thread_id: uuid.UUID, reader_id: uuid.UUID, after_seq: int, limit: int
    ) -> HistoryFacts | None:
        return await self._inner.history_facts(thread_id, reader_id, after_seq, limit)


class _TrackedFreshness:
    def __init__(self, inner: FreshnessRepository, written: WrittenRows) -> None:
        self._inner = inner
        self._written = written

    async def compare_and_allocate(self, thread_id: uuid.UUID, seen_seq: int) -> int | None:
        seq = await self._inner.compare_and_allocate(thread_id, seen_seq)
        return None if seq is None else self._written.note_seq(thread_id, seq)

    async def frontier(self, thread_id: uuid.UUID) -> ThreadFrontier:
        return await self._inner.frontier(thread_id)

    async def newest_visible(
        self,
        thread_id: uuid.UUID,
        viewer_id: uuid.UUID,
        *,
        after_seq: int,
        through_seq: int,
        batch: int,
    ) -> VisibleWindow:
        return await self._inner.newest_visible(
            thread_id, viewer_id, after_seq=after_seq, through_seq=through_seq, batch=batch
        )


__all__ = ["TrackedUnit", "WrittenRows"]
