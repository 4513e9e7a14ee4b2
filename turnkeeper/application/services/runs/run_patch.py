"""The run patch: the agent's adapter acknowledges follow-ups (delivered, absorbed).

All or nothing and forward only (`advance_followup`); leaving queued sets the message's
trigger_state followup_delivered; a change raises the run's version once.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta

import attrs

from turnkeeper.application.errors import BaseVersionConflict
from turnkeeper.application.ports import Clock, UnitOfWork
from turnkeeper.application.services.identity import BearerToken
from turnkeeper.application.services.runs.changes import RunChanges
from turnkeeper.application.services.runs.guards import move_own_run, run_target
from turnkeeper.application.services.runs.views import (
    RunView,
    agent_view_later,
    run_document,
    run_view,
)
from turnkeeper.application.transactions import Later, Transactor
from turnkeeper.domain.errors import (
    Conflict,
    FieldError,
    InvalidStateTransition,
    ValidationFailed,
)
from turnkeeper.domain.followups import FollowupState, advance_followup
from turnkeeper.domain.messaging import TriggerState, audience_of
from turnkeeper.domain.runs import Run, bump_version
from turnkeeper.domain.world import Principal


@attrs.frozen(kw_only=True)
class FollowupOp:
    """One replacement of a run patch.

    Attributes:
        message_id: the follow-up message (None when the path names none).
        value: delivered or absorbed.
    """

    message_id: uuid.UUID | None
    value: FollowupState


class RunPatchService:
    """PATCH /v1/runs/{id}.

    Args:
        tx: the transactor.
        changes: stores the run change and the trigger states.
        clock: the time.
        token_interval: ``auth.token_last_used_interval`` (a bearer token's use).
    """

    def __init__(
        self, tx: Transactor, changes: RunChanges, clock: Clock, token_interval: timedelta
    ) -> None:
        self._tx = tx
        self._changes = changes
        self._clock = clock
        self._token_interval = token_interval

    async def patch(
        self,
        actor: Principal | BearerToken,
        run_id: uuid.UUID,
        base_version: int,
        ops: Sequence[FollowupOp],
    ) -> RunView:
        """The adapter acknowledges follow-ups: all or nothing, forward only.

        Args:
            actor: the run's agent, or the request's bearer token (resolved in the round
                trip of the run's lock, its last use recorded after the unit: ADR 0026).
            run_id: the run.
            base_version: the version the adapter saw.
            ops: the replacements, in order.

        Returns:
            The run after the patch.

        Raises:
            Unauthenticated: for a bearer token that is unknown or revoked.
            BaseVersionConflict: when the run moved on (carries the current document).
            Conflict: run_not_active for an ended run.
            ValidationFailed: patch_target_missing for a message that is no follow-up.
            FollowupTransitionError: for a change that is not forward (409).
        """

        async def step(uow: UnitOfWork, agent: Principal, run: Run) -> Later[RunView]:
            # The archive is the first refusal (docs/rights.md): each path reads the
            # run's target before it refuses or answers without a change; a change reads
            # it with the changed messages, below.
            if base_version != run.version:
                await run_target(uow, agent, run)
                raise BaseVersionConflict(run_document(await run_view(uow, run, agent.id)))
            if not run.state.active:
                await run_target(uow, agent, run)
                raise Conflict("run not active", reason="run_not_active")
            now = self._clock.now()
            named = list(dict.fromkeys(op.message_id for op in ops if op.message_id is not None))
            states = await uow.followups.lock_many(run.id, named)
            stored = dict(states)
            try:
                for index, op in enumerate(ops):
                    state = None if op.message_id is None else states.get(op.message_id)
                    if state is None or op.message_id is None:
                        raise ValidationFailed(
                            [FieldError(pointer=f"/ops/{index}/path", code="patch_target_missing")]
                        )
                    # Later ops see what earlier ops of the patch did to their follow-up.
                    if advance_followup(state, op.value):
                        states[op.message_id] = op.value
            except (ValidationFailed, InvalidStateTransition):
                await run_target(uow, agent, run)
                raise
            changed_ids = [m for m in named if states[m] is not stored[m]]
            if not changed_ids:
                await run_target(uow, agent, run)
                return await agent_view_later(uow, run)
            # The changed messages (only those: an op may name any id) are read with the
            # thread, in one round trip however many ops changed; taken before their
            # trigger states change, which would make them read again.
            for message_id in changed_ids:
                await uow.messages.prefetch(message_id)
            target = await run_target(uow, agent, run)
            messages = [await uow.messages.get(message_id) for message_id in changed_ids]
            audience = audience_of([m for m in messages if m is not None])
            for value in dict.fromkeys(states[m] for m in changed_ids):
                await uow.followups.set_states(
                    run.id, [m for m in changed_ids if states[m] is value], value, now
                )
            await self._changes.set_trigger_states(
                uow,
                target,
                [m for m in changed_ids if stored[m] is FollowupState.QUEUED],
                TriggerState.FOLLOWUP_DELIVERED,
                None,
            )
            changed = bump_version(run, now)
            await self._changes.store(uow, run, changed, agent, target, audience=audience)
            return await agent_view_later(uow, changed)

        return await move_own_run(
            self._tx,
            actor,
            run_id,
            step,
            goes_on=True,
            clock=self._clock,
            token_interval=self._token_interval,
        )


__all__ = ["FollowupOp", "RunPatchService"]
