"""Model-based differential test: the memory adapter and PostgreSQL behave the same.

A Hypothesis `RuleBasedStateMachine` drives people and agents of the demo world through
the application services (posts with and without mentions, restricted posts, new forum
threads, replays and idempotency conflicts, polls and acks, start, await input, resume,
finish, cancel, follow-up patches, agent answers with run_id, agent sends through the
freshness gate, heartbeats and agent configuration, grants and revocations, closing
threads, and the jobs after moving the clock). Every step runs on two service stacks
built with identical `SequentialIds` and `FakeClock`: one over the memory adapter, one
over a fresh PostgreSQL database. Both must give the same answer (value or error code),
and after every step the observable state of both must be equal (per thread the messages
with thread_seq, origin, kind, trigger_state and reason; every run with state, reason,
version and follow-up states; the shared events and every agent's personal events in
order) while PostgreSQL holds every invariant of `turnkeeper.adapters.postgres.invariants`.

Hypothesis state machines are synchronous: the async services run through one event loop
the machine owns (`asyncio.Runner`), with the PostgreSQL pool created in that loop.
"""

from __future__ import annotations

import asyncio
import collections
import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg_pool import AsyncConnectionPool

from tests.support.database import create_database, database_conninfo, drop_database
from tests.support.fakes import FakeClock
from tests.support.services import services_over
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.adapters.postgres.invariants import check_invariants
from turnkeeper.adapters.postgres.uow import Conn, PostgresUnitOfWorkFactory, create_pool
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.errors import BaseVersionConflict
from turnkeeper.application.ports import ReaderScope, UnitOfWorkFactory
from turnkeeper.application.services.agent_send import AgentSend, SendFreshness
from turnkeeper.application.services.runs import FollowupOp
from turnkeeper.domain.errors import DomainError, ValidationFailed
from turnkeeper.domain.events import Event, EventType
from turnkeeper.domain.followups import OPEN_STATES as OPEN_FOLLOWUP_STATES
from turnkeeper.domain.followups import FollowupState
from turnkeeper.domain.messaging import MessageDraft, MessageKind
from turnkeeper.domain.runs import RunState
from turnkeeper.domain.world import Level, ResourceKind, thread_target_key

#: Hypothesis examples (each one a fresh database and demo world on both stacks).
MAX_EXAMPLES = 55
#: Steps per example.
STATEFUL_STEP_COUNT = 50
#: A fixed sequence of examples: the run takes the same time and reaches the same paths
#: (`MUST_REACH`) every time; Hypothesis's swarm testing otherwise sometimes spends a
#: whole run on a few rules. Set it to False locally to search new sequences.
DERANDOMIZE = True
#: Connections of the PostgreSQL stack's pool.
POOL_MAX_SIZE = 4
#: Page size when the observation reads messages and events.
OBSERVE_PAGE = 500
#: Upper bound of the index strategies (an index is taken modulo the list it picks from).
INDEX_MAX = 1000
#: Clock moves of the jobs rule: a little, and just beyond each job's window.
JOB_ADVANCES = ("small", "small", "small", "cancel_grace", "queued_max_age", "stall_after")
SMALL_ADVANCE_SECONDS = 7

PEOPLE = ("alex", "sam", "robin")
AGENTS = ("lotse", "texter", "assistent")
TEXT_CHANNELS = ("allgemein", "eskalation", "kampagnen", "notizen")
FORUMS = ("bulletin", "reports", "ideas")
SPACES = ("support", "marketing", "research")
#: The space of each channel of the demo world.
SPACE_OF = {
    "allgemein": "support",
    "eskalation": "support",
    "reports": "support",
    "bulletin": "support",
    "kampagnen": "marketing",
    "ideas": "marketing",
    "notizen": "research",
}
#: The person with trigger on a space, and the space's default operator.
TRIGGERER = {"support": "alex", "marketing": "sam", "research": "robin"}
OPERATOR = {"support": "lotse", "marketing": "texter", "research": "assistent"}
#: What each agent reports at the start (the heartbeat rule changes it).
INITIAL_FOLLOWUP_MODES = {"lotse": "steer", "texter": "queue", "assistent": "steer"}
ACTIVE = frozenset({RunState.QUEUED, RunState.RUNNING, RunState.WAITING_INPUT})
END_STATES = (RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED)
PATCH_VALUES = (FollowupState.DELIVERED, FollowupState.ABSORBED)
#: What `agent_step` does with a running run, step after step (the usual life of a run:
#: it resumes in between, after the question).
RUNNING_ACTIONS = ("await_input", "patch", "answer", "finish")
#: Actions one `agent_step` takes at most.
AGENT_STEP_MAX_ACTIONS = 4
#: One `agent_step` in this many picks its action at random instead of the next one.
RANDOM_ACTION_EVERY = 5
#: Agent actions of the run every example starts with (start, await input, resume,
#: patch, answer: it is left running).
INITIAL_RUN_STEPS = 5

