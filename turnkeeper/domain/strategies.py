"""Hypothesis strategies for every domain value and the valid inputs of every pure rule.

For people who property-test their own code on top of turnkeeper. This is the one domain
module that imports hypothesis; install it with the optional extra
``pip install 'turnkeeper[hypothesis]'``. Every strategy draws values the domain accepts
(frozen attrs values that pass their own checks), with ids from a small pool so that
draws collide often enough to exercise "same agent", "same run" and "same author" cases.

Example:
    >>> from hypothesis import given
    >>> from turnkeeper.domain.runs import OutcomeKind, decide_trigger
    >>> from turnkeeper.domain.messaging import Origin
    >>> @given(trigger_facts(origin=st.sampled_from([Origin.AGENT, Origin.SYSTEM])))
    ... def test_only_humans_trigger(facts):
    ...     assert decide_trigger(facts).kind is OutcomeKind.NONE
    >>> test_only_humans_trigger()
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from turnkeeper.domain.followups import FollowupMode, FollowupState, OpenFollowup, RunEnd
from turnkeeper.domain.freshness import MessageFreshnessFrontier
from turnkeeper.domain.messaging import (
    REASONED_TRIGGER_STATES,
    Message,
    MessageKind,
    Origin,
    TriggerState,
)
from turnkeeper.domain.runs import (
    END_STATES,
    AgentFacts,
    AnswerRun,
    EndReason,
    InvokeFacts,
    Run,
    RunState,
    TriggerFacts,
)
from turnkeeper.domain.world import (
    AGENT_GRANT_CAP,
    BillingMode,
    Channel,
    ChannelBehavior,
    ChannelType,
    Grant,
    Level,
    OperatorMode,
    Principal,
    PrincipalKind,
    ResourceKind,
    Space,
    Thread,
    ThreadState,
    TitleSource,
    thread_target_key,
)

#: How many distinct ids each pool holds (small pools make collisions likely).
ID_POOL_SIZE = 4
#: The largest sequence number or version drawn.
MAX_SEQ = 10_000
#: The start of drawn times and the span they cover, in seconds.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
TIME_SPAN_SECONDS = 86_400


def _pool(namespace: int) -> st.SearchStrategy[uuid.UUID]:
    # UUIDv7-shaped ids: version 7, RFC 4122 variant, the namespace and index in the low bits.
    return st.integers(1, ID_POOL_SIZE).map(
        lambda n: uuid.UUID(int=(0x0190 << 112) | (0x7 << 76) | (0x2 << 62) | (namespace << 16) | n)
    )


#: Ids of people, agents, threads, runs and messages (each from its own small pool).
person_ids = _pool(1)
agent_ids = _pool(2)
thread_ids = _pool(3)
run_ids = _pool(4)
message_ids = _pool(5)
space_ids = _pool(6)
channel_ids = _pool(7)
times = st.integers(0, TIME_SPAN_SECONDS).map(lambda s: EPOCH + timedelta(seconds=s))
seqs = st.integers(0, MAX_SEQ)
versions = st.integers(1, MAX_SEQ)

levels = st.sampled_from(Level)
origins = st.sampled_from(Origin)
run_states = st.sampled_from(RunState)
active_run_states = st.sampled_from([s for s in RunState if s.active])
end_states = st.sampled_from(sorted(END_STATES))
trigger_states = st.sampled_from(TriggerState)
followup_states = st.sampled_from(FollowupState)
followup_modes = st.sampled_from(FollowupMode)
end_reasons = st.sampled_from([r.value for r in EndReason])
behaviors = st.builds(
    ChannelBehavior,
    free_response=st.booleans(),
    allow_mentioned_agents=st.booleans(),
    thread_require_mention=st.booleans(),
)


@st.composite
def people(draw: st.DrawFn, owner: st.SearchStrategy[bool] | None = None) -> Principal:
    """A person (the owner when `owner` draws True; sometimes the owner when None)."""
    return Principal(
        id=draw(person_ids),
        kind=PrincipalKind.PERSON,
        handle=draw(st.sampled_from(["alex", "sam", "robin"])),
        is_owner=draw(owner if owner is not None else st.booleans()),
        created_at=draw(times),
    )


@st.composite
def agents(draw: st.DrawFn) -> Principal:
    """An agent: organization or personal (with a holder), enabled or not, any capability."""
    personal = draw(st.booleans())
    return Principal(
        id=draw(agent_ids),
        kind=PrincipalKind.AGENT,
        handle=draw(st.sampled_from(["lotse", "texter", "assistent"])),
        billing_mode=BillingMode.PERSONAL if personal else BillingMode.ORGANIZATION,
        holder_id=draw(person_ids) if personal else None,
        supports_followups=draw(st.none() | st.booleans()),
        enabled=draw(st.booleans()),
        reported_followups=draw(st.none() | st.sampled_from(["steer", "queue", "other"])),
        created_at=draw(times),
    )


principals = people() | agents()


@st.composite
def spaces(draw: st.DrawFn) -> Space:
    """A space, with or without a default operator."""
    return Space(
        id=draw(space_ids),
        name=draw(st.sampled_from(["Support", "Marketing", "Research"])),
        default_operator_id=draw(st.none() | agent_ids),
        created_by=draw(person_ids),
        created_at=draw(times),
    )


@st.composite
def channels(draw: st.DrawFn, space_id: st.SearchStrategy[uuid.UUID] = space_ids) -> Channel:
    """A channel of any type, operator mode, behaviour and archive state."""
    kind = draw(st.sampled_from(ChannelType))
    mode = draw(st.sampled_from(OperatorMode))
    return Channel(
        id=draw(channel_ids),
        space_id=draw(space_id),
        name=draw(st.sampled_from(["Allgemein", "Eskalation", "Reports"])),
        type=kind,
        operator_mode=mode,
        operator_id=draw(agent_ids) if mode is OperatorMode.AGENT else None,
        behavior=draw(behaviors),
        archived=draw(st.booleans()),
        main_thread_id=draw(thread_ids) if kind is ChannelType.TEXT else None,
        created_at=draw(times),
    )


@st.composite
def threads(draw: st.DrawFn, channel_id: st.SearchStrategy[uuid.UUID] = channel_ids) -> Thread:
    """A thread: a main thread never has a fixed operator."""
    is_main = draw(st.booleans())
    return Thread(
        id=draw(thread_ids),
        channel_id=draw(channel_id),
        is_main=is_main,
        title=draw(st.none() | st.text(max_size=20)),
        title_source=draw(st.sampled_from(TitleSource)),
        operator_agent_id=None if is_main else draw(st.none() | agent_ids),
        state=draw(st.sampled_from(ThreadState)),
        latest_seq=draw(seqs),
        has_restricted=draw(st.booleans()),
        created_by=draw(person_ids),
        created_at=draw(times),
    )


@st.composite
def grants(draw: st.DrawFn, principal: Principal | None = None) -> Grant:
    """A stored grant (never level none; at most write for an agent)."""
    kind = draw(st.sampled_from(ResourceKind))
    top = AGENT_GRANT_CAP if principal is not None and principal.is_agent else Level.TRIGGER
    return Grant(
        id=draw(st.uuids(version=4)),
        principal_id=principal.id if principal is not None else draw(person_ids | agent_ids),
        resource_kind=kind,
        resource_id=draw(space_ids if kind is ResourceKind.SPACE else channel_ids),
        level=draw(st.sampled_from([lv for lv in Level if Level.NONE < lv <= top])),
        created_at=draw(times),
    )


@st.composite
def messages(draw: st.DrawFn) -> Message:
    """A stored message: only human ones carry a trigger_state; only run anchors a run_id."""
    origin = draw(origins)
    kind = MessageKind.RUN if origin is Origin.SYSTEM and draw(st.booleans()) else None
    kind = kind or (MessageKind.SYSTEM if origin is Origin.SYSTEM else MessageKind.TEXT)
    state = draw(st.none() | trigger_states) if origin is Origin.HUMAN else None
    return Message(
        id=draw(message_ids),
        thread_id=draw(thread_ids),
        thread_seq=draw(st.integers(1, MAX_SEQ)),
        author_id=draw(agent_ids if origin is not Origin.HUMAN else person_ids),
        origin=origin,
        kind=kind,
        content=draw(st.text(max_size=40)),
        mentions=tuple(draw(st.lists(person_ids | agent_ids, max_size=3))),
        trigger_state=state,
        trigger_state_reason=draw(st.none() | st.sampled_from(["no_trigger_right"]))
        if state in REASONED_TRIGGER_STATES
        else None,
        run_id=draw(run_ids) if kind is MessageKind.RUN else None,
        created_at=draw(times),
        version=draw(versions),
    )


@st.composite
def runs(draw: st.DrawFn, state: st.SearchStrategy[RunState] = run_states) -> Run:
    """A run in any (or the given) state."""
    created = draw(times)
    drawn = draw(state)
    cancel = drawn.active and draw(st.booleans())
    return Run(
        id=draw(run_ids),
        thread_id=draw(thread_ids),
        agent_id=draw(agent_ids),
        state=drawn,
        state_reason=None if drawn.active else draw(st.none() | end_reasons),
        triggering_message_id=draw(message_ids),
        triggered_by=draw(person_ids),
        version=draw(versions),
        cancel_requested=cancel,
        cancel_requested_at=created if cancel else None,
        created_at=created,
        updated_at=created,
    )


@st.composite
def agent_facts(draw: st.DrawFn, agent_id: st.SearchStrategy[uuid.UUID] = agent_ids) -> AgentFacts:
    """What the trigger rules know of an agent."""
    personal = draw(st.booleans())
    return AgentFacts(
        id=draw(agent_id),
        enabled=draw(st.booleans()),
        billing_mode=BillingMode.PERSONAL if personal else BillingMode.ORGANIZATION,
        holder_id=draw(st.none() | person_ids) if personal else None,
    )


@st.composite
def trigger_facts(draw: st.DrawFn, origin: st.SearchStrategy[Origin] = origins) -> TriggerFacts:
    """Facts of `decide_trigger` as the application gathers them.

    `agents` holds every mentioned agent and the operator (people are absent from it);
    an active run always has an agent.
    """
    mentioned_people = draw(st.lists(person_ids, max_size=2))
    mentioned_agents = draw(st.lists(agent_ids, max_size=3))
    mentions = tuple(draw(st.permutations(mentioned_people + mentioned_agents)))
    operator = draw(st.none() | agent_ids)
    known = sorted(set(mentioned_agents) | ({operator} if operator else set()))
    has_run = draw(st.booleans())
    return TriggerFacts(
        origin=draw(origin),
        author_id=draw(person_ids),
        mentions=mentions,
        agents={a: draw(agent_facts(st.just(a))) for a in known},
        operator_id=operator,
        is_main_thread=draw(st.booleans()),
        behavior=draw(behaviors),
        guests_with_write=frozenset(draw(st.sets(agent_ids))),
        active_run_id=draw(run_ids) if has_run else None,
        active_run_agent_id=draw(agent_ids) if has_run else None,
    )


@st.composite
def invoke_facts(draw: st.DrawFn, origin: st.SearchStrategy[Origin] = origins) -> InvokeFacts:
    """Facts of `check_invoke` (the agent.invoke rule)."""
    return InvokeFacts(
        origin=draw(origin),
        author_id=draw(person_ids),
        author_level=draw(levels),
        channel_archived=draw(st.booleans()),
        agent=draw(agent_facts()),
    )


@st.composite
def open_followups(draw: st.DrawFn, max_size: int = ID_POOL_SIZE) -> list[OpenFollowup]:
    """Open follow-ups of one run: distinct messages, distinct thread_seqs, any authors."""
    ids = draw(st.lists(message_ids, unique=True, max_size=max_size))
    thread_seqs = draw(
        st.lists(st.integers(1, MAX_SEQ), unique=True, min_size=len(ids), max_size=len(ids))
    )
    return [
        OpenFollowup(
            message_id=message_id,
            thread_seq=seq,
            author_id=draw(person_ids),
            deleted=draw(st.booleans()),
        )
        for message_id, seq in zip(ids, thread_seqs, strict=True)
    ]


run_ends = st.builds(
    RunEnd,
    state=end_states,
    reason=st.none() | st.sampled_from([r.value for r in EndReason]),
)
"""How a run ends: an end state with any of the server's reasons (or none)."""


