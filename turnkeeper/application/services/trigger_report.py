"""The ``trigger`` of a create answer: what became of the message, from stored facts.

createMessage and createThread answer it, and so do their replays: the report is read
back from the store (`FollowupRepository.trigger_links`) and derived by the pure
`turnkeeper.domain.trigger_report.report_trigger`, never from what the request's own
unit happened to decide, so a replay computed later shows the same thing.
"""

from __future__ import annotations

from turnkeeper.application.ports import UnitOfWork
from turnkeeper.domain.messaging import Message
from turnkeeper.domain.trigger_report import NO_LINKS, MessageTrigger, report_trigger


async def message_trigger(uow: UnitOfWork, message: Message) -> MessageTrigger:
    """What became of a message (the message as committed or as it is now).

    A message without a trigger_state set nothing in motion (every other origin than
    human, or no candidate): it is reported without reading the store.

    Args:
        uow: the unit of work of the create (or of its replay).
        message: the message.

    Returns:
        Its trigger report.
    """
    if message.trigger_state is None:
        return report_trigger(None, None, NO_LINKS)
    links = await uow.followups.trigger_links(message.id)
    return report_trigger(message.trigger_state, message.trigger_state_reason, links)


__all__ = ["message_trigger"]
