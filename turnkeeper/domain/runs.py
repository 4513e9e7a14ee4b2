"""Agent runs: the trigger decision, the invoke check and the run state machine.

Pure rules over plain facts. Only human messages ever trigger: every other origin yields
`NO_TRIGGER` before anything else is looked at, whatever the message mentions.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from datetime import datetime

import attrs

from turnkeeper.domain.errors import InvalidStateTransition
from turnkeeper.domain.messaging import Origin, TriggerState
from turnkeeper.domain.world import BillingMode, ChannelBehavior, Level


class RunState(enum.StrEnum):
    """States of a run: three active, three ended."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING_INPUT = "waiting_input"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def active(self) -> bool:
        """True for queued, running and waiting_input."""
        return self in _ACTIVE


_ACTIVE = frozenset({RunState.QUEUED, RunState.RUNNING, RunState.WAITING_INPUT})
#: The states a run ends in.
END_STATES = frozenset({RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED})


class TriggerKind(enum.StrEnum):
    """What an invocation token was issued for."""

    MESSAGE = "message"
    FOLLOWUP = "followup"


class FailReason(enum.StrEnum):
    """Reasons a trigger fails: the trigger decision's and agent.invoke's.

    The ``trigger_state_reason`` of a message refused at acceptance, and what the audit
    records for every agent.invoke denial; a message refused after its acceptance shows
    the `DeliveryReason` instead (`delivery_reason`).
    """

    AGENT_NOT_ALLOWED_HERE = "agent_not_allowed_here"
    RUN_ACTIVE_OTHER_AGENT = "run_active_other_agent"
    NO_TRIGGER_RIGHT = "no_trigger_right"
    AGENT_NOT_REACHABLE = "agent_not_reachable"
    CHANNEL_ARCHIVED = "channel_archived"
    BILLING_MODE_PERSONAL_NOT_HOLDER = "billing_mode_personal_not_holder"
    ORIGIN_NOT_HUMAN = "origin_not_human"


class EndReason(enum.StrEnum):
    """Reasons the server itself gives when it ends a run."""

    USER_CANCELLED = "user_cancelled"
    CANCEL_TIMEOUT = "cancel_timeout"
    QUEUED_EXPIRED = "queued_expired"
    STALE = "stale"
    AGENT_DISABLED = "agent_disabled"
    INVOKE_DENIED = "invoke_denied"


@attrs.frozen(kw_only=True)
class AgentFacts:
    """What the trigger rules know of an agent.

    Attributes:
        id: the agent.
        enabled: a disabled agent is not reachable.
        billing_mode: organization or personal.
        holder_id: the holder of a personal agent.
    """

    id: uuid.UUID
    enabled: bool = True
    billing_mode: BillingMode = BillingMode.ORGANIZATION
    holder_id: uuid.UUID | None = None


@attrs.frozen(kw_only=True)
class TriggerFacts:
    """Plain facts about a new message, gathered by the application.

    Attributes:
        origin: the message's origin.
        author_id: its author.
        mentions: mentioned principal ids in the order written.
        agents: facts of every mentioned agent (people are absent) and of the operator.
        operator_id: the thread's operator: its fixed operator, or for a main thread the
            channel's effective operator; None when it has none.
        is_main_thread: the message is in a text channel's main thread.
        behavior: the channel's switches.
        guests_with_write: mentioned agents that have write on the thread.
        active_run_id: the thread's active run, if any.
        active_run_agent_id: the agent of that run.
        audience: for a restricted message, the principals who alone may see it; an
            agent outside it is never set in motion by the message (None: public).
    """

    origin: Origin
    author_id: uuid.UUID
    mentions: tuple[uuid.UUID, ...] = ()
    agents: Mapping[uuid.UUID, AgentFacts] = attrs.field(factory=dict)
    operator_id: uuid.UUID | None = None
    is_main_thread: bool = False
    behavior: ChannelBehavior = attrs.field(factory=ChannelBehavior)
    guests_with_write: frozenset[uuid.UUID] = frozenset()
    active_run_id: uuid.UUID | None = None
    active_run_agent_id: uuid.UUID | None = None
    audience: frozenset[uuid.UUID] | None = None


class OutcomeKind(enum.StrEnum):
    """The four outcomes of the trigger decision."""

    NONE = "none"
    INVOKE = "invoke"
    FOLLOWUP = "followup"
    FAILED = "failed"


@attrs.frozen(kw_only=True)
class TriggerOutcome:
    """The trigger decision.

    Attributes:
        kind: none, invoke, followup or failed.
        agent_id: invoke and followup: the candidate agent.
        mentioned: the candidate was mentioned (denials are shown only then).
        run_id: followup: the active run.
        reason: failed: why.
    """

    kind: OutcomeKind
    agent_id: uuid.UUID | None = None
    mentioned: bool = False
    run_id: uuid.UUID | None = None
    reason: FailReason | None = None


NO_TRIGGER = TriggerOutcome(kind=OutcomeKind.NONE)