@st.composite
def answer_runs(draw: st.DrawFn) -> AnswerRun:
    """What `answer_verdict` knows of a named run."""
    return AnswerRun(
        id=draw(run_ids),
        thread_id=draw(thread_ids),
        agent_id=draw(agent_ids),
        state=draw(run_states),
    )


@st.composite
def freshness_frontiers(draw: st.DrawFn) -> MessageFreshnessFrontier:
    """A session's frontier: observed <= latest known, refresh in (observed, latest]."""
    observed = draw(seqs)
    latest = draw(st.integers(observed, observed + MAX_SEQ))
    refresh = draw(st.just(0) | st.integers(observed + 1, latest)) if latest > observed else 0
    return MessageFreshnessFrontier(
        target_key=thread_target_key(draw(thread_ids)),
        observed_seq=observed,
        latest_known_seq=latest,
        needs_refresh_until_seq=refresh,
        source_message_id=draw(st.none() | message_ids.map(str)),
    )


__all__ = [
    "active_run_states",
    "agent_facts",
    "agent_ids",
    "agents",
    "answer_runs",
    "behaviors",
    "channels",
    "end_reasons",
    "end_states",
    "followup_modes",
    "followup_states",
    "freshness_frontiers",
    "grants",
    "invoke_facts",
    "levels",
    "messages",
    "open_followups",
    "origins",
    "people",
    "person_ids",
    "principals",
    "run_ends",
    "run_ids",
    "run_states",
    "runs",
    "spaces",
    "thread_ids",
    "threads",
    "trigger_facts",
    "trigger_states",
]