indexes = st.integers(min_value=0, max_value=INDEX_MAX)
people = st.sampled_from(PEOPLE)
agents = st.sampled_from(AGENTS)
maybe_agent = st.none() | agents
#: Mostly true: the fitting run, the own newest token.
biased = st.sampled_from((True, True, True, False))
#: Mostly false: another agent, a stale version, a wrong target.
unlikely = st.sampled_from((False, False, False, True))


def _pick(items: list[Any], index: int) -> Any:
    return items[index % len(items)]


@attrs.define
class Stack:
    """One service stack: services, its world, its clock and its feed cursors."""

    name: str
    services: Services
    world: DemoWorld
    clock: FakeClock
    cursors: dict[str, int] = attrs.Factory(dict)


def _outcome_error(exc: DomainError) -> tuple[object, ...]:
    errors = exc.errors if isinstance(exc, ValidationFailed) else ()
    current = exc.current if isinstance(exc, BaseVersionConflict) else None
    return ("error", type(exc).__name__, exc.code, exc.reason, errors, current)


async def _attempt(call: Awaitable[Any], project: Callable[[Any], object]) -> object:
    try:
        value = await call
    except DomainError as exc:
        return _outcome_error(exc)
    return ("ok", project(value))


def _same(value: object) -> object:
    return value


def _event_view(event: Event) -> tuple[object, ...]:
    # Everything but the seq: PostgreSQL may leave seq gaps behind rolled back units.
    return (
        event.type,
        event.actor_id,
        event.resource_kind,
        event.resource_id,
        event.resource_version,
        event.audience_id,
        dict(event.payload),
        event.created_at,
    )


async def observe(stack: Stack, thread_ids: list[uuid.UUID]) -> dict[str, object]:
    """The observable state of a stack: threads, messages, runs, follow-ups, events."""
    robin = stack.world.principal("robin").id
    threads: dict[uuid.UUID, object] = {}
    runs: dict[uuid.UUID, object] = {}
    async with stack.services.uow() as uow:
        for thread_id in thread_ids:
            thread = await uow.threads.get(thread_id)
            assert thread is not None
            # Every restricted message of the machine names Robin, so he sees them all.
            messages = await uow.messages.list_visible(thread_id, robin, 0, OBSERVE_PAGE)
            assert len(messages) < OBSERVE_PAGE
            threads[thread_id] = (
                thread.latest_seq,
                thread.state,
                thread.operator_agent_id,
                [
                    (
                        m.id,
                        m.thread_seq,
                        m.author_id,
                        m.origin,
                        m.kind,
                        m.content,
                        m.trigger_state,
                        m.trigger_state_reason,
                        m.run_id,
                        m.restricted_to,
                        m.version,
                    )
                    for m in messages
                ],
            )
            for message in messages:
                if message.kind is MessageKind.RUN and message.run_id is not None:
                    run = await uow.runs.get(message.run_id)
                    assert run is not None
                    followups = await uow.followups.states(run.id)
                    runs[run.id] = (
                        run.thread_id,
                        run.agent_id,
                        run.state,
                        run.state_reason,
                        run.version,
                        run.cancel_requested,
                        run.triggering_message_id,
                        sorted(followups.items()),
                        run.triggered_by,
                    )
        shared = await uow.events.read(
            ReaderScope(reader_id=robin, everything=True), 0, OBSERVE_PAGE
        )
        assert len(shared) < OBSERVE_PAGE
        personal = {
            handle: [
                _event_view(e)
                for e in await uow.agent_feed.read(
                    stack.world.principal(handle).id, 0, OBSERVE_PAGE
                )
            ]
            for handle in AGENTS
        }
    return {
        "threads": threads,
        "runs": runs,
        "shared_events": [_event_view(e) for e in shared],
        "personal_events": personal,
    }


