"""The runtime side of the freshness gate: what an agent session knows of each target.

An agent session remembers, for every target (thread) it writes to, two frontiers that
the gate keeps apart (DESIGN section 9, seed message-freshness-gate section 4):

- the **observed** frontier: the highest thread sequence the session has surfaced to the
  runtime (a message handed to it, a history page covering through a seq, or its own
  accepted message). A send carries it as ``seen_up_to_seq``; it is a high-water mark and
  never decreases.
- the **latest-known** frontier and its **needs-refresh** hint: the highest sequence the
  session knows exists (from a held answer or a delivery that is pending and not surfaced
  yet). It never moves the observed frontier. While it is ahead of the observed frontier
  a send is held locally, without a request, until the runtime has refreshed.

Event (delivery) sequences are a different number: they belong to the ack cursor of the
event feed and never enter this module. Long content goes out as a chunked logical send
(`turnkeeper.domain.logical_sends`).

Everything here is pure: values in, values out. `SessionFreshnessState` is the one
mutable holder (see its docstring for why).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping

import attrs

#: Refresh instruction for a held send, free of sequences, keys and ids (seed section 6).
HELD_GUIDANCE = (
    "New messages arrived in this thread after the ones you have read, so your message "
    "was not sent. Read the thread's history, then send again only if a reply is still "
    "needed."
)


class SendState(enum.StrEnum):
    """The answer states of one send (the ``state`` member of POST /v1/agent/send)."""

    SENT = "sent"
    ALREADY_SENT = "already_sent"
    HELD = "held"


def not_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    """An attrs validator: refuse a negative count or seq.

    Raises:
        ValueError: for a value below 0.
    """
    if value < 0:
        raise ValueError(f"{attribute.name} must not be negative")


def require_not_negative(name: str, value: int) -> None:
    """Refuse a negative argument of a freshness function.

    Args:
        name: the argument's name (for the message).
        value: its value.

    Raises:
        ValueError: for a value below 0.
    """
    if value < 0:
        raise ValueError(f"{name} must not be negative")


@attrs.frozen(kw_only=True)
class MessageFreshnessFrontier:
    """What a session knows about one target.

    Invariant: ``observed_seq <= latest_known_seq``; ``needs_refresh_until_seq`` is 0 (no
    refresh needed) or above ``observed_seq`` and at most ``latest_known_seq``.

    Attributes:
        target_key: the canonical key of the target (``target_key`` of the server).
        observed_seq: high-water mark of what the session has surfaced to the runtime;
            sent as ``seen_up_to_seq``.
        latest_known_seq: the highest seq the session knows exists in the target.
        needs_refresh_until_seq: the runtime must surface history through this seq
            before a send can pass; 0 when nothing is outstanding.
        source_message_id: id of the message that set the observed high-water mark, when
            known; sent as the default ``source_message_ids``.
    """

    target_key: str
    observed_seq: int = attrs.field(default=0, validator=not_negative)
    latest_known_seq: int = attrs.field(default=0, validator=not_negative)
    needs_refresh_until_seq: int = attrs.field(default=0, validator=not_negative)
    source_message_id: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.latest_known_seq < self.observed_seq:
            raise ValueError("latest_known_seq must not be below observed_seq")
        if self.needs_refresh_until_seq and not (
            self.observed_seq < self.needs_refresh_until_seq <= self.latest_known_seq
        ):
            raise ValueError("needs_refresh_until_seq must lie in (observed, latest_known]")


@attrs.frozen(kw_only=True)
class LocalVerdict:
    """The local decision on a send before any request.

    Attributes:
        target_key: the target.
        hold: True when the send must not be made: the session knows of messages after
            ``seen_up_to_seq`` that the runtime has not surfaced.
        seen_up_to_seq: the frontier the send would carry.
        latest_known_seq: the latest-known frontier of the target.
        needs_refresh_until_seq: through which seq the runtime must refresh (0 when the
            send passes).
    """

    target_key: str
    hold: bool
    seen_up_to_seq: int
    latest_known_seq: int
    needs_refresh_until_seq: int


def surface(
    frontier: MessageFreshnessFrontier, target_seq: int, message_id: str | None = None
) -> MessageFreshnessFrontier:
    """Record that the runtime has surfaced the target through ``target_seq``.

    The observed frontier is a high-water mark: a lower seq changes nothing. The
    latest-known frontier follows it up (a surfaced message is known to exist), and a
    needs-refresh hint is cleared once the surfaced seq covers it.

    Args:
        frontier: the current frontier.
        target_seq: thread seq through which messages were surfaced (a message's seq, a
            history page's ``covers_through_seq`` or the accepted seq of an own message).
        message_id: the id of the message at ``target_seq``, when there is one.

    Returns:
        The new frontier.

    Raises:
        ValueError: for a negative seq.
    """
    require_not_negative("target_seq", target_seq)
    if target_seq <= frontier.observed_seq:
        return frontier
    needs_refresh = frontier.needs_refresh_until_seq
    if needs_refresh <= target_seq:
        needs_refresh = 0
    return attrs.evolve(
        frontier,
        observed_seq=target_seq,
        latest_known_seq=max(frontier.latest_known_seq, target_seq),
        needs_refresh_until_seq=needs_refresh,
        source_message_id=message_id,
    )


def surface_page(
    frontier: MessageFreshnessFrontier,
    after_seq: int,
    covers_through_seq: int,
    message_id: str | None = None,
) -> MessageFreshnessFrontier:
    """Record a history page read after ``after_seq`` that covers ``covers_through_seq``.

    The page shows the messages after ``after_seq`` only. It surfaces the target through
    ``covers_through_seq`` when it joins what was surfaced before (``after_seq`` at or
    below the observed frontier); after a gap it surfaces nothing: the messages of the
    gap were never in front of the runtime, and counting them as seen would let an
    answer that ignores them through the gate.

    Args:
        frontier: the current frontier.
        after_seq: the seq the page was read after.
        covers_through_seq: the page's ``covers_through_seq``.
        message_id: the id of the message at ``covers_through_seq``, when there is one.

    Returns:
        The new frontier.

    Raises:
        ValueError: for a negative seq.
    """
    require_not_negative("after_seq", after_seq)
    if after_seq > frontier.observed_seq:
        return frontier
    return surface(frontier, covers_through_seq, message_id)


def note_latest(
    frontier: MessageFreshnessFrontier,
    latest_seq: int,
    needs_refresh_until_seq: int | None = None,
) -> MessageFreshnessFrontier:
    """Record a latest-known seq (a held answer, a pending delivery) without surfacing it.

    The observed frontier never moves here. A seq at or below the observed frontier is
    stale news and changes nothing.

    Args:
        frontier: the current frontier.
        latest_seq: the seq known to exist.
        needs_refresh_until_seq: through which seq the runtime must refresh; when None,
            ``latest_seq``.

    Returns:
        The new frontier.

    Raises:
        ValueError: for a negative seq.
    """
    require_not_negative("latest_seq", latest_seq)
    refresh_to = latest_seq if needs_refresh_until_seq is None else needs_refresh_until_seq
    require_not_negative("needs_refresh_until_seq", refresh_to)
    latest_known = max(frontier.latest_known_seq, latest_seq, refresh_to)
    needs_refresh = frontier.needs_refresh_until_seq
    if refresh_to > frontier.observed_seq:
        needs_refresh = max(needs_refresh, refresh_to)
    return attrs.evolve(
        frontier, latest_known_seq=latest_known, needs_refresh_until_seq=needs_refresh
    )


def verdict(frontier: MessageFreshnessFrontier, seen_up_to_seq: int | None = None) -> LocalVerdict:
    """Decide locally whether a send may be made.

    Args:
        frontier: the target's frontier.
        seen_up_to_seq: the frontier the send carries when it is not the observed one
            (a chunk of a logical send carries the previous chunk's accepted seq);
            None for the observed frontier.

    Returns:
        A hold exactly when the latest-known frontier is ahead of the frontier the send
        carries; the refresh it then needs runs through the latest-known seq.
    """
    seen = frontier.observed_seq if seen_up_to_seq is None else seen_up_to_seq
    require_not_negative("seen_up_to_seq", seen)
    # needs_refresh_until_seq never exceeds latest_known_seq (frontier invariant), so
    # the latest-known frontier alone decides.
    hold = frontier.latest_known_seq > seen
    return LocalVerdict(
        target_key=frontier.target_key,
        hold=hold,
        seen_up_to_seq=seen,
        latest_known_seq=frontier.latest_known_seq,
        needs_refresh_until_seq=frontier.latest_known_seq if hold else 0,
    )


class SessionFreshnessState:
    """The frontiers of one agent session, by target key.

    This is the one mutable holder of the module, on purpose: one session runs several
    tool calls at once (a send and a history read in separate tasks), and each update is
    a read-modify-write of one target's frontier. Keeping the frontiers in a single owner
    whose methods apply the pure rules above and store the result without yielding makes
    every update atomic under asyncio; handing out frozen snapshots to each task instead
    would let one task overwrite another's newer frontier with a stale copy. The values
    it stores and returns are the frozen `MessageFreshnessFrontier`.
    """

    def __init__(self, frontiers: Mapping[str, MessageFreshnessFrontier] | None = None) -> None:
        self._by_target: dict[str, MessageFreshnessFrontier] = dict(frontiers or {})

    def __repr__(self) -> str:
        return f"SessionFreshnessState({self._by_target!r})"

    def __iter__(self) -> Iterator[MessageFreshnessFrontier]:
        return iter(list(self._by_target.values()))

    def frontier(self, target_key: str) -> MessageFreshnessFrontier:
        """The frontier of a target (all zero for a target never seen).

        Args:
            target_key: the canonical target key.

        Returns:
            The frozen frontier.
        """
        if not target_key:
            raise ValueError("target_key must not be empty")
        return self._by_target.get(target_key) or MessageFreshnessFrontier(target_key=target_key)

    def _store(self, frontier: MessageFreshnessFrontier) -> MessageFreshnessFrontier:
        self._by_target[frontier.target_key] = frontier
        return frontier

    def mark_surfaced(
        self, target_key: str, target_seq: int, message_id: str | None = None
    ) -> MessageFreshnessFrontier:
        """Advance the observed frontier (high-water mark) after a runtime-visible surface.

        Call it only once the messages are in front of the runtime: a delivered message, a
        history page returned to it (``covers_through_seq``). A search result or a
        delivery still pending in the runtime is not a surface.

        Args:
            target_key: the canonical target key.
            target_seq: seq through which the target was surfaced.
            message_id: id of the message at ``target_seq``, when known.

        Returns:
            The stored frontier.
        """
        return self._store(surface(self.frontier(target_key), target_seq, message_id))

    def mark_page_read(
        self,
        target_key: str,
        after_seq: int,
        covers_through_seq: int,
        message_id: str | None = None,
    ) -> MessageFreshnessFrontier:
        """Record a history page returned to the runtime (`surface_page`).

        Args:
            target_key: the canonical target key.
            after_seq: the seq the page was read after.
            covers_through_seq: the page's ``covers_through_seq``.
            message_id: id of the message at ``covers_through_seq``, when known.

        Returns:
            The stored frontier.
        """
        return self._store(
            surface_page(self.frontier(target_key), after_seq, covers_through_seq, message_id)
        )

    def mark_held(
        self,
        target_key: str,
        latest_seq: int,
        needs_refresh_until_seq: int | None = None,
    ) -> MessageFreshnessFrontier:
        """Record a held answer: latest-known and needs-refresh, the observed seq unchanged.

        Args:
            target_key: the canonical target key.
            latest_seq: ``latest_seq`` of the held answer.
            needs_refresh_until_seq: ``needs_refresh_until_seq`` of the answer, when given.

        Returns:
            The stored frontier.
        """
        return self._store(
            note_latest(self.frontier(target_key), latest_seq, needs_refresh_until_seq)
        )

    def mark_pending(self, target_key: str, target_seq: int) -> MessageFreshnessFrontier:
        """Record a delivery accepted by the runtime but not surfaced yet.

        It is a latest-known hint like a held answer: a send prepared before the
        runtime surfaces the message is held locally. The surface itself
        (`mark_surfaced`) comes with the runtime's surfaced acknowledgement.

        Args:
            target_key: the canonical target key.
            target_seq: the seq of the pending message.

        Returns:
            The stored frontier.
        """
        return self._store(note_latest(self.frontier(target_key), target_seq))

    def mark_sent(
        self, target_key: str, accepted_seq: int, message_id: str | None = None
    ) -> MessageFreshnessFrontier:
        """Record an own message the server accepted (``sent`` or ``already_sent``).

        The runtime wrote it, so it is surfaced: the observed frontier advances to it.

        Args:
            target_key: the canonical target key.
            accepted_seq: the accepted seq of the answer.
            message_id: the message's id.

        Returns:
            The stored frontier.
        """
        return self.mark_surfaced(target_key, accepted_seq, message_id)

    def record_answer(
        self,
        target_key: str,
        state: SendState,
        *,
        accepted_seq: int | None = None,
        latest_seq: int | None = None,
        needs_refresh_until_seq: int | None = None,
        message_id: str | None = None,
    ) -> MessageFreshnessFrontier:
        """Apply a send answer to the frontier (seed section 4.3, steps 8 and 9).

        Args:
            target_key: ``target_key`` of the answer.
            state: ``state`` of the answer.
            accepted_seq: ``accepted_seq`` (sent and already_sent).
            latest_seq: ``latest_seq`` (required for held).
            needs_refresh_until_seq: ``needs_refresh_until_seq`` of a held answer.
            message_id: ``message_id`` of an accepted answer.

        Returns:
            The stored frontier.

        Raises:
            ValueError: when the member the state needs is missing.
        """
        if state is SendState.HELD:
            if latest_seq is None:
                raise ValueError("a held answer needs latest_seq")
            return self.mark_held(target_key, latest_seq, needs_refresh_until_seq)
        if accepted_seq is None:
            raise ValueError(f"a {state} answer needs accepted_seq")
        return self.mark_sent(target_key, accepted_seq, message_id)

    def check_send(self, target_key: str, seen_up_to_seq: int | None = None) -> LocalVerdict:
        """Decide locally, before any request, whether a send to a target may be made.

        Args:
            target_key: the canonical target key.
            seen_up_to_seq: the frontier the send carries when it is not the observed
                one (a chunk of a logical send); None for the observed frontier.

        Returns:
            The verdict: a hold exactly when the latest-known frontier is ahead of the
            frontier the send carries.
        """
        return verdict(self.frontier(target_key), seen_up_to_seq)


__all__ = [
    "HELD_GUIDANCE",
    "LocalVerdict",
    "MessageFreshnessFrontier",
    "SendState",
    "SessionFreshnessState",
    "not_negative",
    "note_latest",
    "require_not_negative",
    "surface",
    "surface_page",
    "verdict",
]
