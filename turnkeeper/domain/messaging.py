"""Messages: their values, the body rules of a create request, digests and visibility.

This module knows nothing of runs: the runs rules react to messages through the
in-transaction MessagePosted event of the application layer.
"""

from __future__ import annotations

import enum
import hashlib
import json
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime

import attrs

from turnkeeper.domain.errors import FieldError, character_errors
from turnkeeper.domain.text import is_blank, lines, stripped
from turnkeeper.domain.world import PrincipalKind


class Origin(enum.StrEnum):
    """Where a message comes from, always set by the server from the principal."""

    HUMAN = "human"
    AGENT = "agent"
    APP = "app"
    SYSTEM = "system"


class MessageKind(enum.StrEnum):
    """text from clients; system and run only from the server."""

    TEXT = "text"
    SYSTEM = "system"
    RUN = "run"


class TriggerState(enum.StrEnum):
    """What became of a human message's trigger (absent when nothing was decided)."""

    RECEIVED = "received"
    QUEUED = "queued"
    WORKING = "working"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    FOLLOWUP_DELIVERED = "followup_delivered"


#: The trigger states that say why (the run's end reason, or the refusal's): any other
#: state carries no trigger_state_reason.
REASONED_TRIGGER_STATES = frozenset({TriggerState.FAILED, TriggerState.CANCELLED})


def trigger_reason(state: TriggerState, reason: str | None) -> str | None:
    """The trigger_state_reason a message keeps with a trigger_state.

    Args:
        state: the message's new trigger_state.
        reason: the reason at hand (a run's end reason, a refusal's reason), or None.

    Returns:
        `reason` when the state is failed or cancelled, else None: a completed run's
        reason stays on the run, its trigger message is done without one.
    """
    return reason if state in REASONED_TRIGGER_STATES else None


#: The system line written before the first message into a done thread.
SYSTEM_REOPENED_CONTENT = "thread.reopened"

#: Version prefix of the payload digest; a change of the digest's parts gets a new one.
DIGEST_VERSION = "v1"


def origin_for(kind: PrincipalKind) -> Origin:
    """The origin of a message written by a principal of this kind.

    Args:
        kind: the author's kind.

    Returns:
        human for people, agent for agents, app for apps.
    """
    return {
        PrincipalKind.PERSON: Origin.HUMAN,
        PrincipalKind.AGENT: Origin.AGENT,
        PrincipalKind.APP: Origin.APP,
    }[kind]


@attrs.frozen(kw_only=True)
class Message:
    """A stored message.

    Attributes:
        id: UUIDv7.
        thread_id: the thread.
        thread_seq: 1, 2, 3 ... within the thread, no gaps.
        author_id: the writing principal (for a run anchor: the run's agent).
        origin: human, agent, app or system.
        kind: text, system or run.
        content: the text.
        mentions: principal ids, in the order written.
        reply_to_id: a message of the same thread.
        restricted_to: when set, only these principals (and the author) see it.
        client_msg_id: the author's idempotency key.
        digest: versioned payload digest for idempotency.
        trigger_state: human messages only.
        trigger_state_reason: the reason of a failed or cancelled trigger.
        run_id: kind run only (the anchor of a run).
        created_at: insertion time.
        deleted_at: deletion time, if deleted.
        version: raised on every change.
    """

    id: uuid.UUID
    thread_id: uuid.UUID
    thread_seq: int
    author_id: uuid.UUID
    origin: Origin
    kind: MessageKind
    content: str
    mentions: tuple[uuid.UUID, ...] = ()
    reply_to_id: uuid.UUID | None = None
    restricted_to: tuple[uuid.UUID, ...] | None = None
    client_msg_id: str | None = None
    digest: str | None = None
    trigger_state: TriggerState | None = None
    trigger_state_reason: str | None = None
    run_id: uuid.UUID | None = None
    created_at: datetime
    deleted_at: datetime | None = None
    version: int = 1


