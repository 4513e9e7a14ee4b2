"""JSON documents of the HTTP contract (API.md), built once for answers and events.

Every function returns a plain dict without None values: absent fields are omitted,
because the contract has no JSON null anywhere.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from turnkeeper.domain.events import Event
from turnkeeper.domain.messaging import Message
from turnkeeper.domain.world import Channel, Grant, Principal, Space, Thread

Document = dict[str, Any]


def rfc3339(at: datetime) -> str:
    """A time as RFC 3339 UTC with a Z suffix.

    Args:
        at: a timezone-aware time.

    Returns:
        For example ``2026-11-30T01:02:03.456789Z``.
    """
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _compact(doc: Document) -> Document:
    return {key: value for key, value in doc.items() if value is not None}


def author_document(principal: Principal) -> Document:
    """``{id, kind, handle}`` of an author or caller."""
    return {"id": str(principal.id), "kind": principal.kind.value, "handle": principal.handle}


def principal_document(principal: Principal) -> Document:
    """The answer of createPrincipal without the token, and of agent config changes."""
    return _compact(
        {
            "id": str(principal.id),
            "kind": principal.kind.value,
            "handle": principal.handle,
            "display_name": principal.display_name or None,
            "billing_mode": principal.billing_mode.value if principal.billing_mode else None,
            "holder_id": str(principal.holder_id) if principal.holder_id else None,
            "supports_followups": principal.supports_followups,
            "enabled": principal.enabled if principal.is_agent else None,
        }
    )


def space_document(space: Space) -> Document:
    """The Space document."""
    return _compact(
        {
            "id": str(space.id),
            "name": space.name,
            "default_operator_id": str(space.default_operator_id)
            if space.default_operator_id
            else None,
            "created_by": str(space.created_by),
            "created_at": rfc3339(space.created_at),
        }
    )


def channel_document(channel: Channel) -> Document:
    """The Channel document (text channels carry ``main_thread_id``)."""
    return _compact(
        {
            "id": str(channel.id),
            "space_id": str(channel.space_id),
            "name": channel.name,
            "type": channel.type.value,
            "operator_mode": channel.operator_mode.value,
            "operator_id": str(channel.operator_id) if channel.operator_id else None,
            "free_response": channel.behavior.free_response,
            "allow_mentioned_agents": channel.behavior.allow_mentioned_agents,
            "thread_require_mention": channel.behavior.thread_require_mention,
            "archived": channel.archived,
            "main_thread_id": str(channel.main_thread_id) if channel.main_thread_id else None,
            "created_at": rfc3339(channel.created_at),
        }
    )


def grant_document(grant: Grant) -> Document:
    """The Grant document."""
    return {
        "id": str(grant.id),
        "principal_id": str(grant.principal_id),
        "resource_kind": grant.resource_kind.value,
        "resource_id": str(grant.resource_id),
        "level": grant.level.label,
        "created_at": rfc3339(grant.created_at),
    }


def thread_document(thread: Thread) -> Document:
    """The Thread document; ``latest_seq`` is the raw frontier."""
    return _compact(
        {
            "id": str(thread.id),
            "channel_id": str(thread.channel_id),
            "title": thread.title,
            "title_source": thread.title_source.value,
            "operator_id": str(thread.operator_agent_id) if thread.operator_agent_id else None,
            "state": thread.state.value,
            "latest_seq": thread.latest_seq,
            "target_key": thread.target_key,
            "created_by": str(thread.created_by),
            "created_at": rfc3339(thread.created_at),
        }
    )


def message_document(message: Message, author: Principal) -> Document:
    """The Message document.

    Args:
        message: the message.
        author: its author (for ``{id, kind, handle}``).

    Returns:
        The document; ``run_id`` only for run anchors, trigger fields only when set.
    """
    return _compact(
        {
            "id": str(message.id),
            "thread_id": str(message.thread_id),
            "thread_seq": message.thread_seq,
            "author": author_document(author),
            "origin": message.origin.value,
            "kind": message.kind.value,
            "content": message.content,
            "mentions": [str(m) for m in message.mentions],
            "reply_to_id": str(message.reply_to_id) if message.reply_to_id else None,
            "restricted_to": [str(p) for p in message.restricted_to]
            if message.restricted_to is not None
            else None,
            "client_msg_id": message.client_msg_id,
            "created_at": rfc3339(message.created_at),
            "trigger_state": message.trigger_state.value if message.trigger_state else None,
            "trigger_state_reason": message.trigger_state_reason,
            "run_id": str(message.run_id) if message.run_id else None,
            "version": message.version,
        }
    )


def event_document(event: Event) -> Document:
    """The Event document of the shared feed."""
    resource: Document = {"kind": event.resource_kind, "id": str(event.resource_id)}
    if event.resource_version is not None:
        resource["version"] = event.resource_version
    scope: Document = {"space_id": str(event.space_id), "channel_id": str(event.channel_id)}
    if event.thread_id is not None:
        scope["thread_id"] = str(event.thread_id)
    return {
        "seq": event.seq,
        "type": event.type.value,
        "actor": {"id": str(event.actor_id), "kind": event.actor_kind},
        "scope": scope,
        "resource": resource,
        "payload": dict(event.payload),
        "created_at": rfc3339(event.created_at),
    }
