"""Chunked logical sends: long content as several messages, retried without repeats.

Long content goes out as a logical send of several messages (chunks) with client ids
``logical_id:index``; each chunk's ``seen_up_to_seq`` is the accepted seq of the chunk
before, and a retry of the same logical send replays the accepted chunks (the server
answers ``already_sent``) and resumes with ``max(refreshed observed, last accepted)``.

Pure rules: values in, values out.
"""

from __future__ import annotations

import enum

import attrs

from turnkeeper.domain.freshness import not_negative, require_not_negative

#: The most bytes one character takes in UTF-8; a chunk must hold at least one character.
MAX_UTF8_CHAR_BYTES = 4
#: Separator of a logical send id and a chunk index in a chunk's client message id.
CHUNK_ID_SEPARATOR = ":"

#: Refresh instruction for a logical send that stopped at a held chunk.
PARTIAL_HELD_GUIDANCE = (
    "Only the first part of your message was sent, as new messages arrived in this thread "
    "before the rest. Read the thread's history, then retry the same send only if the "
    "rest is still needed; the part already sent will not be repeated."
)


class LogicalSendState(enum.StrEnum):
    """The outcome of a logical (possibly chunked) send."""

    SENT = "sent"
    ALREADY_SENT = "already_sent"
    HELD = "held"
    PARTIAL_HELD = "partial_held"


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

    index: int = attrs.field(validator=not_negative)
    client_message_id: str
    message_id: str
    accepted_seq: int = attrs.field(validator=not_negative)
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
    require_not_negative("index", index)
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


def _next_visible(content: str, start: int) -> int:
    """The index of the first character from ``start`` on that is not whitespace."""
    index = start
    while index < len(content) and content[index].isspace():
        index += 1
    return index


def split_content(content: str, max_chunk_bytes: int) -> tuple[str, ...]:
    """Split content into chunks of at most ``max_chunk_bytes`` UTF-8 bytes each.

    A chunk ends after the last whitespace that fits, so that words stay whole where the
    budget allows; a word longer than the budget is cut. No chunk is blank: the server
    refuses blank content, so a blank chunk could never be sent and its logical send
    never completed. Whitespace that cannot share a chunk with a visible character (a
    run that fills the budget on its own, or trailing whitespace after a full chunk) is
    left out, as the boundary between two messages stands in for it; the visible
    characters are all kept, in order. Joining the chunks gives the content back
    whenever nothing had to be left out.

    The split is a pure function of its arguments: a retry of a logical send gets the
    same chunks under the same indexes, so the server can replay the stored ones.

    Args:
        content: the text of the logical send.
        max_chunk_bytes: the byte budget of one chunk; at most the server's
            ``message.max_content_bytes``.

    Returns:
        The chunks in order; empty for empty or whitespace-only content.

    Raises:
        ValueError: when the budget cannot hold one character (below 4 bytes).

    Example:
        >>> split_content("Hello Alex and Sam", 8)
        ('Hello ', 'Alex ', 'and Sam')
        >>> split_content("Hi" + " " * 9 + "Sam", 4)
        ('Hi  ', 'Sam')
    """
    if max_chunk_bytes < MAX_UTF8_CHAR_BYTES:
        raise ValueError(f"max_chunk_bytes must be at least {MAX_UTF8_CHAR_BYTES}")
    chunks: list[str] = []
    start = 0
    while start < len(content):
        end = _fitting_end(content, start, max_chunk_bytes)
        window = content[start:end]
        if not window.strip():
            # Only whitespace fits: skip to the next visible character (or the end).
            start = _next_visible(content, end)
            continue
        if end < len(content):
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
    require_not_negative("refreshed_observed_seq", refreshed_observed_seq)
    require_not_negative("last_accepted_seq", last_accepted_seq)
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
    "MAX_UTF8_CHAR_BYTES",
    "PARTIAL_HELD_GUIDANCE",
    "AcceptedChunk",
    "LogicalSendState",
    "chunk_client_message_id",
    "logical_state",
    "next_chunk_seen",
    "resume_seen",
    "split_content",
]
