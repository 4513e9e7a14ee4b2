"""The run lifecycle: read, start, await input, resume, finish (the agent) and cancel.

The agent moves its own run with the token of the delivery (start with the
invocation's, resume with the follow-up's delivered while waiting); a person with
trigger on the thread cancels. Every end goes through `RunEnder.end`.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import attrs

from turnkeeper.application.errors import InvalidToken
from turnkeeper.application.event_factory import EventFactory
from turnkeeper.application.ports import (
    Clock,
    InvocationClaims,
    TokenSigner,
    UnitOfWork,
)
from turnkeeper.application.services.access import authorized_thread, thread_target
from turnkeeper.application.services.identity import BearerToken
from turnkeeper.application.services.runs.changes import RunChanges
from turnkeeper.application.services.runs.guards import (
    MoveStep,
    move_own_run,
    readable_target,
    run_target,
)
from turnkeeper.application.services.runs.run_end import RunEnder
from turnkeeper.application.services.runs.views import RunView, agent_view_later, run_view
from turnkeeper.application.transactions import Later, Transactor
from turnkeeper.domain.authorization import AccessTarget, Action
from turnkeeper.domain.errors import (
    InvalidStateTransition,
    NotFound,
    character_errors,
    reject_invalid,
)
from turnkeeper.domain.finish import finish, finish_reason
from turnkeeper.domain.runs import (
    EndReason,
    Run,
    RunState,
    Transition,
    TriggerKind,
    move,
    request_cancel,
)
from turnkeeper.domain.world import Principal


class RunLifecycleService:
    """GET /v1/runs/{id} and the state changes of a run.

    Args:
        tx: the transactor.
        ender: the one end-of-run function.
        changes: stores run changes.
        events: the event factory.
        clock: the time.
        signer: verifies invocation tokens.
        token_interval: ``auth.token_last_used_interval`` (a bearer token's use).
    """

    def __init__(
        self,
        tx: Transactor,
        ender: RunEnder,
        changes: RunChanges,
        events: EventFactory,
        clock: Clock,
        signer: TokenSigner,
        token_interval: timedelta,
    ) -> None:
        self._tx = tx
        self._ender = ender
        self._changes = changes
        self._events = events
        self._clock = clock
        self._signer = signer
        self._token_interval = token_interval

    async def get(self, actor: Principal, run_id: uuid.UUID) -> RunView:
        """The run document for a reader of its thread.

        Args:
            actor: the caller.
            run_id: the run.

        Returns:
            The run with its follow-ups.

        Raises:
            NotFound: for an unknown run or a caller without read on its thread.
        """

        async def work(uow: UnitOfWork) -> RunView:
            run = await uow.runs.get(run_id)
            if run is None:
                raise NotFound()
            await readable_target(uow, actor, run)
            return await run_view(uow, run, actor.id)

        return await self._tx.read(work)

    async def start(self, actor: Principal | BearerToken, run_id: uuid.UUID, token: str) -> RunView:
        """Queued -> running with the token of the invocation's delivery.

        A repeated start with the same token is a no-op.

        Args:
            actor: the run's agent, or the request's bearer token (see `_as_run_agent`).
            run_id: the run.
            token: the invocation token.

        Returns:
            The run after the change.

        Raises:
            Unauthenticated: for a bearer token that is unknown or revoked.
            InvalidToken: malformed, expired, or for another run.
            InvalidStateTransition: when the run is not queued.
        """

        async def work(uow: UnitOfWork, agent: Principal, run: Run) -> Later[RunView]:
            target = await run_target(uow, agent, run)
            claims = self._claims(token, run)
            if claims.trigger_kind is not TriggerKind.MESSAGE or claims.sub != run.triggered_by:
                raise InvalidToken("run_mismatch")
            if run.state is RunState.RUNNING and run.invocation_jti == claims.jti:
                return await agent_view_later(uow, run)
            changed = attrs.evolve(
                move(run, Transition.START, self._clock.now()), invocation_jti=claims.jti
            )
            return await self._store(uow, run, changed, agent, target)

        return await self._as_run_agent(actor, run_id, work, goes_on=True)

    async def await_input(self, actor: Principal | BearerToken, run_id: uuid.UUID) -> RunView:
        """Running -> waiting_input.

        Args:
            actor: the run's agent, or the request's bearer token (see `_as_run_agent`).
            run_id: the run.

        Returns:
            The run after the change.

        Raises:
            Unauthenticated: for a bearer token that is unknown or revoked.
            InvalidStateTransition: when the run is not running.
        """

        async def work(uow: UnitOfWork, agent: Principal, run: Run) -> Later[RunView]:
            target = await run_target(uow, agent, run)
            # No token resumes the run until a follow-up is delivered while it waits:
            # the start token (or an earlier answer's) was consumed by its own move.
            changed = attrs.evolve(
                move(run, Transition.AWAIT_INPUT, self._clock.now()), invocation_jti=None
            )
            return await self._store(uow, run, changed, agent, target)

        return await self._as_run_agent(actor, run_id, work, goes_on=True)

    async def resume(
        self, actor: Principal | BearerToken, run_id: uuid.UUID, token: str
    ) -> RunView:
        """waiting_input -> running, only with the token of the latest delivery.

        Only the token of a follow-up delivered while the run waits resumes it: the
        start token, and the token of an answer that resumed the run before, are
        consumed (``superseded``), also when no follow-up came since.

        Args:
            actor: the run's agent, or the request's bearer token (see `_as_run_agent`).
            run_id: the run.
            token: the token of the follow-up delivered while the run waited.

        Returns:
            The run after the change.

        Raises:
            Unauthenticated: for a bearer token that is unknown or revoked.
            InvalidToken: superseded for an older or consumed token (the start token
                among them); run_mismatch for another run's.
            InvalidStateTransition: when the run is not waiting for input.
        """

        async def work(uow: UnitOfWork, agent: Principal, run: Run) -> Later[RunView]:
            target = await run_target(uow, agent, run)
            claims = self._claims(token, run)
            changed = move(run, Transition.RESUME, self._clock.now())
            if claims.trigger_kind is not TriggerKind.FOLLOWUP or claims.jti != run.invocation_jti:
                raise InvalidToken("superseded")
            return await self._store(uow, run, changed, agent, target)

        return await self._as_run_agent(actor, run_id, work, goes_on=True)

    async def finish(
        self,
        actor: Principal | BearerToken,
        run_id: uuid.UUID,
        state: RunState,
        reason: str | None,
    ) -> RunView:
        """The agent ends its run; repeating the same end is a no-op.

        Args:
            actor: the run's agent, or the request's bearer token (see `_as_run_agent`).
            run_id: the run.
            state: completed, failed or cancelled.
            reason: optional reason.

        Returns:
            The ended run.

        Raises:
            Unauthenticated: for a bearer token that is unknown or revoked.
            InvalidStateTransition: from queued, or to another end than the stored one.
            ValidationFailed: ``/reason`` invalid_character for a NUL in the reason.
        """

        async def work(uow: UnitOfWork, agent: Principal, run: Run) -> Later[RunView]:
            # Checked once the caller is known to be the run's agent: others learn nothing.
            reject_invalid(character_errors({"/reason": reason}))
            if finish(run, state, reason, self._clock.now()) is None:
                return await agent_view_later(uow, run)
            # The triggering message, its author (its message.updated) and the agent
            # (the settlement's follow-on choice) arrive with the thread.
            await uow.principals.prefetch([run.triggered_by, run.agent_id])
            await uow.messages.prefetch(run.triggering_message_id)
            # In an archived channel too: its agent may end a run there, never go on with it.
            target = await thread_target(uow, run.thread_id)
            # The caller's principal is the one it authenticated with: the settlement
            # reads the agent as stored now (its reported follow-up mode, its status).
            stored_reason = finish_reason(run, state, reason)
            ended = await self._ender.end(uow, run, target, state, stored_reason, actor=agent)
            return await agent_view_later(uow, ended)

        return await self._as_run_agent(actor, run_id, work, goes_on=False)

    async def _as_run_agent(
        self, actor: Principal | BearerToken, run_id: uuid.UUID, step: MoveStep, *, goes_on: bool
    ) -> RunView:
        """`move_own_run` with this service's transactor, clock and token interval."""
        return await move_own_run(
            self._tx,
            actor,
            run_id,
            step,
            goes_on=goes_on,
            clock=self._clock,
            token_interval=self._token_interval,
        )

    async def cancel(self, person: Principal, run_id: uuid.UUID) -> RunView:
        """A person with trigger stops a run.

        A queued run ends cancelled / user_cancelled at once; a running or waiting run
        gets cancel_requested (a stored change) and run.cancel_requested goes to the
        agent, which confirms with finish cancelled (or the cancel timeout job ends it).

        Args:
            person: the caller.
            run_id: the run.

        Returns:
            The run after the request (repeats change nothing).

        Raises:
            AccessDenied: without trigger on the thread (not_found without read).
            InvalidStateTransition: for a run that ended other than cancelled.
        """

        async def work(uow: UnitOfWork) -> RunView:
            run = await uow.runs.lock(run_id)
            if run is None:
                raise NotFound()
            target = await authorized_thread(uow, person, Action.RUN_CANCEL, run.thread_id)
            if run.state is RunState.QUEUED:
                ended = await self._ender.end(
                    uow,
                    run,
                    target,
                    RunState.CANCELLED,
                    EndReason.USER_CANCELLED.value,
                    actor=person,
                )
                return await run_view(uow, ended, person.id)
            if not run.state.active:
                if run.state is RunState.CANCELLED:
                    return await run_view(uow, run, person.id)
                raise InvalidStateTransition(f"cancel {run.state}")
            if run.cancel_requested:
                return await run_view(uow, run, person.id)
            changed = request_cancel(run, self._clock.now())
            await self._changes.store(uow, run, changed, person, target)
            await uow.events.append(self._events.run_cancel_requested(run, person, target))
            return await run_view(uow, changed, person.id)

        return await self._tx.run(work)

    async def _store(
        self, uow: UnitOfWork, run: Run, changed: Run, agent: Principal, target: AccessTarget
    ) -> Later[RunView]:
        """Store an agent's move of its run (its target read first, `run_target`)."""
        await self._changes.store(uow, run, changed, agent, target)
        return await agent_view_later(uow, changed)

    def _claims(self, token: str, run: Run) -> InvocationClaims:
        """The claims of a valid token for this run."""
        claims = self._signer.verify(token, self._clock.now())
        if claims.run_id != run.id:
            raise InvalidToken("run_mismatch")
        return claims


__all__ = ["RunLifecycleService"]