def decide_trigger(facts: TriggerFacts) -> TriggerOutcome:
    """Decide what a new message sets in motion (DESIGN.md section 5, steps 1 and 2).

    Args:
        facts: the message and its surroundings.

    Returns:
        none; invoke(agent, mentioned) (then the invoke check applies); followup(run);
        or failed(reason).
    """
    if facts.origin is not Origin.HUMAN:
        return NO_TRIGGER

    def sees(agent_id: uuid.UUID) -> bool:
        # An agent that may not read the message cannot be asked to act on it.
        return facts.audience is None or agent_id in facts.audience

    named = [m for m in facts.mentions if m in facts.agents]
    mentioned_agents = [m for m in named if sees(m)]
    operator_id = facts.operator_id if facts.operator_id and sees(facts.operator_id) else None
    candidate: uuid.UUID | None = None
    mentioned = bool(mentioned_agents)
    if named and not mentioned_agents:
        # Every agent the message names is outside its audience: they are passed over,
        # and the operator it did not name is not asked in their place.
        return NO_TRIGGER
    if mentioned_agents:
        candidate = next((m for m in mentioned_agents if m == operator_id), None)
        if candidate is None and facts.behavior.allow_mentioned_agents:
            candidate = next((m for m in mentioned_agents if m in facts.guests_with_write), None)
        if candidate is None:
            return TriggerOutcome(
                kind=OutcomeKind.FAILED, reason=FailReason.AGENT_NOT_ALLOWED_HERE, mentioned=True
            )
    elif operator_id is not None:
        answers = (
            facts.behavior.free_response
            if facts.is_main_thread
            else not facts.behavior.thread_require_mention
        )
        candidate = operator_id if answers else None
    if candidate is None:
        return NO_TRIGGER
    if facts.active_run_id is not None:
        if facts.active_run_agent_id == candidate:
            return TriggerOutcome(
                kind=OutcomeKind.FOLLOWUP,
                agent_id=candidate,
                mentioned=mentioned,
                run_id=facts.active_run_id,
            )
        return TriggerOutcome(
            kind=OutcomeKind.FAILED,
            reason=FailReason.RUN_ACTIVE_OTHER_AGENT,
            agent_id=candidate,
            mentioned=mentioned,
        )
    return TriggerOutcome(kind=OutcomeKind.INVOKE, agent_id=candidate, mentioned=mentioned)


def answers_in_thread(
    agent_id: uuid.UUID,
    *,
    operator_id: uuid.UUID | None,
    behavior: ChannelBehavior,
    agent_level: Level,
) -> bool:
    """Whether an agent may still be set in motion in a thread (DESIGN.md section 5, step 1).

    The standing `decide_trigger` requires of a candidate, without the message: the
    thread's operator now, or a guest the channel allows (``allow_mentioned_agents``)
    with write on the thread. A follow-up becomes the trigger of a follow-on run only
    while its run's agent keeps it.

    Args:
        agent_id: the agent.
        operator_id: the thread's operator now (`turnkeeper.domain.world.thread_operator`).
        behavior: the channel's behaviour.
        agent_level: the agent's effective level on the thread now.

    Returns:
        True when the agent is the operator or an allowed guest with write.
    """
    if agent_id == operator_id:
        return True
    return behavior.allow_mentioned_agents and agent_level >= Level.WRITE


@attrs.frozen(kw_only=True)
class InvokeFacts:
    """Facts of the agent.invoke check (re-checked at every delivery).

    Attributes:
        origin: origin of the triggering message.
        author_id: the person the run acts for.
        author_level: the author's effective level on the thread now.
        channel_archived: the thread's channel is archived.
        agent: the agent to invoke.
    """

    origin: Origin
    author_id: uuid.UUID
    author_level: Level
    channel_archived: bool
    agent: AgentFacts


def check_invoke(facts: InvokeFacts) -> FailReason | None:
    """The agent.invoke rule: may this author set this agent in motion here, now?

    Args:
        facts: the facts of the moment.

    Returns:
        None when allowed, else the reason of the denial.
    """
    if facts.origin is not Origin.HUMAN:
        return FailReason.ORIGIN_NOT_HUMAN
    if facts.channel_archived:
        return FailReason.CHANNEL_ARCHIVED
    if facts.author_level < Level.TRIGGER:
        return FailReason.NO_TRIGGER_RIGHT
    if not facts.agent.enabled:
        return FailReason.AGENT_NOT_REACHABLE
    if (
        facts.agent.billing_mode is BillingMode.PERSONAL
        and facts.agent.holder_id != facts.author_id
    ):
        return FailReason.BILLING_MODE_PERSONAL_NOT_HOLDER
    return None