@attrs.frozen(kw_only=True)
class MessageDraft:
    """A validated create request, before it is stored.

    Attributes:
        client_msg_id: idempotency key of the author.
        content: the text.
        mentions: principal ids.
        reply_to_id: optional message of the same thread.
        restricted_to: optional audience.
        run_id: agents only: the run this answer belongs to (never stored).
    """

    client_msg_id: str
    content: str
    mentions: tuple[uuid.UUID, ...] = ()
    reply_to_id: uuid.UUID | None = None
    restricted_to: tuple[uuid.UUID, ...] | None = None
    run_id: uuid.UUID | None = None


def content_errors(content: str, *, max_content_bytes: int, prefix: str = "") -> list[FieldError]:
    """The rules of a message's text: not blank, at most ``message.max_content_bytes``.

    Args:
        content: the text.
        max_content_bytes: ``message.max_content_bytes`` (counted in UTF-8).
        prefix: the pointer of the object holding ``content`` (``/first_message``).

    Returns:
        ``{prefix}/content`` required, invalid_character (a NUL) or too_long; empty when
        the text is fine.
    """
    if is_blank(content):
        return [FieldError(pointer=f"{prefix}/content", code="required")]
    if nul := character_errors({f"{prefix}/content": content}):
        return nul
    if len(content.encode("utf-8")) > max_content_bytes:
        return [FieldError(pointer=f"{prefix}/content", code="too_long")]
    return []


def draft_errors(
    draft: MessageDraft,
    *,
    author_kind: PrincipalKind,
    kind: str | None,
    max_content_bytes: int,
    max_client_id_length: int | None = None,
    prefix: str = "",
    first_message: bool = False,
) -> list[FieldError]:
    """The body rules of createMessage and of createThread's first message.

    Args:
        draft: the decoded request.
        author_kind: the kind of the writing principal.
        kind: the request's ``kind`` member (only ``text`` or absent is accepted).
        max_content_bytes: ``message.max_content_bytes``.
        max_client_id_length: ``message.max_client_id_length`` (characters; None: no
            limit).
        prefix: the pointer of the draft in its request (``/first_message`` for
            createThread, empty for createMessage).
        first_message: True for createThread, where run_id is never accepted.

    Returns:
        Every offending member, in a stable order; empty when the draft is fine.
    """
    errors: list[FieldError] = []
    if kind is not None and kind != MessageKind.TEXT:
        errors.append(FieldError(pointer=f"{prefix}/kind", code="invalid_enum"))
    if not draft.client_msg_id:
        errors.append(FieldError(pointer=f"{prefix}/client_msg_id", code="required"))
    elif max_client_id_length is not None and len(draft.client_msg_id) > max_client_id_length:
        # The client id is a key of a unique index, whose rows have a size limit.
        errors.append(FieldError(pointer=f"{prefix}/client_msg_id", code="too_long"))
    else:
        errors.extend(character_errors({f"{prefix}/client_msg_id": draft.client_msg_id}))
    errors.extend(content_errors(draft.content, max_content_bytes=max_content_bytes, prefix=prefix))
    if draft.run_id is not None and (first_message or author_kind is not PrincipalKind.AGENT):
        # A run belongs to an agent, and a thread made by this request has no run yet.
        errors.append(FieldError(pointer=f"{prefix}/run_id", code="run_mismatch"))
    if draft.restricted_to is not None and not draft.restricted_to:
        errors.append(FieldError(pointer=f"{prefix}/restricted_to", code="empty"))
    if len(set(draft.mentions)) != len(draft.mentions):
        errors.append(FieldError(pointer=f"{prefix}/mentions", code="duplicate"))
    return errors


