"""The check of an agent answer's run_id, an in-transaction subscriber of `MessagePosted`.

An agent's message may name a run (DESIGN.md section 8): `LockRunForAnswer` takes the
run FOR SHARE, so that the answer commits before the run's end, and the pure
`answer_verdict` decides. A refusal vetoes the whole unit: the message is not stored.
"""

from __future__ import annotations

from turnkeeper.application.bus import MessagePosted
from turnkeeper.application.ports import UnitOfWork
from turnkeeper.domain.errors import Conflict, FieldError, ValidationFailed
from turnkeeper.domain.messaging import MessageKind, Origin
from turnkeeper.domain.runs import AnswerVerdict, answer_verdict


async def check_named_run(uow: UnitOfWork, posted: MessagePosted) -> None:
    """Refuse an agent's text message that names a run it may not answer in.

    Args:
        uow: the message's unit of work.
        posted: the event.

    Raises:
        ValidationFailed: ``/run_id`` run_mismatch for an unknown run, a run of another
            thread or of another agent (one uniform answer).
        Conflict: run_not_active for the agent's own ended run.
    """
    message = posted.message
    if posted.run_id is None or message.kind is not MessageKind.TEXT:
        return
    if message.origin is not Origin.AGENT:
        # Messaging never builds this; a run_id from a non-agent is refused earlier.
        raise RuntimeError("run_id on a message that is not an agent's")
    run = await uow.runs.lock_for_answer(posted.run_id)
    verdict = answer_verdict(run, run is not None, message.author_id, message.thread_id)
    if verdict is AnswerVerdict.RUN_MISMATCH:
        raise ValidationFailed([FieldError(pointer="/run_id", code="run_mismatch")])
    if verdict is AnswerVerdict.RUN_NOT_ACTIVE:
        raise Conflict("run not active", reason="run_not_active")


__all__ = ["check_named_run"]