class Differential(RuleBasedStateMachine):
    """Memory against PostgreSQL, step by step."""

    #: Set by the test before the machine runs: the server and the migrated template.
    server: ClassVar[str] = ""
    template: ClassVar[str] = ""
    #: Answers seen over the whole run, by rule and outcome.
    seen: ClassVar[collections.Counter[tuple[str, str]]] = collections.Counter()

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.pool: AsyncConnectionPool[Conn] | None = None
        self.dbname: str | None = None
        self.step = 0
        self.threads: list[uuid.UUID] = []
        self.space_of: dict[uuid.UUID, str] = {}
        self.tokens: list[tuple[uuid.UUID, str]] = []
        #: The newest token per (run, delivered event type).
        self.newest: dict[tuple[uuid.UUID, EventType], str] = {}
        #: Running steps `agent_step` took per run.
        self.progress: dict[uuid.UUID, int] = {}
        #: The memory stack's observation after the last step (rules pick targets from it).
        self.last: dict[str, Any] = {}
        self.posts: list[tuple[str, uuid.UUID, str, str]] = []
        self.grants: list[uuid.UUID] = []
        self.demo_grants: list[uuid.UUID] = []
        self.stacks = self.runner.run(self._build())

    async def _build(self) -> list[Stack]:
        self.dbname = await create_database(self.server, template=self.template)
        self.pool = await create_pool(
            database_conninfo(self.server, self.dbname), min_size=1, max_size=POOL_MAX_SIZE
        )
        factories: list[tuple[str, UnitOfWorkFactory]] = [
            ("memory", MemoryUnitOfWorkFactory()),
            ("postgres", PostgresUnitOfWorkFactory(self.pool)),
        ]
        stacks = []
        for name, factory in factories:
            clock = FakeClock()
            services = services_over(factory, clock=clock)
            world = await build_demo_world(services)
            for agent, mode in INITIAL_FOLLOWUP_MODES.items():
                await services.runs.heartbeat(world.principal(agent), mode)
            stacks.append(Stack(name=name, services=services, world=world, clock=clock))
        memory = stacks[0]
        for channel in TEXT_CHANNELS:
            main = memory.world.channels[channel].main_thread_id
            assert main is not None
            self.threads.append(main)
            self.space_of[main] = SPACE_OF[channel]
        async with memory.services.uow() as uow:
            for handle in ("alex", "sam", "lotse", "texter"):
                grants = await uow.grants.for_principal(memory.world.principal(handle).id)
                self.demo_grants.extend(sorted(g.id for g in grants))
        self.last = await observe(memory, self.threads)
        return stacks

    def teardown(self) -> None:
        async def close() -> None:
            if self.pool is not None:
                await self.pool.close()
            if self.dbname is not None:
                await drop_database(self.server, self.dbname)

        try:
            self.runner.run(close())
        finally:
            self.runner.close()

    # -- running one call on both stacks ------------------------------------------------

    def both(
        self,
        call: Callable[[Stack], Awaitable[Any]],
        project: Callable[[Any], object] = _same,
        label: str | None = None,
    ) -> object:
        """Run a call on both stacks; the answers must be equal. Returns the memory one.

        The answer is counted under `label` (the calling rule's name by default).
        """
        self.step += 1
        outcomes = [self.runner.run(_attempt(call(s), project)) for s in self.stacks]
        assert outcomes[0] == outcomes[1], f"memory: {outcomes[0]}\npostgres: {outcomes[1]}"
        rule_name = label or sys._getframe(1).f_code.co_name
        answer = outcomes[0]
        assert isinstance(answer, tuple)
        self.seen[(rule_name, "ok" if answer[0] == "ok" else f"{answer[2]}/{answer[3]}")] += 1
        return outcomes[0]

    def _client_id(self, prefix: str) -> str:
        return f"{prefix}-{self.step}"

    # -- people write -------------------------------------------------------------------

    def _post(
        self,
        who: str,
        thread_id: uuid.UUID,
        mention: str | None,
        restricted_to: str | None = None,
        *,
        label: str,
    ) -> None:
        client_id = self._client_id("post")
        content = f"{who} writes {client_id}"
        audience = None if restricted_to is None else tuple(sorted({restricted_to, "robin"}))

        def call(s: Stack) -> Awaitable[Any]:
            draft = MessageDraft(
                client_msg_id=client_id,
                content=content,
                mentions=() if mention is None else (s.world.principal(mention).id,),
                restricted_to=None
                if audience is None
                else tuple(s.world.principal(h).id for h in audience),
            )
            return s.services.conversation.create_message(s.world.principal(who), thread_id, draft)

        outcome = self.both(call, lambda p: (p.message, p.replayed), label)
        if outcome[0] == "ok" and audience is None:  # type: ignore[index]
            self.posts.append((who, thread_id, client_id, content))

    @initialize(thread=indexes)
    def a_run_in_progress(self, thread: int) -> None:
        """Every example starts with a run in the middle of its life, compared on both stacks.

        The triggerer of a text channel names its operator, and the agent starts the run,
        asks for input, resumes on the answer, acknowledges a follow-up and answers
        (`agent_step`'s usual order), leaving the run running: whatever the draws, the
        rules that act on runs (cancel, patch, finish, follow-ups) have one from the first
        step, instead of depending on the swarm choosing to open one.
        """
        thread_id = _pick(self.threads, thread)
        space = self.space_of[thread_id]
        self._post(TRIGGERER[space], thread_id, OPERATOR[space], label="trigger")
        self.same_observable_state()
        queued = [r for r in self._runs(frozenset({RunState.QUEUED})) if r[0] in self.last["runs"]]
        assert queued, "the operator's mention opens a run"
        run_id, agent = queued[0]
        # start, await_input, reply and resume, patch, answer: the first five of its life.
        for step in range(INITIAL_RUN_STEPS):
            if self.last["runs"][run_id][2] not in ACTIVE:
                return
            # A choice of 1 modulo RANDOM_ACTION_EVERY takes the scripted action, in order:
            # a multiple of it would pick at random (start, patch, answer, finish).
            self._agent_action(run_id, agent, step * RANDOM_ACTION_EVERY + 1)
            self.same_observable_state()

    @rule(thread=indexes, mention=st.booleans())
    def trigger(self, thread: int, mention: bool) -> None:
        """The person with trigger on the thread's space writes, maybe naming its operator.

        Opens runs, and adds follow-ups to the active ones.
        """
        thread_id = _pick(self.threads, thread)
        space = self.space_of[thread_id]
        self._post(
            TRIGGERER[space], thread_id, OPERATOR[space] if mention else None, label="trigger"
        )

    @rule(
        who=people,
        thread=indexes,
        mention=maybe_agent,
        restricted_to=st.none() | people,
    )
    def post(self, who: str, thread: int, mention: str | None, restricted_to: str | None) -> None:
        """Anyone writes anywhere: denials, guest mentions, restricted messages."""
        self._post(who, _pick(self.threads, thread), mention, restricted_to, label="post")

    @rule(post=indexes, same_content=st.booleans())
    @precondition(lambda self: bool(self.posts))
    def repost(self, post: int, same_content: bool) -> None:
        """A retry: the same client id replays, with other content it conflicts."""
        who, thread_id, client_id, content = _pick(self.posts, post)
        body = content if same_content else f"{content} changed"

        def call(s: Stack) -> Awaitable[Any]:
            draft = MessageDraft(client_msg_id=client_id, content=body)
            return s.services.conversation.create_message(s.world.principal(who), thread_id, draft)

        self.both(call, lambda p: (p.message, p.replayed))

    @rule(who=people, forum=st.sampled_from(FORUMS), mention=maybe_agent)
    def create_thread(self, who: str, forum: str, mention: str | None) -> None:
        client_id = self._client_id("thread")

        def call(s: Stack) -> Awaitable[Any]:
            draft = MessageDraft(
                client_msg_id=client_id,
                content=f"{who} opens {client_id}",
                mentions=() if mention is None else (s.world.principal(mention).id,),
            )
            return s.services.conversation.create_thread(
                s.world.principal(who),
                s.world.channels[forum].id,
                title=f"Thread {client_id}",
                first_message=draft,
            )

        outcome = self.both(call, lambda c: (c.thread, c.message, c.replayed))
        if outcome[0] == "ok":  # type: ignore[index]
            thread = outcome[1][0]  # type: ignore[index]
            if thread.id not in self.threads:
                self.threads.append(thread.id)
                self.space_of[thread.id] = SPACE_OF[forum]

    @rule(who=people, thread=indexes)
    def close_thread(self, who: str, thread: int) -> None:
        thread_id = _pick(self.threads, thread)
        self.both(lambda s: s.services.conversation.close_thread(s.world.principal(who), thread_id))

    # -- agents write -------------------------------------------------------------------

    def _answer_run(self, run: int, with_run: bool) -> uuid.UUID | None:
        runs = self._runs(None)
        return _pick(runs, run)[0] if with_run and runs else None

    @rule(agent=agents, thread=indexes, run=indexes, with_run=st.booleans())
    def agent_post(self, agent: str, thread: int, run: int, with_run: bool) -> None:
        """createMessage by an agent, with or without run_id (never a trigger)."""
        thread_id = _pick(self.threads, thread)
        run_id = self._answer_run(run, with_run)
        client_id = self._client_id("answer")

        def call(s: Stack) -> Awaitable[Any]:
            draft = MessageDraft(
                client_msg_id=client_id,
                content=f"{agent} answers {client_id}",
                run_id=run_id,
                mentions=(s.world.principal("lotse").id,),
            )
            return s.services.conversation.create_message(
                s.world.principal(agent), thread_id, draft
            )

        self.both(call, lambda p: (p.message, p.replayed))

    @rule(
        thread=indexes,
        run=indexes,
        with_run=st.booleans(),
        behind=st.sampled_from((0, 0, 1, 2)),
        repeat=st.booleans(),
        operator=st.sampled_from((True, True, False)),
        agent=agents,
    )
    def agent_send(
        self,
        thread: int,
        run: int,
        with_run: bool,
        behind: int,
        repeat: bool,
        operator: bool,
        agent: str,
    ) -> None:
        """A send through the freshness gate: sent, held when behind, already_sent again."""
        thread_id = _pick(self.threads, thread)
        if operator:
            agent = OPERATOR[self.space_of[thread_id]]
        run_id = self._answer_run(run, with_run)
        latest = self.last["threads"][thread_id][0]
        client_id = self._client_id("send")

        def call(s: Stack) -> Awaitable[Any]:
            request = AgentSend(
                target=thread_id,
                content=f"{agent} sends {client_id}",
                client_message_id=client_id,
                run_id=run_id,
                freshness=SendFreshness(
                    target_key=thread_target_key(thread_id),
                    seen_up_to_seq=max(latest - behind, 0),
                ),
            )
            return s.services.agent_send.send(s.world.principal(agent), request)

        self.both(call)
        if repeat:
            self.both(call)

    # -- the agent feed -----------------------------------------------------------------

    @rule(agent=agents, from_ack=st.booleans())
    def poll(self, agent: str, from_ack: bool) -> None:
        """Deliveries with fresh tokens, from the own cursor or again from the ack."""
        self._poll_both(agent, from_ack, "poll")

    def _poll_both(self, agent: str, from_ack: bool, label: str) -> None:
        def call(s: Stack) -> Awaitable[Any]:
            after = None if from_ack else s.cursors.get(agent)
            return self._poll(s, agent, after)

        outcome = self.both(call, label=label)
        if outcome[0] == "ok":  # type: ignore[index]
            for delivery in outcome[1]:  # type: ignore[index]
                payload, token = delivery[2], delivery[3]
                if token is not None:
                    run_id = uuid.UUID(str(payload["run_id"]))
                    self.tokens.append((run_id, token))
                    self.newest[(run_id, delivery[0])] = token

    async def _poll(self, s: Stack, agent: str, after: int | None) -> list[tuple[object, ...]]:
        page = await s.services.runs.poll(s.world.principal(agent), after=after)
        # Each stack keeps its own cursor: seqs may differ (gaps in PostgreSQL).
        s.cursors[agent] = page.next_after
        return [
            (
                d.event.type,
                d.event.resource_id,
                dict(d.event.payload),
                d.invocation_token,
                d.redelivered,
            )
            for d in page.deliveries
        ]

    @rule(agent=agents)
    def ack(self, agent: str) -> None:
        def call(s: Stack) -> Awaitable[Any]:
            return s.services.runs.ack(s.world.principal(agent), s.cursors.get(agent, 0))

        self.both(call)

    @rule(agent=agents, mode=st.sampled_from(("steer", "queue", None)))
    def heartbeat(self, agent: str, mode: str | None) -> None:
        self.both(lambda s: s.services.runs.heartbeat(s.world.principal(agent), mode))

    # -- the run lifecycle --------------------------------------------------------------

    def _runs(self, states: frozenset[RunState] | None) -> list[tuple[uuid.UUID, str]]:
        """Known runs with their agent's handle, only those in `states` when given."""
        handles = {self.stacks[0].world.principal(h).id: h for h in AGENTS}
        found = [
            (run_id, handles[view[1]])
            for run_id, view in self.last["runs"].items()
            if states is None or view[2] in states
        ]
        return found or ([] if states is None else self._runs(None))

    def _run(self, run: int, states: frozenset[RunState], fitting: bool) -> tuple[uuid.UUID, str]:
        """A run by index: mostly one in a state the operation needs, else any."""
        return _pick(self._runs(states if fitting else None), run)  # type: ignore[no-any-return]

    def _token(self, run_id: uuid.UUID, agent: str, token: int, own: bool) -> str:
        if own:
            # The agent reads its feed first, as a real one does (new deliveries, tokens).
            self._poll_both(agent, False, "poll")
        mine = [t for r, t in self.tokens if r == run_id]
        if own and mine:
            # Mostly the newest token of the run, sometimes an older one.
            return mine[-1] if token % 3 else _pick(mine, token)
        if self.tokens:
            return _pick(self.tokens, token)[1]  # type: ignore[no-any-return]
        return "not-a-token"

    @rule(
        run=indexes,
        choice=indexes,
        actions=st.integers(min_value=1, max_value=AGENT_STEP_MAX_ACTIONS),
    )
    @precondition(lambda self: bool(self._runs(ACTIVE)))
    def agent_step(self, run: int, choice: int, actions: int) -> None:
        """The agent of an active run reads its feed and does the next usual things.

        Queued: start with the newest token. Running: acknowledge a follow-up, answer
        with the run's id, ask for input, finish (mostly in that order). Waiting: the
        person answers, and the agent resumes with the newest token (the one of that
        follow-up's delivery). Up to `actions` of them while the run stays active; both
        stacks are compared and the invariants checked after each.
        """
        run_id, agent = _pick(self._runs(ACTIVE), run)
        for index in range(actions):
            if self.last["runs"][run_id][2] not in ACTIVE:
                return
            if index:
                self.same_observable_state()
                self.postgres_holds_every_invariant()
            self._agent_action(run_id, agent, choice + index)

    def _agent_action(self, run_id: uuid.UUID, agent: str, choice: int) -> None:
        self._poll_both(agent, False, "poll")
        view = self.last["runs"][run_id]
        state = view[2]
        principal = "agent_step"
        people_ids = {self.stacks[0].world.principal(h).id: h for h in PEOPLE}
        if state is RunState.QUEUED:
            token = self.newest.get((run_id, EventType.AGENT_INVOCATION), "not-a-token")
            self.both(
                lambda s: s.services.runs.start(s.world.principal(agent), run_id, token),
                label=f"{principal}:start",
            )
        elif state is RunState.WAITING_INPUT:
            # The person who triggered the run answers the question; the delivery of
            # that follow-up carries the one token that resumes the run.
            self._post(people_ids[view[8]], view[0], None, label=f"{principal}:reply")
            self._poll_both(agent, False, "poll")
            token = self.newest.get((run_id, EventType.AGENT_FOLLOWUP), "not-a-token")
            self.both(
                lambda s: s.services.runs.resume(s.world.principal(agent), run_id, token),
                label=f"{principal}:resume",
            )
        else:
            done = self.progress.get(run_id, 0)
            self.progress[run_id] = done + 1
            scripted = choice % RANDOM_ACTION_EVERY
            action = RUNNING_ACTIONS[(done if scripted else choice) % len(RUNNING_ACTIONS)]
            open_followups = [m for m, f in view[7] if f in OPEN_FOLLOWUP_STATES]
            if action == "patch" and not open_followups:
                # The person who triggered the run writes again: a follow-up to patch.
                self._post(people_ids[view[8]], view[0], None, label=f"{principal}:reply")
                self.same_observable_state()
                view = self.last["runs"][run_id]
                open_followups = [m for m, f in view[7] if f in OPEN_FOLLOWUP_STATES]
            if action == "patch" and open_followups:
                op = FollowupOp(
                    message_id=_pick(open_followups, choice),
                    value=PATCH_VALUES[choice % len(PATCH_VALUES)],
                )
                self.both(
                    lambda s: s.services.runs.patch(
                        s.world.principal(agent), run_id, view[4], [op]
                    ),
                    label=f"{principal}:patch",
                )
            elif action == "answer":
                client_id = self._client_id("reply")

                def answer(s: Stack) -> Awaitable[Any]:
                    draft = MessageDraft(
                        client_msg_id=client_id, content=f"reply {client_id}", run_id=run_id
                    )
                    return s.services.conversation.create_message(
                        s.world.principal(agent), view[0], draft
                    )

                self.both(answer, lambda p: (p.message, p.replayed), f"{principal}:answer")
            elif action == "await_input":
                self.both(
                    lambda s: s.services.runs.await_input(s.world.principal(agent), run_id),
                    label=f"{principal}:await_input",
                )
            else:
                end = END_STATES[choice % len(END_STATES)]
                self.both(
                    lambda s: s.services.runs.finish(s.world.principal(agent), run_id, end, None),
                    label=f"{principal}:finish",
                )

    @rule(run=indexes, token=indexes, own_token=biased, fitting=biased, other_agent=unlikely)
    @precondition(lambda self: bool(self.last["runs"]))
    def start(
        self, run: int, token: int, own_token: bool, fitting: bool, other_agent: bool
    ) -> None:
        run_id, agent = self._run(run, frozenset({RunState.QUEUED}), fitting)
        if other_agent:
            agent = AGENTS[(AGENTS.index(agent) + 1) % len(AGENTS)]
        invocation = self._token(run_id, agent, token, own_token)
        self.both(lambda s: s.services.runs.start(s.world.principal(agent), run_id, invocation))

    @rule(run=indexes, fitting=biased)
    @precondition(lambda self: bool(self.last["runs"]))
    def await_input(self, run: int, fitting: bool) -> None:
        run_id, agent = self._run(run, frozenset({RunState.RUNNING}), fitting)
        self.both(lambda s: s.services.runs.await_input(s.world.principal(agent), run_id))

    @rule(run=indexes, token=indexes, own_token=biased, fitting=biased)
    @precondition(lambda self: bool(self.last["runs"]))
    def resume(self, run: int, token: int, own_token: bool, fitting: bool) -> None:
        run_id, agent = self._run(run, frozenset({RunState.WAITING_INPUT}), fitting)
        invocation = self._token(run_id, agent, token, own_token)
        self.both(lambda s: s.services.runs.resume(s.world.principal(agent), run_id, invocation))

    @rule(
        run=indexes,
        state=st.sampled_from(END_STATES),
        with_reason=st.booleans(),
        fitting=biased,
    )
    @precondition(lambda self: bool(self.last["runs"]))
    def finish(self, run: int, state: RunState, with_reason: bool, fitting: bool) -> None:
        run_id, agent = self._run(
            run, frozenset({RunState.RUNNING, RunState.WAITING_INPUT}), fitting
        )
        reason = "agent_error" if with_reason else None
        self.both(lambda s: s.services.runs.finish(s.world.principal(agent), run_id, state, reason))

    @rule(who=people, run=indexes, fitting=biased)
    @precondition(lambda self: bool(self.last["runs"]))
    def cancel(self, who: str, run: int, fitting: bool) -> None:
        run_id, _ = self._run(run, ACTIVE, fitting)
        self.both(lambda s: s.services.runs.cancel(s.world.principal(who), run_id))

    @rule(
        run=indexes,
        message=indexes,
        value=st.sampled_from(PATCH_VALUES),
        stale=unlikely,
        unknown_target=unlikely,
        fitting=biased,
    )
    @precondition(lambda self: bool(self.last["runs"]))
    def patch(
        self,
        run: int,
        message: int,
        value: FollowupState,
        stale: bool,
        unknown_target: bool,
        fitting: bool,
    ) -> None:
        """The adapter acknowledges a follow-up (delivered, absorbed) at a base version."""
        with_followups = frozenset(
            r for r, view in self.last["runs"].items() if view[2] in ACTIVE and view[7]
        )
        runs = [r for r in self._runs(None) if r[0] in with_followups]
        run_id, agent = _pick(runs, run) if fitting and runs else self._run(run, ACTIVE, True)
        view = self.last["runs"][run_id]
        followups = [message_id for message_id, _ in view[7]]
        target = self.threads[0] if unknown_target or not followups else _pick(followups, message)
        version = view[4] - 1 if stale else view[4]
        op = FollowupOp(message_id=target, value=value)
        self.both(lambda s: s.services.runs.patch(s.world.principal(agent), run_id, version, [op]))

    # -- administration -----------------------------------------------------------------

    @rule(
        who=st.sampled_from(("alex", "sam", "texter", "lotse")),
        on_space=st.booleans(),
        space=st.sampled_from(SPACES),
        channel=st.sampled_from(TEXT_CHANNELS + FORUMS),
        level=st.sampled_from((Level.READ, Level.WRITE, Level.TRIGGER)),
    )
    def grant(self, who: str, on_space: bool, space: str, channel: str, level: Level) -> None:
        def call(s: Stack) -> Awaitable[Any]:
            return s.services.admin.create_grant(
                s.world.principal("robin"),
                principal_id=s.world.principal(who).id,
                resource_kind=ResourceKind.SPACE if on_space else ResourceKind.CHANNEL,
                resource_id=s.world.spaces[space].id if on_space else s.world.channels[channel].id,
                level=level,
            )

        outcome = self.both(call)
        if outcome[0] == "ok":  # type: ignore[index]
            self.grants.append(outcome[1].id)  # type: ignore[index]

    @rule(grant=indexes, demo=unlikely)
    @precondition(lambda self: bool(self.grants or self.demo_grants))
    def revoke(self, grant: int, demo: bool) -> None:
        """Revoke a grant of the machine, rarely one of the demo world (and again: 404)."""
        grant_id = _pick(self.demo_grants if demo or not self.grants else self.grants, grant)
        self.both(lambda s: s.services.admin.delete_grant(s.world.principal("robin"), grant_id))

    @rule(
        agent=agents,
        supports_followups=st.none() | st.booleans(),
        enabled=st.sampled_from((True,) * 7 + (False,)),
    )
    def configure_agent(self, agent: str, supports_followups: bool | None, enabled: bool) -> None:
        def call(s: Stack) -> Awaitable[Any]:
            return s.services.admin.set_agent_config(
                s.world.principal("robin"),
                s.world.principal(agent).id,
                supports_followups=supports_followups,
                enabled=enabled,
            )

        self.both(call)

    # -- the clock and the jobs ---------------------------------------------------------

    @rule(advance=st.sampled_from(JOB_ADVANCES))
    def jobs(self, advance: str) -> None:
        """Move both clocks (a little, or past one job's window), then one jobs pass."""
        for stack in self.stacks:
            limits = stack.services.settings
            window: timedelta = (
                timedelta(seconds=SMALL_ADVANCE_SECONDS)
                if advance == "small"
                else getattr(limits, advance)
            )
            stack.clock.advance(window + timedelta(seconds=1))
        self.both(lambda s: s.services.runs.run_jobs_once())

    # -- after every step ---------------------------------------------------------------

    @invariant()
    def same_observable_state(self) -> None:
        memory, postgres = (self.runner.run(observe(s, self.threads)) for s in self.stacks)
        for part in memory:
            assert memory[part] == postgres[part], part
        self.last = memory

    @invariant()
    def postgres_holds_every_invariant(self) -> None:
        async def check() -> list[object]:
            assert self.pool is not None
            async with self.pool.connection() as conn:
                found: list[object] = list(await check_invariants(conn))
                await conn.rollback()
                return found

        assert self.runner.run(check()) == []