def payload_digest(
    thread_id: uuid.UUID,
    content: str,
    reply_to_id: uuid.UUID | None,
    restricted_to: Sequence[uuid.UUID] | None,
    *,
    title: str | None = None,
    audience_repeats: bool = False,
) -> str:
    """The versioned digest that decides whether a repeated client id is a replay.

    It covers thread, content, reply_to and restricted_to; never run_id and
    never freshness members, so a retry of the same answer without them still replays.

    Args:
        thread_id: the target thread (createThread: the channel).
        content: the text.
        reply_to_id: the replied message.
        restricted_to: the audience, as a set (order and repeats do not count).
        title: createThread's title (empty for none), a member of its own, so that no
            split of text between title and content shares a digest with another;
            None for createMessage and agent sends, whose digests never hold one.
        audience_repeats: read the audience as a sorted list that keeps a repeated id,
            as digests stored before 2026-12-06 did (replays of those).

    Returns:
        ``v1:`` followed by a SHA-256 hex digest.
    """
    parts: dict[str, object] = {
        "thread": str(thread_id),
        "content": content,
        "reply_to": str(reply_to_id) if reply_to_id else "",
    }
    if title is not None:
        parts["title"] = title
    # A public message has no audience member at all, so it never shares a digest with
    # an audience (even an empty one).
    # The audience is a set: a repeated id or another order is the same audience. (A
    # list without repeats digests as before, so stored digests keep their prefix.)
    if restricted_to is not None:
        members = (str(p) for p in restricted_to)
        parts["restricted_to"] = sorted(members if audience_repeats else set(members))
    canonical = json.dumps(
        parts,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return f"{DIGEST_VERSION}:{hashlib.sha256(canonical.encode('utf-8')).hexdigest()}"


def visible_to(message: Message, reader_id: uuid.UUID) -> bool:
    """Whether a principal may see a message (restricted messages: members and author).

    Args:
        message: the message.
        reader_id: the reading principal.

    Returns:
        True when the reader may see it.
    """
    if message.restricted_to is None:
        return True
    return reader_id == message.author_id or reader_id in message.restricted_to


def audience_of(messages: Iterable[Message]) -> tuple[uuid.UUID, ...] | None:
    """Who may see every fact about these messages: None when one of them is public.

    A change made for restricted messages alone (a follow-up accepted, acknowledged or
    refused) tells its readers that someone wrote, and when: it is for the principals
    who may see one of the messages.

    Args:
        messages: the messages a change was made for (none: a public change).

    Returns:
        Their authors and audiences, each once and in order; None when there is no
        message or one of them is not restricted.
    """
    members: dict[uuid.UUID, None] = {}
    for message in messages:
        if message.restricted_to is None:
            return None
        members[message.author_id] = None
        members.update(dict.fromkeys(message.restricted_to))
    return tuple(members) or None


def given_title(requested: str | None) -> str | None:
    """A requested thread title, None when it counts as none (absent, empty or only whitespace).

    Args:
        requested: the request's ``title``.

    Returns:
        The title exactly as sent, or None.
    """
    return requested if requested is not None and not is_blank(requested) else None


def thread_title(
    requested: str | None, first_message: MessageDraft, *, by_agent: bool
) -> str | None:
    """The title a new thread gets.

    A requested title that is empty or only whitespace counts as none, for people and
    agents alike (a blank title would show as an untitled thread that claims a title);
    any other requested title is kept exactly as sent. Without one, an agent's thread
    takes its `auto_title` and a person's thread stays untitled.

    Args:
        requested: the request's ``title``, None when absent.
        first_message: the thread's first message as requested.
        by_agent: the thread is created by an agent (``title_source`` auto).

    Returns:
        The title, or None for an untitled thread.
    """
    given = given_title(requested)
    if given is not None:
        return given
    if not by_agent:
        return None
    return auto_title(first_message) or None


def auto_title(first_message: MessageDraft) -> str | None:
    """The title an agent's thread gets when the agent gives none.

    The first line of the first message, unless that message is restricted: a title is
    shown to every reader of the thread (GET /v1/threads/{id}, ``thread.created``), so
    it never comes from a message only some of them may see. Such a thread stays
    untitled (``title`` absent, ``title_source`` auto).

    Args:
        first_message: the thread's first message as requested.

    Returns:
        The title, or None for a restricted first message.
    """
    if first_message.restricted_to is not None:
        return None
    return title_from_content(first_message.content)


def title_from_content(content: str) -> str:
    """The title an agent's report thread gets: the first non-empty line.

    Args:
        content: the first message's text.

    Returns:
        The first non-empty line, stripped.
    """
    for line in lines(content):
        if not is_blank(line):
            return stripped(line)
    return stripped(content)
