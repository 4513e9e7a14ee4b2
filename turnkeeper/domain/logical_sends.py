"""Chunked logical sends: long content as several messages, retried without repeats.

Long content goes out as a logical send of several messages (chunks) with client ids
``logical_id:index``; each chunk's ``seen_up_to_seq`` is the accepted seq of the chunk
before, and a retry of the same logical send replays the accepted chunks (the server
answers ``already_sent``) and resumes with ``max(refreshed observed, last accepted)``.

Pure rules: values in, values out.
"""

from __future__ import annotations

import bisect
import enum
import itertools

import attrs

from turnkeeper.domain.freshness import not_negative, require_not_negative
from turnkeeper.domain.text import is_blank, is_space

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


def _char_bytes(character: str) -> int:
    """The UTF-8 size of one character (a lone surrogate counts 3, as surrogatepass)."""
    code = ord(character)
    if code < 0x80:
        return 1
    if code < 0x800:
        return 2
    return 3 if code < 0x10000 else 4


@attrs.frozen
class _Layout:
    """What a split needs to know of every position of the content.

    Attributes:
        offsets: ``offsets[i]`` is the UTF-8 size of ``content[:i]``.
        next_visible: ``next_visible[i]`` is the first index from ``i`` on that is not
            whitespace (the content's length when there is none).
        budget: the byte budget of one chunk.
    """

    offsets: list[int]
    next_visible: list[int]
    budget: int

    @classmethod
    def of(cls, content: str, budget: int) -> _Layout:
        """Measure the content for a budget."""
        offsets = list(itertools.accumulate(map(_char_bytes, content), initial=0))
        next_visible = [len(content)] * (len(content) + 1)
        for index in range(len(content) - 1, -1, -1):
            next_visible[index] = next_visible[index + 1] if is_space(content[index]) else index
        return cls(offsets, next_visible, budget)

    def fitting_end(self, start: int) -> int:
        """The largest end such that ``content[start:end]`` fits into the budget."""
        return bisect.bisect_right(self.offsets, self.offsets[start] + self.budget) - 1

    def ends(self, start: int) -> range:
        """The ends of the non-blank chunks that start at ``start`` and fit the budget."""
        return range(self.next_visible[start] + 1, self.fitting_end(start) + 1)


def _joinable_from(layout: _Layout) -> list[bool]:
    """Which positions start a rest of the content that splits without a loss.

    ``joinable[i]`` is True when ``content[i:]`` splits into non-blank chunks within the
    budget that join back to it; computed from the end, in linear time apart from one
    bisection per position.
    """
    size = len(layout.offsets) - 1
    joinable = [False] * (size + 1)
    joinable[size] = True
    # counts[i]: how many positions from i on are joinable, to test a range at once.
    counts = [0] * (size + 2)
    counts[size] = 1
    for start in range(size - 1, -1, -1):
        ends = layout.ends(start)
        joinable[start] = bool(ends) and counts[ends.start] > counts[ends.stop]
        counts[start] = counts[start + 1] + joinable[start]
    return joinable


def _split_joinably(content: str, layout: _Layout, joinable: list[bool]) -> tuple[str, ...]:
    """Split content that has a lossless split.

    Each chunk ends after whitespace where it can (words stay whole), else as late as the
    budget and the rest of the content allow.
    """
    chunks: list[str] = []
    start = 0
    while start < len(content):
        ends = [end for end in reversed(layout.ends(start)) if joinable[end]]
        end = next((e for e in ends if e == len(content) or is_space(content[e - 1])), ends[0])
        chunks.append(content[start:end])
        start = end
    return tuple(chunks)


def _split_leaving_whitespace_out(content: str, layout: _Layout) -> tuple[str, ...]:
    """Split content that has no lossless split.

    Whitespace that cannot share a chunk with a visible character is left out.
    """
    chunks: list[str] = []
    start = 0
    while start < len(content):
        end = layout.fitting_end(start)
        window = content[start:end]
        if is_blank(window):
            # Only whitespace fits: skip to the next visible character (or the end).
            start = layout.next_visible[end]
            continue
        if end < len(content):
            # Break after the last whitespace that still leaves a non-blank chunk.
            cut = max(window.rfind(" "), window.rfind("\n"), window.rfind("\t"))
            if cut > 0 and not is_blank(window[:cut]):
                end = start + cut + 1
        chunks.append(content[start:end])
        start = end
    return tuple(chunks)


def split_content(content: str, max_chunk_bytes: int) -> tuple[str, ...]:
    """Split content into chunks of at most ``max_chunk_bytes`` UTF-8 bytes each.

    No chunk is blank: the server refuses blank content, so a blank chunk could never be
    sent and its logical send never completed. The chunks join back to the content
    whenever some split into non-blank chunks within the budget can; each then ends
    after whitespace where it can, so that words stay whole where the budget allows.
    Only when no split can (a run of whitespace too long to share chunks with the
    visible characters around it) is whitespace that cannot share a chunk with a visible
    character left out, as the boundary between two messages stands in for it; the
    visible characters are all kept, in order.

    The split is a pure function of its arguments: a retry of a logical send gets the
    same chunks under the same indexes, so the server can replay the stored ones.

    Args:
        content: the text of the logical send.
        max_chunk_bytes: the byte budget of one chunk; at most the server's
            ``message.max_content_bytes``.

    Returns:
        The chunks in order; empty for empty or whitespace-only content.

    Raises:
        ValueError: when the budget cannot hold one of the content's visible characters
            (a budget of 4 bytes holds any).

    Example:
        >>> split_content("Hello Alex and Sam", 8)
        ('Hello ', 'Alex ', 'and Sam')
        >>> split_content("Sam" + " " * 3 + "Alex", 4)
        ('Sam ', '  Al', 'ex')
        >>> split_content("Hi" + " " * 9 + "Sam", 4)
        ('Hi  ', 'Sam')
    """
    if max_chunk_bytes < 1:
        raise ValueError(f"a chunk budget of {max_chunk_bytes} bytes holds no character")
    widest = max((_char_bytes(ch) for ch in content if not is_space(ch)), default=0)
    if widest > max_chunk_bytes:
        raise ValueError(
            f"a chunk budget of {max_chunk_bytes} bytes cannot hold a character of {widest} bytes"
        )
    layout = _Layout.of(content, max_chunk_bytes)
    if layout.next_visible[0] == len(content):
        return ()
    joinable = _joinable_from(layout)
    if joinable[0]:
        return _split_joinably(content, layout, joinable)
    return _split_leaving_whitespace_out(content, layout)


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
