"""The run as its readers see it: the run with its follow-ups, and its document.

A follow-up is a message, and a restricted message is seen only by its author and its
audience (`turnkeeper.domain.messaging.visible_to`): the run document lists for each
reader only the follow-ups whose messages it may see, plus all of them for the run's
own agent, which gets every follow-up delivered anyway. The id and state of a
restricted follow-up would otherwise tell every reader of the thread that someone
wrote to the agent, and when.
"""

from __future__ import annotations

import uuid

import attrs

from turnkeeper.application.documents import Document, rfc3339
from turnkeeper.application.ports import UnitOfWork
from turnkeeper.application.transactions import Later
from turnkeeper.domain.followups import FollowupState
from turnkeeper.domain.messaging import visible_to
from turnkeeper.domain.runs import Run


@attrs.frozen(kw_only=True)
class RunView:
    """A run as its document shows it.

    Attributes:
        run: the run.
        followups: follow-up states by message id.
    """

    run: Run
    followups: dict[uuid.UUID, str] = attrs.field(factory=dict)


async def run_view(uow: UnitOfWork, run: Run, reader_id: uuid.UUID) -> RunView:
    """The view of a run for one reader: the run as given, with the follow-ups it may see.

    Args:
        uow: the unit of work.
        run: the run (as the caller just read or changed it).
        reader_id: the principal the view is for.

    Returns:
        The view, with every follow-up for the run's agent and, for anyone else, the
        follow-ups whose messages the reader may see.
    """
    states = await uow.followups.states(run.id)
    if reader_id != run.agent_id:
        states = await _visible(uow, states, reader_id)
    return RunView(run=run, followups={k: v.value for k, v in states.items()})


async def agent_view_later(uow: UnitOfWork, run: Run) -> Later[RunView]:
    """`run_view` for the run's own agent, read with the unit's COMMIT (`Transactor.run_then`).

    Args:
        uow: the unit of work, after its last write of the run's follow-ups.
        run: the run (as the caller just read or changed it).

    Returns:
        The reader of the view, with every follow-up.
    """
    states = await uow.followups.start_states(run.id)

    async def view() -> RunView:
        return RunView(run=run, followups={k: v.value for k, v in (await states()).items()})

    return view


async def _visible(
    uow: UnitOfWork, states: dict[uuid.UUID, FollowupState], reader_id: uuid.UUID
) -> dict[uuid.UUID, FollowupState]:
    """The follow-ups whose messages the reader may see (a missing message: none)."""
    shown: dict[uuid.UUID, FollowupState] = {}
    for message_id, state in states.items():
        message = await uow.messages.get(message_id)
        if message is not None and visible_to(message, reader_id):
            shown[message_id] = state
    return shown


def run_document(view: RunView) -> Document:
    """The Run document of API.md (no null; ``cancel_requested`` only when true).

    Args:
        view: the run with its follow-ups.

    Returns:
        The document.
    """
    run = view.run
    doc: Document = {
        "id": str(run.id),
        "thread_id": str(run.thread_id),
        "agent_id": str(run.agent_id),
        "state": run.state.value,
        "trigger_kind": run.trigger_kind.value,
        "triggering_message_id": str(run.triggering_message_id),
        "triggered_by": str(run.triggered_by),
        "version": run.version,
        "followups": {str(k): {"state": v} for k, v in view.followups.items()},
        "created_at": rfc3339(run.created_at),
        "updated_at": rfc3339(run.updated_at),
    }
    if run.state_reason is not None:
        doc["state_reason"] = run.state_reason
    if run.cancel_requested:
        doc["cancel_requested"] = True
    return doc


__all__ = ["RunView", "agent_view_later", "run_document", "run_view"]
