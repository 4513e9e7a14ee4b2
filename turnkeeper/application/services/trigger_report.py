"""The ``trigger`` of a create answer: what became of the message, from stored facts.

createMessage and createThread answer it, and so do their replays: the report is read
back from the store (`FollowupRepository.trigger_links`), or, in the unit that stored the
message, taken from the rows that unit wrote (`TrackedUnit.trigger_links`, the same facts
before the commit), and derived by the pure `turnkeeper.domain.trigger_report.report_trigger`,
so a replay computed later shows the same thing.
"""

from __future__ import annotations

from turnkeeper.application.ports import UnitOfWork
from turnkeeper.application.tracking import TrackedUnit
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
    # The unit that stored the message knows its links as it stored them (one read fewer
    # on the create path); a replay's unit reads them back.
    written = uow.trigger_links(message.id) if isinstance(uow, TrackedUnit) else None
    links = written if written is not None else await uow.followups.trigger_links(message.id)
    return report_trigger(message.trigger_state, message.trigger_state_reason, links)


__all__ = ["message_trigger"]
