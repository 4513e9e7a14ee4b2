"""The run as its readers see it: the run with its follow-ups, and its document."""

from __future__ import annotations

import uuid

import attrs

from turnkeeper.application.documents import Document, rfc3339
from turnkeeper.application.ports import UnitOfWork
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


async def run_view(uow: UnitOfWork, run: Run) -> RunView:
    """The view of a run: the run as given, with its follow-ups as stored.

    Args:
        uow: the unit of work.
        run: the run (as the caller just read or changed it).

    Returns:
        The view.
    """
    states = await uow.followups.states(run.id)
    return RunView(run=run, followups={k: v.value for k, v in states.items()})


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


__all__ = ["RunView", "run_document", "run_view"]