#: What the machine must have reached over a run: (operation, answer), the operation
#: being the rule or the `agent_step` action. A machine that never starts, resumes or
#: finishes a run would compare little; these make that a failure.
MUST_REACH = {
    ("trigger", "ok"),
    ("post", "not_found/None"),
    ("repost", "ok"),
    ("repost", "idempotency_conflict/None"),
    ("create_thread", "ok"),
    ("agent_post", "ok"),
    ("agent_send", "ok"),
    ("poll", "ok"),
    ("start", "ok"),
    ("await_input", "ok"),
    ("resume", "ok"),
    ("patch", "ok"),
    ("answer", "ok"),
    ("finish", "ok"),
    ("finish", "invalid_state_transition/None"),
    ("cancel", "ok"),
    ("grant", "ok"),
    ("revoke", "ok"),
    ("jobs", "ok"),
}


def reached() -> set[tuple[str, str]]:
    """(operation, answer) pairs seen, `agent_step:` actions counted as operations."""
    return {(label.split(":")[-1], answer) for label, answer in Differential.seen}


@pytest.mark.slow
def test_memory_and_postgres_agree_step_by_step(pg_server: str, pg_template: str) -> None:
    Differential.server = pg_server
    Differential.template = pg_template
    Differential.seen.clear()
    run_state_machine_as_test(
        Differential,
        settings=settings(
            max_examples=MAX_EXAMPLES,
            stateful_step_count=STATEFUL_STEP_COUNT,
            deadline=None,
            database=None,
            derandomize=DERANDOMIZE,
            print_blob=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    missing = MUST_REACH - reached()
    assert not missing, (missing, sorted(Differential.seen.items()))
