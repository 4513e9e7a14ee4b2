"""The runtime side of the freshness gate: per-target frontiers and chunked logical sends.

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
event feed and never enter this module.

Long content goes out as a logical send of several messages (chunks) with client ids
``logical_id:index``; each chunk's ``seen_up_to_seq`` is the accepted seq of the chunk
before, and a retry of the same logical send replays the accepted chunks (the server
answers ``already_sent``) and resumes with ``max(refreshed observed, last accepted)``.

Everything here is pure: values in, values out. `SessionFreshnessState` is the one
mutable holder (see its docstring for why).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping

import attrs

#: The most bytes one character takes in UTF-8; a chunk must hold at least one character.
MAX_UTF8_CHAR_BYTES = 4
#: Separator of a logical send id and a chunk index in a chunk's client message id.
CHUNK_ID_SEPARATOR = ":"

#: Refresh instruction for a held send, free of sequences, keys and ids (seed section 6).
HELD_GUIDANCE = (
    "New messages arrived in this thread after the ones you have read, so your message "
    "was not sent. Read the thread's history, then send again only if a reply is still "
    "needed."
)
#: Refresh instruction for a logical send that stopped at a held chunk.
PARTIAL_HELD_GUIDANCE = (
    "Only the first part of your message was sent, as new messages arrived in this thread "
    "before the rest. Read the thread's history, then retry the same send only if the "
    "rest is still needed; the part already sent will not be repeated."
)


class SendState(enum.StrEnum):
    """The answer states of one send (the ``state`` member of POST /v1/agent/send)."""

    SENT = "sent"
    ALREADY_SENT = "already_sent"
    HELD = "held"


class LogicalSendState(enum.StrEnum):
    """The outcome of a logical (possibly chunked) send."""

    SENT = "sent"
    ALREADY_SENT = "already_sent"
    HELD = "held"
    PARTIAL_HELD = "partial_held"


def _not_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must not be negative")


def _require_not_negative(name: str, value: int) -> None:
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
    observed_seq: int = attrs.field(default=0, validator=_not_negative)
    latest_known_seq: int = attrs.field(default=0, validator=_not_negative)
    needs_refresh_until_seq: int = attrs.field(default=0, validator=_not_negative)
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
    _require_not_negative("target_seq", target_seq)
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
    _require_not_negative("latest_seq", latest_seq)
    refresh_to = latest_seq if needs_refresh_until_seq is None else needs_refresh_until_seq
    _require_not_negative("needs_refresh_until_seq", refresh_to)
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
    _require_not_negative("seen_up_to_seq", seen)
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


# -- chunked logical sends ---------------------------------------------------------------


@attrs.frozen(kw_only=True)
class AcceptedChunk:
    """A chunk of a logical send that the server holds.

    Attributes:
        index: position of the chunk, from 0.
        client_message_id: ``logical_id:index``.
        message_id: the stored message.
        accepted_seq: its thread seq.
        replayed: True when the server answered ``already_sent`` (an earlier attempt
            stored it).
    """

    index: int = attrs.field(validator=_not_negative)
    client_message_id: str
    message_id: str
    accepted_seq: int = attrs.field(validator=_not_negative)
    replayed: bool = False


def chunk_client_message_id(logical_id: str, index: int) -> str:
    """The deterministic client message id of a chunk.

    Args:
        logical_id: the id of the logical send, the same on every retry.
        index: the chunk's position, from 0.

    Returns:
        ``logical_id:index``.

    Raises:
        ValueError: for an empty logical id or a negative index.
    """
    if not logical_id:
        raise ValueError("logical_id must not be empty")
    _require_not_negative("index", index)
    return f"{logical_id}{CHUNK_ID_SEPARATOR}{index}"


def _fitting_end(content: str, start: int, max_chunk_bytes: int) -> int:
    """The largest end such that ``content[start:end]`` fits into the byte budget."""
    budget = max_chunk_bytes
    end = start
    while end < len(content):
        size = len(content[end].encode("utf-8", "surrogatepass"))
        if size > budget:
            break
        budget -= size
        end += 1
    return end


def split_content(content: str, max_chunk_bytes: int) -> tuple[str, ...]:
    """Split content into chunks of at most ``max_chunk_bytes`` UTF-8 bytes each.

    Joining the chunks gives the content back. A chunk ends after the last whitespace
    that fits, so that words stay whole where the budget allows; a word longer than the
    budget is cut. A chunk is whitespace only when the content has a run of whitespace
    longer than the budget.

    Args:
        content: the text of the logical send.
        max_chunk_bytes: the byte budget of one chunk; at most the server's
            ``message.max_content_bytes``.

    Returns:
        The chunks in order; empty for empty content.

    Raises:
        ValueError: when the budget cannot hold one character (below 4 bytes).
    """
    if max_chunk_bytes < MAX_UTF8_CHAR_BYTES:
        raise ValueError(f"max_chunk_bytes must be at least {MAX_UTF8_CHAR_BYTES}")
    chunks: list[str] = []
    start = 0
    while start < len(content):
        end = _fitting_end(content, start, max_chunk_bytes)
        if end < len(content):
            window = content[start:end]
            # Break after the last whitespace that still leaves a non-blank chunk.
            cut = max(window.rfind(" "), window.rfind("\n"), window.rfind("\t"))
            if cut > 0 and window[:cut].strip():
                end = start + cut + 1
        chunks.append(content[start:end])
        start = end
    return tuple(chunks)


def resume_seen(refreshed_observed_seq: int, last_accepted_seq: int) -> int:
    """The ``seen_up_to_seq`` of the first unaccepted chunk of a retried logical send.

    Replayed chunks keep ordered send progress even when a message came in between:
    the refreshed observed frontier covers it, and it is never below the last accepted.

    Args:
        refreshed_observed_seq: the observed frontier after the runtime refreshed.
        last_accepted_seq: accepted seq of the last chunk the server holds.

    Returns:
        ``max(refreshed_observed_seq, last_accepted_seq)``.
    """
    _require_not_negative("refreshed_observed_seq", refreshed_observed_seq)
    _require_not_negative("last_accepted_seq", last_accepted_seq)
    return max(refreshed_observed_seq, last_accepted_seq)


def next_chunk_seen(*, observed_seq: int, previous: AcceptedChunk | None) -> int:
    """The ``seen_up_to_seq`` of the next chunk of a logical send.

    - the first chunk carries the observed frontier;
    - after a chunk accepted by this attempt (``sent``), its accepted seq: a message
      written by someone else in between holds the rest;
    - after a replayed chunk (``already_sent``), `resume_seen` of the observed frontier
      and the replayed chunk's seq.

    Args:
        observed_seq: the target's observed frontier now.
        previous: the chunk before, None for the first chunk.

    Returns:
        The frontier the chunk carries.
    """
    if previous is None:
        return observed_seq
    if previous.replayed:
        return resume_seen(observed_seq, previous.accepted_seq)
    return previous.accepted_seq


def logical_state(
    *, chunk_count: int, accepted: tuple[AcceptedChunk, ...], held: bool
) -> LogicalSendState:
    """The state of a logical send from its chunk outcomes.

    Args:
        chunk_count: the number of chunks.
        accepted: the chunks the server holds, in order.
        held: True when a chunk was held (the rest was not sent).

    Returns:
        held when nothing is stored, partial_held when the first chunks are, sent when
        every chunk is and at least one is new, already_sent when every chunk was a
        replay.

    Raises:
        ValueError: when the outcomes do not add up.
    """
    if held:
        if len(accepted) >= chunk_count:
            raise ValueError("a held logical send has an unaccepted chunk")
        return LogicalSendState.PARTIAL_HELD if accepted else LogicalSendState.HELD
    if len(accepted) != chunk_count or chunk_count == 0:
        raise ValueError("a finished logical send has every chunk accepted")
    if all(chunk.replayed for chunk in accepted):
        return LogicalSendState.ALREADY_SENT
    return LogicalSendState.SENT


__all__ = [
    "CHUNK_ID_SEPARATOR",
    "HELD_GUIDANCE",
    "MAX_UTF8_CHAR_BYTES",
    "PARTIAL_HELD_GUIDANCE",
    "AcceptedChunk",
    "LocalVerdict",
    "LogicalSendState",
    "MessageFreshnessFrontier",
    "SendState",
    "SessionFreshnessState",
    "chunk_client_message_id",
    "logical_state",
    "next_chunk_seen",
    "note_latest",
    "resume_seen",
    "split_content",
    "surface",
    "verdict",
]