@attrs.frozen(kw_only=True)
class Run:
    """An agent run in a thread.

    Attributes:
        id: UUIDv7.
        thread_id: the thread.
        agent_id: the agent.
        state: the current state.
        state_reason: the reason of an end state (or of a failure).
        trigger_kind: always ``message`` for the run itself.
        triggering_message_id: the human message that opened it.
        triggered_by: the author of that message.
        version: raised by every stored change.
        cancel_requested: a person asked a running run to stop.
        cancel_requested_at: when (for ``agent.cancel_grace``).
        invocation_jti: the jti of the token the run accepts for resume.
        created_at: creation time.
        updated_at: time of the last stored change.
    """

    id: uuid.UUID
    thread_id: uuid.UUID
    agent_id: uuid.UUID
    state: RunState = RunState.QUEUED
    state_reason: str | None = None
    trigger_kind: TriggerKind = TriggerKind.MESSAGE
    triggering_message_id: uuid.UUID
    triggered_by: uuid.UUID
    version: int = 1
    cancel_requested: bool = False
    cancel_requested_at: datetime | None = None
    invocation_jti: str | None = None
    created_at: datetime
    updated_at: datetime


class Transition(enum.StrEnum):
    """The moves between active states (the agent's start, await input and resume)."""

    START = "start"
    AWAIT_INPUT = "await_input"
    RESUME = "resume"


_MOVES: dict[Transition, tuple[frozenset[RunState], RunState]] = {
    Transition.START: (frozenset({RunState.QUEUED}), RunState.RUNNING),
    Transition.AWAIT_INPUT: (frozenset({RunState.RUNNING}), RunState.WAITING_INPUT),
    Transition.RESUME: (frozenset({RunState.WAITING_INPUT}), RunState.RUNNING),
}


def bump_version(run: Run, at: datetime) -> Run:
    """Raise the version of a run for a stored change that is no transition.

    Every stored change raises the version; the transitions do it through here, and so
    do a follow-up added, acknowledged or refused.

    Args:
        run: the run.
        at: the time of the change.

    Returns:
        The run with version + 1 and `updated_at` set.
    """
    return attrs.evolve(run, version=run.version + 1, updated_at=at)


def request_cancel(run: Run, at: datetime) -> Run:
    """A person asks a running or waiting run to stop (a stored change).

    Args:
        run: the active run (not queued: a queued run ends cancelled at once).
        at: the time of the request (``agent.cancel_grace`` counts from it).

    Returns:
        The run with cancel_requested, its time, version + 1.
    """
    return attrs.evolve(bump_version(run, at), cancel_requested=True, cancel_requested_at=at)


def move(run: Run, transition: Transition, at: datetime) -> Run:
    """Apply start, await_input or resume.

    Args:
        run: the run.
        transition: the move.
        at: the time of the change.

    Returns:
        The changed run (version + 1).

    Raises:
        InvalidStateTransition: when the run is not in the state the move needs.
    """
    sources, target = _MOVES[transition]
    if run.state not in sources:
        raise InvalidStateTransition(f"{transition} from {run.state}")
    return attrs.evolve(bump_version(run, at), state=target)


def end(run: Run, state: RunState, reason: str | None, at: datetime) -> Run:
    """Move an active run to an end state (the server's own end paths use this directly).

    Raises:
        InvalidStateTransition: when the run already ended or the state is not an end.
    """
    if state not in END_STATES or run.state in END_STATES:
        raise InvalidStateTransition(f"end {run.state} as {state}")
    return attrs.evolve(bump_version(run, at), state=state, state_reason=reason)


#: The trigger_state a triggering message shows for each run state.
TRIGGER_STATE_OF: dict[RunState, TriggerState] = {
    RunState.RUNNING: TriggerState.WORKING,
    RunState.WAITING_INPUT: TriggerState.WORKING,
    RunState.COMPLETED: TriggerState.DONE,
    RunState.FAILED: TriggerState.FAILED,
    RunState.CANCELLED: TriggerState.CANCELLED,
}


@attrs.frozen(kw_only=True)
class AnswerRun:
    """What the answer check knows of a named run.

    Attributes:
        id: the run.
        thread_id: its thread.
        agent_id: its agent.
        state: its state.
    """

    id: uuid.UUID
    thread_id: uuid.UUID
    agent_id: uuid.UUID
    state: RunState


class AnswerVerdict(enum.StrEnum):
    """Outcome of the check of an agent answer's run_id."""

    OK = "ok"
    RUN_MISMATCH = "run_mismatch"
    RUN_NOT_ACTIVE = "run_not_active"


def answer_verdict(
    run: AnswerRun | None, found: bool, agent_id: uuid.UUID, thread_id: uuid.UUID
) -> AnswerVerdict:
    """May an agent's message name this run? Ownership before state.

    Args:
        run: the run read with its lock (None when not found).
        found: whether the run exists.
        agent_id: the writing agent.
        thread_id: the message's thread.

    Returns:
        run_mismatch for an unknown run, a run of another thread or of another agent
        (one uniform answer); run_not_active for the agent's own ended run; ok otherwise.
    """
    if not found or run is None or run.thread_id != thread_id or run.agent_id != agent_id:
        return AnswerVerdict.RUN_MISMATCH
    if not run.state.active:
        return AnswerVerdict.RUN_NOT_ACTIVE
    return AnswerVerdict.OK
